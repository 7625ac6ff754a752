"""A full disk while a checkpoint is written: one line saying which step was not written and that
the earlier ones are intact, no partial step left behind, no library tracebacks (issue 35)."""
import gc
import logging
import re
import shutil
import subprocess
import sys
import time
import types

import jax
import pytest

from runner import checkpoint_integrity
from runner import checkpoints
from scripts import console
from tests.runner.test_checkpoint_damage import CONFIG, OPTIMIZER, _random_params


@pytest.fixture
def small_disk(tmp_path):
  """A 400 KiB tmpfs (two steps of CONFIG's parameters and optimizer state fit, not three)."""
  disk = tmp_path / "disk"
  disk.mkdir()
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], capture_output=True)
  if mounted.returncode:
    pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
  yield disk
  subprocess.run(["umount", str(disk)], check=True)


def _fill(disk, leave_bytes: int) -> None:
  free = shutil.disk_usage(disk).free
  with open(disk / "filler", "wb") as f:
    f.write(b"\0" * max(0, free - leave_bytes))


def _save(manager, step):
  params = jax.device_put(_random_params(CONFIG, step))
  checkpoints.save(manager, step, params, OPTIMIZER.init(params), {"batches": step})
  checkpoints.finish(manager)


def _assert_refused(error, run, step):
  message = str(error.value)
  assert re.fullmatch(rf"checkpoint step {step} was not written: {re.escape(str(run / 'checkpoints'))}: no space left "
                      r"on device.*; the steps saved before it are intact \(latest: 1\); free some space \(or name a "
                      r"MODEL_DIR elsewhere\) and rerun to resume", message), message
  assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["1"]  # no partial step
  step_1 = checkpoints.load_params(str(run), CONFIG)[1]  # verified against its checksums
  jax.tree.map(lambda a, b: None if (a == b).all() else pytest.fail("step 1 changed"),
               jax.device_get(step_1), _random_params(CONFIG, 1))


def test_a_step_that_cannot_fit_is_refused_before_a_file_is_written(small_disk, capfd):
  run = small_disk / "run"
  manager = checkpoints.checkpoint_manager(str(run))
  _save(manager, 1)
  _fill(small_disk, 20_000)
  capfd.readouterr()
  with pytest.raises(checkpoints.CheckpointWriteError) as error:
    _save(manager, 2)
  assert re.search(r"no space left on device \(the step needs up to 0\.\d MiB, 0\.0 MiB free\)", str(error.value))
  _assert_refused(error, run, 2)
  assert capfd.readouterr().err == ""


def test_a_disk_that_fills_while_orbax_writes_leaves_no_partial_step(small_disk, monkeypatch, caplog):
  """The space was there when the step started (another process filled the disk meanwhile):
  orbax's own failure is the same one line, and the partial step is removed. The console's filter
  keeps orbax's logged tracebacks of it off stderr, its hook TensorStore's late callbacks (their
  event loop closed)."""
  dropped = []
  monkeypatch.setattr(sys, "unraisablehook", console._without_closed_loop_callbacks(dropped.append))  # pylint: disable=protected-access
  absl = logging.getLogger("absl")
  monkeypatch.setattr(absl, "filters", [*absl.filters, console._not_orbax_write_failure])  # pylint: disable=protected-access
  run = small_disk / "run"
  manager = checkpoints.checkpoint_manager(str(run))
  _save(manager, 1)
  _fill(small_disk, 20_000)
  monkeypatch.setattr(checkpoint_integrity, "check_space", lambda *args: None)
  with pytest.raises(checkpoints.CheckpointWriteError) as error:
    _save(manager, 2)
  _assert_refused(error, run, 2)
  # orbax's other writes had ended before the partial step was removed (a late one would bring it back)
  assert not [thread.name for thread in checkpoint_integrity.orbax_threads()]
  # orbax's threads log their failure with tracebacks through absl: the one line says it
  logged = [record.getMessage() for record in caplog.records
            if record.name == "absl" and record.levelno >= logging.WARNING]
  assert not logged, logged
  gc.collect()
  assert not dropped, [str(u.exc_value) for u in dropped]  # only the closed loops' callbacks were unraisable


def test_the_console_hook_drops_only_closed_loop_callbacks():
  reported = []
  hook = console._without_closed_loop_callbacks(reported.append)  # pylint: disable=protected-access
  unraisable = lambda error: types.SimpleNamespace(exc_value=error, exc_type=type(error))  # pylint: disable=unnecessary-lambda-assignment
  hook(unraisable(RuntimeError("Event loop is closed")))
  hook(unraisable(RuntimeError("something else")))
  hook(unraisable(ValueError("Event loop is closed")))
  assert [str(u.exc_value) for u in reported] == ["something else", "Event loop is closed"]


def test_a_write_that_fails_in_the_background_is_named_by_its_own_step(small_disk, monkeypatch):
  """Training goes on while a step is written: the loop's check, each step, meets the failure as
  soon as the write has ended, naming the step that failed, not a later one (issue 53)."""
  monkeypatch.setattr(logging.getLogger("absl"), "disabled", True)  # orbax's threads log the failure
  run = small_disk / "run"
  manager = checkpoints.checkpoint_manager(str(run))
  _save(manager, 1)
  _fill(small_disk, 20_000)
  monkeypatch.setattr(checkpoint_integrity, "check_space", lambda *args: None)
  params = jax.device_put(_random_params(CONFIG, 2))
  checkpoints.save(manager, 2, params, OPTIMIZER.init(params), {"batches": 2})  # fails in the background
  with pytest.raises(checkpoints.CheckpointWriteError) as error:
    for _ in range(600):  # the training loop's check, each step: it raises once the write has failed
      checkpoints.check_writes(manager)
      time.sleep(0.05)
  _assert_refused(error, run, 2)
  checkpoints.save(manager, 3, params, OPTIMIZER.init(params), {"batches": 3})  # as the same run might go on
  with pytest.raises(checkpoints.CheckpointWriteError) as error:
    checkpoints.finish(manager)
  _assert_refused(error, run, 3)


def test_a_bucket_that_stops_answering_mid_write_is_one_line_naming_the_step_and_the_path():
  """The emulator (or the network) gone while step 40 is written: aiohttp's own words named no
  path and no step (issue 53); the failure is the step's, with the steps kept."""
  import aiohttp  # pylint: disable=g-import-not-at-top
  manager = types.SimpleNamespace(directory="gs://runs/run/checkpoints", all_steps=lambda: [20])
  with pytest.raises(checkpoints.CheckpointWriteError) as error:
    with checkpoint_integrity.naming_write_failure(manager, 40):
      raise aiohttp.ClientConnectionError("Cannot connect to host 127.0.0.1:4443 ssl:default")
  assert str(error.value) == (
      "checkpoint step 40 was not written: gs://runs/run/checkpoints: the storage service cannot be reached "
      "(Cannot connect to host 127.0.0.1:4443 ssl:default); the steps saved before it are intact (latest: 20); "
      "rerun the same command to resume once the storage answers")
  with pytest.raises(KeyError):  # anything else is a bug, and keeps its traceback
    with checkpoint_integrity.naming_write_failure(manager, 40):
      raise KeyError("params")
