"""A pod whose hosts share nothing but a bucket: 2 processes (scripts/launch_local.py
--process_dirs), each in a folder of its own with its own temporary folder, every path gs:// on a
local Cloud Storage emulator. The host folders are wiped between commands, as preemption wipes a
pod's disks, so every step below can only use what the bucket holds:

train (checkpoints in the bucket) -> SIGTERM one host mid-run: both save the same step -> resume
on 1 process with 4 devices (another process count) -> evaluate on 2 processes into the bucket,
SIGKILL to the host that writes, mid-way -> resume: the batches it finished are kept, and metrics.json
is byte for byte that of an uninterrupted evaluation (on 1 process with 4 devices: the same global
batches, and a launch of one process, not two).
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.runner.test_multi_process import _env
from tests.runner.test_multi_process import launch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="scripts.train needs TensorFlow (seqio)")

STEPS = 8
RUN = "gs://runs/pod/run"
TRAIN = ["-m", "scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
         f"--gin.MODEL_DIR='{RUN}'", f"--gin.TRAIN_STEPS={STEPS}", "--gin.BATCH_SIZE=8",
         "--gin.MIXTURE_OR_TASK_NAME='heap_ah'", "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}",
         "--gin_bindings=configs.CheckpointConfig.every = 4",
         "--gin_bindings=configs.TrainingConfig.log_every = 1"]


def _evaluate(output_dir):
  """An evaluation of two tasks (gin/mixtures/custom.gin's mixture), so that a stop after the first
  leaves work; each process of each launch builds and compiles every task's pipeline and shapes, and
  the quickstart mixture's seven cost the three evaluations ~50 s of CPU more."""
  return ["-m", "scripts.evaluate", "--gin_file=gin/runs/eval.gin", "--gin_file=gin/quickstart.gin",
          "--gin_file=gin/mixtures/custom.gin", f"--gin.CHECKPOINT_PATH='{RUN}'",
          f"--gin.EVAL_OUTPUT_DIR='{output_dir}'", "--gin.BATCH_SIZE=4",
          "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}"]


def _wipe(hosts) -> list[str]:
  """Every file the hosts left in their folders (their tmp/ aside), then the folders gone."""
  left = sorted(os.path.relpath(os.path.join(folder, name), hosts)
                for folder, _, names in os.walk(hosts) for name in names
                if os.sep + "tmp" not in os.path.relpath(folder, hosts))
  shutil.rmtree(hosts, ignore_errors=True)
  return left


@pytest.fixture(scope="module")
def pod(gcs_emulator, compilation_cache, tmp_path_factory):
  hosts = str(tmp_path_factory.mktemp("hosts"))
  env = {**_env(compilation_cache), **gcs_emulator.env}
  two = ["--num_processes=2", "--devices_per_process=2", f"--process_dirs={hosts}"]
  one = ["--num_processes=1", "--devices_per_process=4", f"--process_dirs={hosts}"]
  result = {"terminated": launch(two, TRAIN, env, at_line=r"^\[0\] step 3/", send=signal.SIGTERM)}
  result["objects_after_sigterm"] = gcs_emulator.object_names("runs", "pod/run/checkpoints/")
  result["left_by_training"] = _wipe(hosts)
  result["steps_after_sigterm"] = _steps(gcs_emulator)
  result["resumed"] = launch(one, TRAIN, env)
  result["left_by_resuming"] = _wipe(hosts)
  # SIGKILL to the host that writes: what it scored is only what its finished parts hold.
  result["evaluation_killed"] = launch(two, _evaluate(f"{RUN}/eval"), env, at_line=r"^\[0\] \w+: \d+ items in ",
                                       send=signal.SIGKILL, to_process=0)
  result["parts_after_kill"] = [_read_object(gcs_emulator, name) for name in
                                gcs_emulator.object_names("runs", "pod/run/eval/predictions.parts/")]
  _wipe(hosts)
  result["evaluation_resumed"] = launch(two, _evaluate(f"{RUN}/eval"), env)
  result["left_by_evaluating"] = _wipe(hosts)
  result["uninterrupted"] = launch(one, _evaluate(f"{RUN}/eval_once"), env)
  result["objects"] = gcs_emulator.object_names("runs", "pod/")
  return result


def _steps(emulator) -> list[int]:
  return sorted({int(name.split("/")[3]) for name in emulator.object_names("runs", "pod/run/checkpoints/")
                 if name.split("/")[3].isdigit()})


def test_sigterm_to_one_host_saves_the_same_step_in_the_bucket_from_both(pod):
  code, out, err, _ = pod["terminated"]
  assert code == 143, err[-3000:]
  saved = re.findall(r"^\[(\d)\] SIGTERM: saved the checkpoint of step (\d+) in gs://runs/pod/run", out, re.MULTILINE)
  assert sorted(index for index, _ in saved) == ["0", "1"], out[-3000:]
  step = int(saved[0][1])
  assert {s for _, s in saved} == {str(step)} and 3 <= step < STEPS
  assert pod["steps_after_sigterm"][-1] == step


def test_the_run_resumes_from_the_bucket_on_another_process_count(pod):
  code, out, err, _ = pod["resumed"]
  assert code == 0, err[-3000:]
  step = int(re.findall(r"SIGTERM: saved the checkpoint of step (\d+)", pod["terminated"][1])[0])
  assert f"[0] resuming from the checkpoint of step {step} in {RUN}" in out
  assert f"[0] stopped at step {STEPS}" in out


def test_an_evaluation_killed_in_a_bucket_keeps_its_batches_and_resumes_to_the_same_metrics(pod, gcs_emulator):
  code, out, err, _ = pod["evaluation_killed"]
  assert code == 137, err[-3000:]
  first_task = re.search(r"^\[0\] (\w+): (\d+) items in ", out, re.MULTILINE)
  kept = [json.loads(line) for part in pod["parts_after_kill"] for line in part.splitlines()]
  assert sum(record["task"] == first_task[1] for record in kept) == int(first_task[2]), kept
  code, out, err, _ = pod["evaluation_resumed"]
  assert code == 0, err[-3000:]
  assert f"[0] resuming: {len(kept)} items already in {RUN}/eval/predictions.jsonl" in out, out[-3000:]
  code, _, err, _ = pod["uninterrupted"]
  assert code == 0, err[-3000:]
  read = lambda name: _read_object(gcs_emulator, f"pod/run/{name}")
  assert read("eval/metrics.json") == read("eval_once/metrics.json")
  assert read("eval/predictions.jsonl") == read("eval_once/predictions.jsonl")


def _read_object(emulator, name) -> bytes:
  import urllib.parse  # pylint: disable=g-import-not-at-top
  import urllib.request  # pylint: disable=g-import-not-at-top
  url = f"{emulator.url}/storage/v1/b/runs/o/{urllib.parse.quote(name, safe='')}?alt=media"
  with urllib.request.urlopen(url, timeout=30) as response:
    return response.read()


def test_the_bucket_holds_the_whole_run_and_no_host_kept_anything_another_needed(pod):
  objects = pod["objects"]
  for name in ("t5_config.json", "config.gin", "data_files.json", "eval/metrics.json", "eval/predictions.jsonl",
               "eval/report.html", "eval/evaluation.json", "eval/config.gin", f"checkpoints/{STEPS}/params/_METADATA",
               f"checkpoints/{STEPS}/opt_state/_METADATA", f"checkpoints/{STEPS}/data/metadata"):
    assert f"pod/run/{name}" in objects, name
  # Both hosts wrote their own shards of the step they saved on SIGTERM into it.
  step = pod["steps_after_sigterm"][-1]
  assert any(f"checkpoints/{step}/params/ocdbt.process_1/" in name for name in pod["objects_after_sigterm"]), (
      pod["objects_after_sigterm"])
  assert not any("predictions.parts" in name for name in objects)  # gathered at the end
  # The hosts' own folders: nothing but what a process may leave (no checkpoint, no output).
  for key in ("left_by_training", "left_by_resuming", "left_by_evaluating"):
    assert pod[key] == [], (key, pod[key])
