"""scripts/launch_tpu_pod.sh rehearsed offline: a stand-in `gcloud` runs each worker's commands on
this machine, each worker in a folder of its own (its own HOME, so its own ~/t5-scoring and venv),
the two sharing nothing but an emulated bucket.

The first launch meets a worker whose image has Python 3.10 and nothing that could install the
lock's 3.11: it refuses in one line naming that worker, and the run starts nowhere. The second,
both workers sound, sets both up (a venv with the lock's Python, the version check) and trains a
few steps as one run of 2 processes into the bucket. pip cannot download here, so the stand-in
replaces the install (T5_POD_INSTALL) by a view of this environment's tested packages; what the
workers were sent to install, the lock and the TPU pins, is read from the commands they received.
"""
import importlib.util
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig

import pytest

from scripts import check_environment
from scripts import launch_local
from tests.conftest import PROJECT_ROOT
from tests.conftest import not_the_source
from tests.conftest import xla_flags

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="scripts.train needs TensorFlow (seqio)")

STAND_IN = r"""#!/usr/bin/env bash
# gcloud as the launcher uses it (compute tpus tpu-vm describe, scp, ssh) on the pod $POD_ROOT/worker_<i>,
# i < $POD_WORKERS: a worker's command runs here in its own HOME, with JAX_PROCESS_ID and TPU_WORKER_ID
# set, and the variables of $POD_ROOT/worker_<i>.env where that file exists (its image).
set -euo pipefail
verb=$4; shift 4
worker=all command="" names=()
for arg; do
  case $arg in
    --worker=*) worker=${arg#*=} ;;
    --command=*) command=${arg#*=} ;;
    --*) ;;
    *) names+=("$arg") ;;
  esac
done
if [[ $worker == all ]]; then workers=$(seq 0 $((POD_WORKERS - 1))); else workers=$worker; fi
case $verb in
  describe) echo "$POD_WORKERS" ;;
  scp) for i in $workers; do cp "${names[0]}" "$POD_ROOT/worker_$i/${names[1]#*:}"; done ;;
  ssh) for i in $workers; do
         printf '%s\t%s\n' "$i" "$command" >>"$POD_ROOT/commands.log"
         cd "$POD_ROOT/worker_$i"
         env HOME="$PWD" JAX_PROCESS_ID="$i" TPU_WORKER_ID="$i" $(cat "$POD_ROOT/worker_$i.env" 2>/dev/null) \
           bash -c "$command"
       done ;;
  *) echo "stand-in gcloud: no $verb" >&2; exit 64 ;;
esac
"""
# The rehearsal's install: the worker's venv sees this environment's packages (the tested versions),
# its own checkout's code coming first (python -m runs from it).
INSTALL = """#!/bin/sh
for packages in .venv/lib/python*/site-packages; do echo "{tested}" > "$packages/tested.pth"; done
"""
# An image whose python3 is 3.10, with no python3.11, no uv, and no pip to fetch one.
PYTHON_3_10 = """#!/bin/sh
[ "$1" = -c ] && echo 3.10 && exit 0
echo "/usr/bin/python3: No module named pip" >&2; exit 1
"""
LOCKED = "{}.{}".format(*check_environment.locked_python(str(PROJECT_ROOT / "requirements" / "constraints.txt")))
STEPS = 3
TRAIN = ["--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin", "--gin_file=gin/rehearsal.gin",
         "--gin.MODEL_DIR='gs://runs/tpu-rehearsal'", "--gin.BATCH_SIZE=8",
         "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}"]


def _write(path: pathlib.Path, text: str, executable: bool = False) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text)
  if executable:
    path.chmod(0o755)
  return path


def _git(repo, *args):
  subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)


def _image_with_python_3_10(folder: pathlib.Path) -> pathlib.Path:
  """A bin folder holding every command on this PATH but Python, pip and uv, and a python3 of 3.10."""
  bin_dir = folder / "bin"
  bin_dir.mkdir(parents=True)
  for directory in os.environ["PATH"].split(os.pathsep):
    for entry in os.scandir(directory) if os.path.isdir(directory) else ():
      if (not re.match(r"(python|pip|uv|pyenv)", entry.name) and not (bin_dir / entry.name).exists()
          and os.access(entry.path, os.X_OK)):
        (bin_dir / entry.name).symlink_to(entry.path)
  _write(bin_dir / "python3", PYTHON_3_10, executable=True)
  return bin_dir


def _launch(checkout, pod, env) -> tuple[int, str, str]:
  """The launcher, not a dry run, from `checkout` under the stand-in; every process it started ends with it."""
  process = subprocess.Popen(["bash", "scripts/launch_tpu_pod.sh", "--tpu=rehearsal", "--zone=here",
                              f"--log_dir={pod / 'logs'}", "--", *TRAIN], cwd=checkout, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = process.communicate(timeout=240)
  finally:
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  return process.returncode, out, err


@pytest.fixture(scope="module")
def rehearsal(gcs_emulator, tmp_path_factory):
  root = tmp_path_factory.mktemp("rehearsal")
  checkout, pod = root / "checkout", root / "pod"
  shutil.copytree(PROJECT_ROOT, checkout, ignore=not_the_source)
  _git(checkout, "init", "-q")
  _git(checkout, "add", ".")
  _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "rehearsal")
  _git(checkout, "remote", "add", "origin", str(checkout))
  _git(checkout, "fetch", "-q", "origin")
  # Uncommitted: it reaches the workers as the shipped patch (scp), or they train 400 steps.
  _write(checkout / "gin" / "rehearsal.gin", f"TRAIN_STEPS = {STEPS}\nMIXTURE_OR_TASK_NAME = 'heap_ah'\n")
  for worker in (0, 1):
    (pod / f"worker_{worker}").mkdir(parents=True)
  _write(root / "bin" / "gcloud", STAND_IN, executable=True)
  # The sound workers' image has the lock's Python (python3.X), as this environment's interpreter.
  base_python = os.path.realpath(sys._base_executable)  # pylint: disable=protected-access
  (root / "bin" / f"python{LOCKED}").symlink_to(base_python)
  install = _write(root / "install", INSTALL.format(tested=sysconfig.get_paths()["purelib"]), executable=True)
  env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
  env.update(gcs_emulator.env, PATH=f"{root / 'bin'}{os.pathsep}{env['PATH']}", POD_ROOT=str(pod), POD_WORKERS="2",
             T5_POD_INSTALL=str(install), JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{launch_local.free_port()}",
             JAX_NUM_PROCESSES="2", JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2))
  _write(pod / "worker_1.env", f"PATH={_image_with_python_3_10(root / 'image-3.10')}\n")
  result = {"refused": _launch(checkout, pod, env), "logs_refused": _logs(pod)}
  result["objects_after_refusal"] = gcs_emulator.object_names("runs", "tpu-rehearsal/")
  (pod / "worker_1.env").unlink()
  result["ran"] = _launch(checkout, pod, env)
  result["logs"] = _logs(pod)
  result["objects"] = gcs_emulator.object_names("runs", "tpu-rehearsal/")
  result["commands"] = (pod / "commands.log").read_text().splitlines()
  result["pod"] = pod
  return result


def _logs(pod) -> dict[int, str]:
  return {worker: (pod / "logs" / f"worker_{worker}.log").read_text() for worker in (0, 1)}


def test_a_worker_without_the_locks_python_is_refused_in_one_line_and_nothing_runs(rehearsal):
  code, out, err = rehearsal["refused"]
  assert code == 1, err
  host = os.uname().nodename
  refusal = (f"launch_tpu_pod.sh: worker 1 ({host}): no Python {LOCKED} (the lock's, requirements/constraints.txt): "
             f"python3 is 3.10, python{LOCKED} is absent and uv could not install it")
  assert err.splitlines()[0] == refusal, err
  assert err.splitlines()[1:] == [f"launch_tpu_pod.sh: worker 1 failed: see {rehearsal['pod'] / 'logs'}/worker_1.log",
                                  "launch_tpu_pod.sh: scripts.train was not started: a worker's setup failed"], err
  assert rehearsal["logs_refused"][1].strip() == refusal
  assert "check_environment: worker 0 (" in rehearsal["logs_refused"][0]  # the sound worker passed its check
  assert "started python -m" not in out and rehearsal["objects_after_refusal"] == []


def test_the_workers_are_sent_the_lock_and_the_tpu_pins_and_the_version_check(rehearsal):
  setups = [command for line in rehearsal["commands"] for command in [line.split("\t", 1)[1]]
            if "check_environment" in command]
  assert len(setups) == 4 and len(set(setups)) == 1  # both launches, both workers: one command
  setup = setups[0]
  assert "lock=requirements/constraints.txt" in setup
  assert ".venv/bin/python -m pip install -q -c $lock -r requirements/tpu.txt -e ." in setup
  assert setup.endswith("exec .venv/bin/python -m scripts.check_environment --constraints=$lock "
                        "--pins=requirements/tpu.txt --processes=2")
  pins = (PROJECT_ROOT / "requirements" / "tpu.txt").read_text()
  assert re.search(r"^libtpu==\S+$", pins, re.M)


def test_two_checked_workers_train_as_one_run_into_the_bucket(rehearsal):
  code, out, err = rehearsal["ran"]
  assert code == 0, err + rehearsal["logs"][0][-3000:] + rehearsal["logs"][1][-3000:]
  assert "started python -m scripts.train on 2 workers" in out
  for worker, log in rehearsal["logs"].items():
    checked = (rf"^check_environment: worker {worker} \(.+\): Python {re.escape(LOCKED)}\.\d+ and \d+ packages as "
               r"requirements/constraints.txt pins them; process count 2 \(JAX_NUM_PROCESSES\)$")
    assert re.search(checked, log, re.M), log
    assert f"data: process {worker} of 2 holds rows" in log, log[-3000:]
    worker_checkout = rehearsal["pod"] / f"worker_{worker}" / "t5-scoring"
    assert (worker_checkout / "gin" / "rehearsal.gin").is_file()  # the shipped patch
    venv = (worker_checkout / ".venv" / "pyvenv.cfg").read_text()  # its own, of the lock's Python
    assert re.search(rf"^version(_info)? = {re.escape(LOCKED)}\.\d+", venv, re.M), venv
    assert not list(worker_checkout.glob("gs:*"))
  assert f"step {STEPS}/{STEPS}" in rehearsal["logs"][0]
  assert any(name.startswith(f"tpu-rehearsal/checkpoints/{STEPS}/") for name in rehearsal["objects"])
