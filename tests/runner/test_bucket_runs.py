"""A run whose MODEL_DIR is a bucket (a local Cloud Storage emulator), in this process: the
evaluation during training and its best checkpoint, reward normalisation, a Hugging Face export
of a bucket checkpoint, and the predictions an evaluation keeps in a bucket (no append there:
whole numbered parts, gathered at the end). Each keeps what the same run keeps on a local disk."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from models import checkpoint_export
from models import checkpoint_import
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import outputs
from runner import partitioning
from runner import run_dir
from runner import train
import storage
from tests.conftest import gs_traffic_to
from tests.helpers.processes import script_env
from tests.runner.test_train_eval import BEST
from tests.runner.test_train_eval import _train
from tests.scripts.test_best_of_n import INPUT_LENGTH


# gin/models/t5_1_1/tiny.gin, as a T5Config (the runner's entry functions take one).
REWARD_TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
                       num_decoder_layers=2, mlp_activations=("gelu", "linear"), dropout_rate=0.0, dtype="float32",
                       logits_via_embedding=False)


def _eval_lines(path) -> list[dict]:
  return [json.loads(line) for line in storage.read_text(path).splitlines()]


@pytest.fixture(scope="module")
def evaluated_runs(gcs_emulator, tmp_path_factory):
  """A run in the bucket evaluated every 2 steps, stopped after step 4 and resumed to step 6 (a
  restart reads the evaluations and the best step back from the bucket), and the same 6 steps on a
  local disk: (bucket run, local run). The export test exports the bucket run's last step."""
  model_dir = "gs://runs/evaluated_runs/run"
  with pytest.MonkeyPatch.context() as patch, gs_traffic_to(gcs_emulator, patch):
    _train(model_dir, 4)
    _train(model_dir, 6)
  local = tmp_path_factory.mktemp("evaluated") / "run"
  _train(local, 6)
  return model_dir, local


def test_evaluation_during_training_and_the_best_checkpoint_live_in_the_bucket(bucket, evaluated_runs):
  model_dir, local = evaluated_runs
  in_bucket = _eval_lines(run_dir.RunDir(model_dir).eval_metrics)
  on_disk = _eval_lines(run_dir.RunDir(str(local)).eval_metrics)
  assert [line["step"] for line in in_bucket] == [2, 4, 6]
  assert in_bucket == on_disk
  best = checkpoints.recorded_best(checkpoints.best_checkpoint_manager(model_dir, "max"))
  assert best[0] == in_bucket[-1]["best"]["step"] and best[1]["metric"] == BEST
  assert storage.list_names(run_dir.RunDir(model_dir).best) == [str(best[0])]


def test_a_reward_model_is_normalised_into_the_bucket_and_loads_from_it(bucket):
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  model_dir = f"{bucket}/reward"
  train.train(model_config=REWARD_TINY,
              train_dataset=configs.DatasetConfig("summarize_feedback_preference",
                                                  {"inputs": INPUT_LENGTH, "targets": 128}, "train", 4),
              training=configs.TrainingConfig(2, objective="pairwise", log_every=1000,
                                              normalize_reward_task="summarize_feedback_sft"),
              checkpoint=configs.CheckpointConfig(), partitioner=partitioning.Partitioner(), model_dir=model_dir)
  normalized = run_dir.RunDir(model_dir).normalized
  record = json.loads(storage.read_text(storage.join(normalized, "normalization.json")))
  _, trained = checkpoints.load_params(model_dir)
  config, shifted = checkpoints.load_params(normalized)
  assert config == REWARD_TINY and record["source_checkpoint"] == model_dir
  np.testing.assert_allclose(np.asarray(shifted["reward_head"]["bias"]),
                             np.asarray(trained["reward_head"]["bias"]) - record["offset"], rtol=0, atol=1e-6)


def test_a_bucket_checkpoint_exports_to_hugging_face_in_the_bucket(bucket, evaluated_runs):
  config, params = checkpoints.load_params(evaluated_runs[0])  # its last step, 6
  export = f"{bucket}/hf"
  checkpoint_export.save_hf_t5(export, config, params)
  assert storage.is_file(storage.join(export, "config.json"))
  imported_config, imported = checkpoint_import.load_hf_t5(export)
  assert imported_config == config
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(params), jax.device_get(imported))


def _record(i):
  return {"task": "t", "id": f"i{i}", "scores": [0.0, float(i)], "prediction": 1, "gold": [1]}


def test_predictions_in_a_bucket_are_whole_parts_read_back_on_resuming_and_gathered_at_the_end(bucket):
  layout = run_dir.EvalDir(bucket)
  first = outputs.predictions_appender(bucket)
  assert isinstance(first, outputs.PredictionParts)
  for i in range(3):
    first.write(_record(i))
  first.flush()
  first.write(_record(3))
  first.flush()
  # A stop before close: the parts are what is kept; a new writer (a resumed run) reads them back.
  assert storage.list_names(layout.prediction_parts) == ["000000.jsonl", "000001.jsonl"]
  resumed = outputs.predictions_appender(bucket)
  assert resumed.done == {("t", f"i{i}") for i in range(4)} == outputs.written_ids(bucket)
  with pytest.raises(outputs.OutputError, match=r"item \('t', 'i1'\) was already written"):
    resumed.write(_record(1))
  resumed.write(_record(4))
  resumed.close()
  assert not storage.exists(layout.prediction_parts)
  assert [r["id"] for r in outputs.read_predictions(layout.predictions)] == [f"i{i}" for i in range(5)]
  # A stop after gathering, before the parts were deleted: the part is not read twice.
  storage.write_text(storage.join(layout.prediction_parts, "000000.jsonl"), json.dumps(_record(2)) + "\n")
  assert len(outputs.predictions_appender(bucket).done) == 5


def test_a_run_in_a_missing_bucket_stops_before_compiling_in_one_line(gcs_emulator, compilation_cache, tmp_path,
                                                                     tmp_path_factory):
  """scripts.train and scripts.evaluate name the macro, the path and the cause, exit 1, and leave
  nothing on disk (no `gs:` folder in the working directory). The evaluation's checkpoint is there
  (a missing one is refused first: tests/scripts/test_one_line_refusals.py)."""
  env = {**script_env(compilation_cache), **gcs_emulator.env}
  checkpoint = tmp_path_factory.mktemp("checkpoint") / "hf"
  checkpoint_export.save_hf_t5(str(checkpoint), REWARD_TINY, init_params(REWARD_TINY, jax.random.PRNGKey(0)))
  commands = {
      "MODEL_DIR": ["-m", "scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
                    "--gin.MODEL_DIR='gs://no-such-bucket/run'"],
      "EVAL_OUTPUT_DIR": ["-m", "scripts.evaluate", "--gin_file=gin/runs/eval.gin", "--gin_file=gin/quickstart.gin",
                          f"--gin.CHECKPOINT_PATH='{checkpoint}'", "--gin.EVAL_OUTPUT_DIR='gs://no-such-bucket/eval'"],
  }
  for macro, arguments in commands.items():
    result = subprocess.run([sys.executable, *arguments], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"error: {macro} gs://no-such-bucket/{'run' if macro == 'MODEL_DIR' else 'eval'}: the bucket "
        "gs://no-such-bucket does not exist (or these credentials cannot see it)"], result.stderr[-3000:]
    assert "step" not in result.stdout and "preflight" not in result.stdout.lower(), result.stdout[-2000:]
    assert os.listdir(tmp_path) == []


def test_a_damaged_step_in_a_bucket_is_set_aside_and_the_run_resumes_from_the_one_before(bucket, capsys):
  """A bucket has no rename: the damaged step's objects are copied to `<step>.damaged` and deleted."""
  model_dir = f"{bucket}/run"
  _train(model_dir, 4, every=0, best_metric=None)  # checkpoints at steps 2 and 4
  layout = run_dir.RunDir(model_dir)
  storage.remove(storage.join(layout.checkpoints, "4", "params", "_METADATA"))
  capsys.readouterr()
  result = _train(model_dir, 4, every=0, best_metric=None)
  assert result.step == 4
  assert f"checkpoint step 4 in {layout.checkpoints} is unreadable" in capsys.readouterr().out
  assert storage.list_names(layout.checkpoints) == ["2", "4", "4.damaged"]
  assert not storage.exists(storage.join(layout.checkpoints, "4.damaged", "params", "_METADATA"))
