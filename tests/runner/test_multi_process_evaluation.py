"""Offline evaluation as a pod on one machine: 2 processes x 2 CPU devices (scripts/launch_local.py)
score a task as one process with 4 devices does, and process 0 alone writes the outputs.

The 1-process run is the reference; the 2-process run of the same command runs beside it. A
second 2-process run resumes a predictions.jsonl that holds the reference's first items and a last
line cut short (an interrupted write): process 0 repairs it, both processes skip the same items,
and the file is completed to the reference's. That run splits the model over the two processes
(mesh (data 1, model 4)): a model larger than one host scores as one device does.
"""
import importlib.util
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import outputs
from tests.conftest import PROJECT_ROOT
from tests.runner.test_multi_process import _env, launch

# The scripts need TensorFlow (seqio); found without importing it here, which takes seconds.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="scripts.evaluate needs TensorFlow")

# gin/models/t5_1_1/tiny.gin's model (gin/quickstart.gin includes it), with random parameters.
CONFIG = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
                  num_decoder_layers=2, mlp_activations=("gelu", "linear"), logits_via_embedding=False)
# 12 items in batches of 8: one batch holds all 8 rows' items, the other 4 (bucketed: the first).
EVAL_FLAGS = ["--gin_file=gin/runs/eval.gin", "--gin_file=gin/quickstart.gin",
              "--gin.MIXTURE_OR_TASK_NAME='asq_intent_cloze'", "--gin.BATCH_SIZE=8",
              "--gin.TASK_FEATURE_LENGTHS={'inputs': 128, 'targets': 32}"]
KEPT = 9  # the reference's items the resumed file starts with: the second batch is half done


def _launch(arguments, env):
  """`python ARGUMENTS` as 2 processes x 2 devices (scripts.launch_local): (exit code, stdout, stderr)."""
  return launch(["--num_processes=2", "--devices_per_process=2"], arguments, env)[:3]


def _command(checkpoint, output_dir):
  return ["-m", "scripts.evaluate", *EVAL_FLAGS, f"--gin.CHECKPOINT_PATH='{checkpoint}'",
          f"--gin.EVAL_OUTPUT_DIR='{output_dir}'"]


@pytest.fixture(scope="module")
def runs(compilation_cache, tmp_path_factory):
  root = tmp_path_factory.mktemp("pod_evaluation")
  checkpoint = root / "checkpoint"
  checkpoints.save_params(str(checkpoint / "params"), init_params(CONFIG, jax.random.PRNGKey(0)))
  checkpoints.write_model_config(str(checkpoint), CONFIG)
  single_dir, pod_dir, resumed_dir = root / "single", root / "pod", root / "resumed"
  single = subprocess.Popen([sys.executable, *_command(checkpoint, single_dir)], cwd=PROJECT_ROOT,
                            env=_env(compilation_cache, devices=4), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  pod = _launch(_command(checkpoint, pod_dir), _env(compilation_cache))
  _, err = single.communicate(timeout=300)
  assert single.returncode == 0, err[-3000:]

  resumed_dir.mkdir()
  shutil.copy(single_dir / "evaluation.json", resumed_dir)  # the provenance a resumed run checks
  lines = (single_dir / outputs.PREDICTIONS_FILE).read_text().splitlines(keepends=True)
  (resumed_dir / outputs.PREDICTIONS_FILE).write_text("".join(lines[:KEPT]) + lines[KEPT][:40])
  # On mesh (data 1, model 4): the model split over both processes' devices, each holding every row.
  resumed = _launch([*_command(checkpoint, resumed_dir), "--gin.MESH_SHAPE=(1, 4)"], _env(compilation_cache))
  return {"single_dir": single_dir, "pod_dir": pod_dir, "resumed_dir": resumed_dir, "pod": pod,
          "resumed": resumed}


def _predictions(directory):
  return outputs.read_predictions(str(directory / outputs.PREDICTIONS_FILE))


def _assert_same_predictions(got, want):
  assert [r["id"] for r in got] == [r["id"] for r in want]
  assert len({r["id"] for r in got}) == len(got) == 12
  for mine, theirs in zip(got, want):
    assert mine["prediction"] == theirs["prediction"], mine["id"]
    np.testing.assert_allclose(mine["scores"], theirs["scores"], rtol=0, atol=1e-5, err_msg=mine["id"])
    same_fields = set(mine) - {"scores", "log_likelihoods"}
    assert {k: mine[k] for k in same_fields} == {k: theirs[k] for k in same_fields}


def test_two_processes_score_every_item_once_as_one_process_does(runs):
  code, out, err = runs["pod"]
  assert code == 0, err[-3000:]
  _assert_same_predictions(_predictions(runs["pod_dir"]), _predictions(runs["single_dir"]))
  pod, single = outputs.read_metrics(str(runs["pod_dir"])), outputs.read_metrics(str(runs["single_dir"]))
  assert pod.keys() == single.keys() and pod
  for task, by_name in single.items():
    assert pod[task].keys() == by_name.keys()
    for name, entry in by_name.items():
      for key in ("value", "low", "high"):
        assert abs(pod[task][name][key] - entry[key]) <= 1e-5, (task, name, key)


def test_only_process_zero_writes_the_outputs(runs):
  code, out, err = runs["pod"]
  assert code == 0, err[-3000:]
  assert sorted(p.name for p in runs["pod_dir"].iterdir()) == sorted(p.name for p in runs["single_dir"].iterdir())
  assert [p.name for p in runs["pod_dir"].rglob("predictions*")] == [outputs.PREDICTIONS_FILE]
  assert "\n[0] wrote " in out and "\n[1] wrote " not in out, out[-3000:]


def test_two_processes_resume_a_cut_short_file_to_the_one_process_outputs(runs):
  code, out, err = runs["resumed"]
  assert code == 0, err[-3000:]
  for index in (0, 1):  # both processes know what is done, read after process 0's repair
    assert f"\n[{index}] resuming: {KEPT} items already in " in out, out[-3000:]
  _assert_same_predictions(_predictions(runs["resumed_dir"]), _predictions(runs["single_dir"]))
  assert outputs.read_metrics(str(runs["resumed_dir"])).keys() == outputs.read_metrics(str(runs["single_dir"])).keys()
