"""A pod slice on one machine: 2 processes x 2 CPU devices joined by jax.distributed over gloo
(scripts/launch_local.py), the program a TPU pod slice runs.

One uninterrupted single-process run on 4 devices is the reference. The two-process run of the
same command is interrupted twice on its way to the same step: SIGTERM to one process (both save
the same step and exit), then, after resuming, SIGKILL of one process (the other stops by itself,
naming the lost one); a last rerun finishes. Its losses at every step and its final parameters
must be the single process's, and its checkpoint must restore with 1 and with 4 processes on
another mesh.
"""
import importlib.util
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import jax
import numpy as np
import pytest

from runner import checkpoints
from runner import partitioning
from runner import train
from runner import trainer
from tests.conftest import PROJECT_ROOT, xla_flags

# The runs need TensorFlow (seqio); found without importing it, which takes seconds.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="scripts.train needs TensorFlow")

STEPS = 20
# One task of the quickstart mixture: every process builds its input pipeline, and the mixture's six
# cost each of the seven training processes ~15 s more (the mixture is trained in tests/test_readme.py).
TINY_FLAGS = [f"--gin.TRAIN_STEPS={STEPS}", "--gin.BATCH_SIZE=8", "--gin.MIXTURE_OR_TASK_NAME='heap_ah'",
              "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
              "--gin_bindings=configs.CheckpointConfig.every = 4",
              "--gin_bindings=configs.TrainingConfig.log_every = 1"]
HEARTBEAT_SECONDS = 10  # how soon the coordination service declares a killed process lost


def readme_pod_command() -> list[str]:
  """docs/distributed.md's `.venv/bin/python -m scripts.launch_local ... -- -m scripts.train ...`, as words."""
  text = re.sub(r"\\\n\s*", " ", (PROJECT_ROOT / "docs" / "distributed.md").read_text())
  line = next(line for line in text.splitlines() if line.startswith(".venv/bin/python -m scripts.launch_local "))
  return shlex.split(line)


def pod_training(model_dir) -> tuple[list[str], list[str]]:
  """(launcher flags, training arguments) of the README's command, with tiny settings and `model_dir`."""
  words = readme_pod_command()
  split = words.index("--")
  return words[3:split], [*words[split + 1:], *TINY_FLAGS, f"--gin.MODEL_DIR='{model_dir}'"]


def _env(compilation_cache, devices=None):
  env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), JAX_PLATFORMS="cpu",
             JAX_COMPILATION_CACHE_DIR=str(compilation_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  if devices:
    env["XLA_FLAGS"] = xla_flags(devices)
  return env


def launch(launcher_flags, arguments, env, at_line=None, send=None, to_process=1):
  """Runs `python -m scripts.launch_local LAUNCHER_FLAGS -- ARGUMENTS`; with `at_line` (a regex)
  sends `send` to process `to_process` when a line matches. Returns (exit code, stdout, stderr,
  seconds from the signal to the end)."""
  command = [sys.executable, "-m", "scripts.launch_local", *launcher_flags,
             f"--heartbeat_timeout_seconds={HEARTBEAT_SECONDS}", "--grace_seconds=90", "--", *arguments]
  with tempfile.TemporaryFile("w+") as stderr:  # a file: a chatty stderr cannot fill a pipe
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr,
                               text=True)
    lines, pids, signalled_at = [], {}, None
    try:
      for line in process.stdout:
        lines.append(line)
        if match := re.match(r"launch_local: process (\d+) of \d+ is pid (\d+)", line):
          pids[int(match[1])] = int(match[2])
        if at_line and signalled_at is None and re.search(at_line, line):
          os.kill(pids[to_process], send)
          signalled_at = time.monotonic()
      process.wait(timeout=300)
    finally:
      process.kill()
    stderr.seek(0)
    err = stderr.read()
  elapsed = None if signalled_at is None else time.monotonic() - signalled_at
  if at_line:
    assert signalled_at is not None, f"no line matched {at_line!r}:\n{''.join(lines)[-3000:]}\n{err[-3000:]}"
  return process.returncode, "".join(lines), err, elapsed


def logged_losses(model_dir) -> dict[int, list[float]]:
  """Every loss the run's TensorBoard events hold, by step, in the order written."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  losses = {}
  for path in sorted(pathlib.Path(model_dir, "train").glob("events.out.tfevents.*"), key=os.path.getmtime):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.tag == "loss":
          losses.setdefault(event.step, []).append(float(tf.make_ndarray(value.tensor)))
  return losses


@pytest.fixture(scope="module")
def runs(compilation_cache, tmp_path_factory):
  root = tmp_path_factory.mktemp("pod")
  single_dir, pod_dir = root / "single", root / "pod"
  launcher_flags, pod_command = pod_training(pod_dir)
  assert launcher_flags == ["--num_processes=2", "--devices_per_process=2"], launcher_flags
  _, single_command = pod_training(single_dir)
  single = subprocess.Popen([sys.executable, *single_command], cwd=PROJECT_ROOT,
                            env=_env(compilation_cache, devices=4), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  env = _env(compilation_cache)
  terminated = launch(launcher_flags, pod_command, env, at_line=r"^\[0\] step 5/", send=signal.SIGTERM)
  killed = launch(launcher_flags, pod_command, env, at_line=r"^\[0\] step 14/", send=signal.SIGKILL)
  after_kill = logged_losses(pod_dir)
  finished = launch(launcher_flags, pod_command, env)
  out, err = single.communicate(timeout=600)
  assert single.returncode == 0, err[-3000:]
  return {"single_dir": single_dir, "pod_dir": pod_dir, "terminated": terminated, "killed": killed,
          "after_kill": after_kill, "finished": finished}


def test_sigterm_to_one_process_makes_both_save_the_same_step(runs):
  code, out, err, _ = runs["terminated"]
  assert code == 143, err[-3000:]
  saved = re.findall(r"^\[(\d)\] SIGTERM: saved the checkpoint of step (\d+)", out, re.MULTILINE)
  assert sorted(index for index, _ in saved) == ["0", "1"], out[-3000:]
  assert len({step for _, step in saved}) == 1 and 5 <= int(saved[0][1]) < STEPS, saved


def test_sigkill_of_one_process_stops_the_other_naming_it(runs):
  code, out, err, elapsed = runs["killed"]
  assert code == 137, err[-3000:]  # the first failure: process 1, killed
  assert elapsed < 60, f"the survivor took {elapsed:.0f} s to stop"
  assert "launch_local: killing process 0" not in err  # it stopped by itself
  survivor = "\n".join(line[4:] for line in err.splitlines() if line.startswith("[0] "))
  # One line naming the lost process, in place of the runtime's report and stack trace (issue 35).
  assert survivor.rstrip().endswith(
      f"lost host: process 1 of the run stopped sending heartbeats (none for {HEARTBEAT_SECONDS} s: preempted, "
      "killed or unreachable); process 0 stops too; rerun the command on every host: it resumes from the last "
      "checkpoint"), survivor[-3000:]
  assert "Check failure stack trace" not in err and "coordination_service" not in err, err[-3000:]


def test_two_processes_train_exactly_as_one_and_resume_where_they_stopped(runs):
  code, out, err, _ = runs["finished"]
  assert code == 0, err[-3000:]
  assert re.search(r"^\[0\] resuming from the checkpoint of step \d+", out, re.MULTILINE)
  single, pod = logged_losses(runs["single_dir"]), logged_losses(runs["pod_dir"])
  assert sorted(single) == sorted(pod) == list(range(1, STEPS + 1))
  # The last value of a step is the finished run's; the same batches, the same losses.
  np.testing.assert_allclose([pod[step][-1] for step in single], [single[step][-1] for step in single],
                             rtol=0, atol=1e-5)
  # Steps the SIGKILL threw away (after the last checkpoint) were recomputed bit for bit.
  redone = [step for step, values in pod.items() if len(values) > 1 and step in runs["after_kill"]]
  assert redone, pod
  for step in redone:
    assert len(set(pod[step])) == 1, (step, pod[step])
  _, single_params = checkpoints.load_params(str(runs["single_dir"]))
  _, pod_params = checkpoints.load_params(str(runs["pod_dir"]))
  differences = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))),
                             single_params, pod_params)
  assert max(jax.tree.leaves(differences)) <= 1e-5


RESTORE = """
import json, sys
import jax, numpy as np
from runner import checkpoints, partitioning, trainer, train
from models.config import T5Config
partitioning.initialize_distributed()
model_dir, expected = sys.argv[1], np.load(sys.argv[2])
config = checkpoints.read_model_config(model_dir)
mesh = partitioning.create_mesh(2, 2)
optimizer = trainer.make_optimizer(learning_rate=trainer.make_schedule())  # finetune.gin's: a schedule
step, params, opt_state, _ = train._initialise_or_restore(
    checkpoints.checkpoint_manager(model_dir, 3), config, trainer.get_objective("cross_entropy"),
    optimizer, None, 0, partitioning.Partitioner.for_mesh(mesh))
checked = 0
for path, leaf in jax.tree_util.tree_flatten_with_path({"params": params, "opt_state": opt_state})[0]:
  want = expected[jax.tree_util.keystr(path)]
  for shard in leaf.addressable_shards:
    assert np.array_equal(np.asarray(shard.data), want[shard.index]), jax.tree_util.keystr(path)
    checked += 1
print(json.dumps({"step": int(step), "process": jax.process_index(), "processes": jax.process_count(),
                  "mesh": dict(mesh.shape), "shards_checked": checked,
                  "wi_shard": list(params["encoder"]["layers_0"]["mlp"]["wi_0"]["kernel"].addressable_shards[0].data.shape)}))
"""


def test_a_two_process_checkpoint_restores_with_one_and_with_four_processes_on_another_mesh(
    runs, compilation_cache, tmp_path):
  """Saved by 2 processes on mesh (4, 1); restored on mesh (2, 2) (the MLP split over `model`)
  by 1 process with 4 devices and by 4 processes with 1 device each: every shard holds the values
  the checkpoint holds, read back here whole on one device."""
  pod_dir = str(runs["pod_dir"])
  step, params, opt_state, _ = train._initialise_or_restore(  # pylint: disable=protected-access
      checkpoints.checkpoint_manager(pod_dir, 3), checkpoints.read_model_config(pod_dir),
      trainer.get_objective("cross_entropy"),
      trainer.make_optimizer(learning_rate=trainer.make_schedule()), None, 0,
      partitioning.Partitioner.for_mesh(partitioning.create_mesh(1, 1, devices=jax.devices()[:1])))
  expected = {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in
              jax.tree_util.tree_flatten_with_path({"params": params, "opt_state": opt_state})[0]}
  expected_file = tmp_path / "expected.npz"
  np.savez(expected_file, **expected)
  (tmp_path / "restore.py").write_text(textwrap.dedent(RESTORE))
  arguments = [str(tmp_path / "restore.py"), pod_dir, str(expected_file)]
  one = subprocess.run([sys.executable, *arguments], cwd=PROJECT_ROOT, env=_env(compilation_cache, devices=4),
                       capture_output=True, text=True, timeout=300)
  assert one.returncode == 0, one.stderr[-3000:]
  code, out, err, _ = launch(["--num_processes=4", "--devices_per_process=1"], arguments, _env(compilation_cache))
  assert code == 0, err[-3000:]
  reports = [json.loads(one.stdout.splitlines()[-1])] + [
      json.loads(line[4:]) for line in out.splitlines() if re.match(r"\[\d\] \{", line)]
  assert sorted((r["processes"], r["process"]) for r in reports) == [(1, 0), (4, 0), (4, 1), (4, 2), (4, 3)]
  for report in reports:
    assert report["step"] == step == STEPS
    assert report["mesh"] == {"data": 2, "model": 2}
    assert report["shards_checked"] >= len(expected)
    hidden = expected["['params']['encoder']['layers_0']['mlp']['wi_0']['kernel']"].shape
    assert report["wi_shard"] == [hidden[0], hidden[1] // 2]
