"""One writer per MODEL_DIR (runner/lease.py): a second training into a run directory another
holds stops in one line naming the holder, on a local disk and in a bucket; a lease whose holder
is gone is taken over with a line; a run whose lease was taken over stops before writing again."""
import json
import os
import signal
import subprocess
import sys
import time
from unittest import mock

import jax
import numpy as np
import pytest

from runner import checkpoints
from runner import lease as lease_lib
from runner import run_dir
import storage
from tests.conftest import PROJECT_ROOT
from tests.conftest import gs_traffic_to
from tests.helpers.processes import script_env

OTHER_HOST = {"host": "another-host", "pid": 4242, "token": "theirs", "started": "2026-11-28 01:02:03"}


def _hold(model_dir, **record):
  storage.create_new(run_dir.RunDir(str(model_dir)).lease, json.dumps(record).encode())


def test_a_second_run_is_refused_in_one_line_naming_the_holder(tmp_path):
  _hold(tmp_path, **OTHER_HOST, renewed=time.time() - 5)
  with pytest.raises(lease_lib.RunDirectoryInUseError) as refused:
    lease_lib.acquire(str(tmp_path))
  message = str(refused.value)
  assert "\n" not in message
  assert message.startswith(f"MODEL_DIR {tmp_path} is in use by another training: host another-host process 4242 "
                            "(started 2026-11-28 01:02:03, renewed 5 s ago)"), message
  assert json.loads((tmp_path / "lease.json").read_text())["token"] == "theirs"  # left as it was


def test_a_lease_not_renewed_in_time_is_taken_over_with_a_line(tmp_path, capsys):
  _hold(tmp_path, **OTHER_HOST, renewed=time.time() - 200)
  lease = lease_lib.acquire(str(tmp_path), stale_after_s=90)
  try:
    out = capsys.readouterr().out
    assert f"taking over the lease of MODEL_DIR {tmp_path} from host another-host process 4242" in out, out
    assert "not renewed for 20" in out, out
    record = json.loads((tmp_path / "lease.json").read_text())
    assert (record["host"], record["pid"]) == (os.uname().nodename, os.getpid())
  finally:
    lease.release()
  assert not (tmp_path / "lease.json").exists()


def test_a_lease_of_a_process_of_this_host_that_is_gone_is_taken_over_at_once(tmp_path, capsys):
  ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                         text=True, check=True)
  _hold(tmp_path, host=os.uname().nodename, pid=int(ended.stdout), token="killed", renewed=time.time())
  lease = lease_lib.acquire(str(tmp_path))
  lease.release()
  out = capsys.readouterr().out
  assert f"from host {os.uname().nodename} process {int(ended.stdout)}" in out and "its process is gone" in out


def test_the_holder_renews_its_lease_while_it_runs(tmp_path):
  lease = lease_lib.acquire(str(tmp_path), renew_every_s=0.05)
  path = tmp_path / "lease.json"
  first = json.loads(path.read_text())["renewed"]
  deadline = time.time() + 10
  while json.loads(path.read_text())["renewed"] == first and time.time() < deadline:
    time.sleep(0.05)
  lease.release()
  assert lease.lost_to is None and not path.exists()


def test_a_run_whose_lease_was_taken_over_stops_before_writing_and_leaves_the_new_lease(tmp_path):
  lease = lease_lib.acquire(str(tmp_path), renew_every_s=3600)  # renewed by hand here
  path = tmp_path / "lease.json"
  lease.renew()
  lease_lib.check(lease)
  storage.write_text(path, json.dumps({**OTHER_HOST, "renewed": time.time()}))  # as a run that found it stale
  lease.renew()
  with pytest.raises(lease_lib.LeaseLostError, match="taken over by host another-host process 4242"):
    lease_lib.check(lease)
  lease.release()
  assert json.loads(path.read_text())["token"] == "theirs"


def test_only_one_of_two_creations_of_a_bucket_object_succeeds(bucket):
  path = f"{bucket}/lease.json"
  assert storage.create_new(path, b"first")
  assert not storage.create_new(path, b"second")
  assert storage.read_text(path) == "first"


def test_a_bucket_lease_refuses_a_second_run(bucket):
  lease = lease_lib.acquire(bucket)
  holder = f"host {os.uname().nodename} process {os.getpid()}"
  try:
    with mock.patch.object(lease_lib.socket, "gethostname", return_value="another-host"):  # the second run's host
      with pytest.raises(lease_lib.RunDirectoryInUseError, match=f"in use by another training: {holder}"):
        lease_lib.acquire(bucket)
  finally:
    lease.release()
  assert not storage.exists(f"{bucket}/lease.json")


# Two scripts.train commands into one MODEL_DIR, as a user (or a relaunched pod job) starts them.
STEPS = 6
_TRAIN = [sys.executable, "-m", "scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
          f"--gin.TRAIN_STEPS={STEPS}", "--gin.BATCH_SIZE=4", "--gin.configs.CheckpointConfig.every=3"]


def _train_command(model_dir):
  return _TRAIN + [f"--gin.MODEL_DIR='{model_dir}'"]


def _two_at_once(model_dir, env, lease_exists):
  """Starts a training, stops it (SIGSTOP) once it holds its lease, runs a second into the same
  MODEL_DIR, then lets the first go on to the end: (the second's result, the first's)."""
  first = subprocess.Popen(_train_command(model_dir), cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
  try:
    deadline = time.time() + 300
    while not lease_exists() and first.poll() is None and time.time() < deadline:
      time.sleep(0.2)
    first.send_signal(signal.SIGSTOP)
    second = subprocess.run(_train_command(model_dir), cwd=PROJECT_ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    first.send_signal(signal.SIGCONT)
    out, _ = first.communicate(timeout=300)
  finally:
    first.kill()
    first.wait()
  return second, (first.returncode, out)


def _final_params(model_dir):
  return jax.device_get(checkpoints.load_params(storage.join(model_dir, "checkpoints", str(STEPS)))[1])


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory, compilation_cache):
  model_dir = tmp_path_factory.mktemp("undisturbed") / "run"
  subprocess.run(_train_command(model_dir), cwd=PROJECT_ROOT, env=script_env(compilation_cache), check=True,
                 capture_output=True, timeout=600)
  return _final_params(str(model_dir))


def _check(model_dir, second, first, undisturbed_params):
  assert second.returncode == 1, second.stdout + second.stderr
  lines = second.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: MODEL_DIR {model_dir} is in use by another training: "
                                                 f"host {os.uname().nodename} process "), second.stderr
  assert "step " not in second.stdout  # it trained nothing
  returncode, out = first
  assert returncode == 0 and f"stopped at step {STEPS}" in out, out
  assert not storage.exists(storage.join(model_dir, "lease.json"))  # released at the end
  params = _final_params(model_dir)
  jax.tree.map(np.testing.assert_array_equal, params, undisturbed_params)


def test_two_trainings_into_one_folder_the_second_stops_and_the_first_is_undisturbed(tmp_path, compilation_cache,
                                                                                    undisturbed):
  model_dir = tmp_path / "run"
  second, first = _two_at_once(model_dir, script_env(compilation_cache), (model_dir / "lease.json").exists)
  _check(str(model_dir), second, first, undisturbed)


def test_two_trainings_into_one_bucket_run_the_second_stops_and_the_first_is_undisturbed(
    gcs_emulator, compilation_cache, undisturbed, monkeypatch):
  model_dir = "gs://runs/lease_two_at_once/run"
  env = dict(script_env(compilation_cache), **gcs_emulator.env)
  with gs_traffic_to(gcs_emulator, monkeypatch):
    second, first = _two_at_once(model_dir, env, lambda: storage.exists(f"{model_dir}/lease.json"))
    _check(model_dir, second, first, undisturbed)
