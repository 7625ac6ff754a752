"""Runs that cannot silently report the wrong numbers: provenance, preflight, empty inputs, macros."""
import json
import pathlib
import re

import gin
import numpy as np
import pytest

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models.config import T5Config
from runner import configs
from runner import evaluate
from runner import outputs
from runner import partitioning
from runner import provenance
from runner import run_dir
from runner import train
from scripts import gin_cli
from tests.conftest import PROJECT_ROOT

TINY = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 64, "targets": 16}
TASK = "heap_ah"  # a preference task over the quickstart's TuringAdvice file


@pytest.fixture
def gin_config():
  gin.clear_config()
  yield
  gin.clear_config()


def _train(model_dir, steps, train_dataset=configs.DatasetConfig(TASK, LENGTHS, "train", 2), checkpoint_every=1000,
           **training):
  """A run on TASK (or `train_dataset`); `training`: TrainingConfig's fields."""
  return train.train(model_config=TINY, train_dataset=train_dataset,
                     training=configs.TrainingConfig(steps, **{"log_every": 1000, **training}),
                     checkpoint=configs.CheckpointConfig(every=checkpoint_every),
                     partitioner=partitioning.Partitioner(), model_dir=str(model_dir))


def _evaluate(checkpoint_path, output_dir):
  return evaluate.evaluate(dataset=configs.DatasetConfig(TASK, LENGTHS, "test", 4),
                           checkpoint_path=str(checkpoint_path), output_dir=str(output_dir))


def test_evaluating_a_later_checkpoint_into_the_same_directory_is_refused(tmp_path):
  run, out = tmp_path / "run", tmp_path / "run" / "eval"
  # One run makes both checkpoints: step 2, evaluated first (by its step directory), and step 4,
  # the run's latest, evaluated next into the same directory.
  _train(run, 4, checkpoint_every=2)
  recorded = json.loads((run / run_dir.DATA_FILES).read_text())
  files = recorded["tasks"][TASK]["files"]
  assert [f["dataset"] for f in files] == ["heap/turingadvice"] and files[0]["quickstart"]
  assert len(files[0]["sha256"]) == 64 and recorded["tasks"][TASK]["examples"]["train"] > 0
  # Records counted apart from the reader: one situation per non-blank line, none skipped.
  situations = [line for line in pathlib.Path(files[0]["path"]).read_text().splitlines() if line.strip()]
  assert files[0]["records_read"] == len(situations) > 0 and files[0]["records_skipped"] == 0

  metrics = _evaluate(run / "checkpoints" / "2", out)
  provenance = outputs.read_provenance(str(out))
  assert outputs.read_metrics(str(out)) == metrics  # the provenance stays out of the metrics
  assert provenance["checkpoint_step"] == 2 and provenance["params_fingerprint"].startswith("sha256:")
  assert provenance["model_config"]["emb_dim"] == TINY.emb_dim
  assert provenance["vocabulary"] == {"class": "ByteVocabulary", "size": 359, "model_file": None,
                                      "model_sha256": None}
  assert provenance["data"][TASK]["files"] == [dict(files[0])]
  assert provenance["scorer"] == "likelihood" and provenance["normalization"] == "token"
  assert "at step 2" in (out / "report.html").read_text()
  assert f"{len(situations)} records read, 0 skipped" in (out / "report.html").read_text()

  with pytest.raises(ValueError, match=r"holds predictions of another evaluation; settings that differ "
                                       r"from .*evaluation.json: checkpoint_step: recorded 2, now 4; "
                                       r"params_fingerprint: recorded 'sha256:\w{64}', now 'sha256:\w{64}'; "
                                       r"resuming or reusing them would mix their scores. Use a new EVAL_OUTPUT_DIR"):
    _evaluate(run, out)
  assert outputs.read_provenance(str(out))["checkpoint_step"] == 2  # the earlier numbers stand


def test_params_fingerprint_changes_with_any_sampled_value_and_not_otherwise():
  params = {"a": np.zeros((3, 4), np.float32), "big": np.zeros(provenance.FINGERPRINT_SAMPLE * 4, np.float32)}
  same = {name: value.copy() for name, value in params.items()}
  changed = {**same, "a": same["a"].copy()}
  changed["a"][2, 3] = 1e-7
  assert provenance.params_fingerprint(params) == provenance.params_fingerprint(same)
  assert provenance.params_fingerprint(params) != provenance.params_fingerprint(changed)


@pytest.fixture
def empty_advice_file(tmp_path, gin_config):
  path = tmp_path / "turingadvice_eval.jsonl"
  path.write_text("")
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", {"heap/turingadvice": {"all": str(path)}})
  return path


def test_an_empty_training_source_stops_before_model_dir_exists(empty_advice_file, tmp_path):
  with pytest.raises(ValueError, match=rf"task {TASK}: split 'train' has no examples "
                                       rf"\(files read: {empty_advice_file}\)"):
    _train(tmp_path / "run", 2)
  assert not (tmp_path / "run").exists()


def test_an_empty_evaluation_split_stops_without_metrics(empty_advice_file, tmp_path):
  with pytest.raises(ValueError, match=rf"task {TASK}: split 'test' has no examples "
                                       rf"\(files read: {empty_advice_file}\)"):
    _evaluate(PROJECT_ROOT / "no_checkpoint_needed", tmp_path / "eval")
  assert not (tmp_path / "eval" / outputs.METRICS_FILE).exists()


@pytest.mark.parametrize("overrides, message", [
    (dict(steps=0), r"TRAIN_STEPS must be positive, got 0: the run would save nothing"),
    (dict(steps=-5), r"TRAIN_STEPS must be positive, got -5"),
    (dict(batch_size=0), r"BATCH_SIZE must be positive, got 0"),
    (dict(batch_size=3, accumulation_steps=2),
     r"BATCH_SIZE 3 does not split over the mesh's data axis \(1\) x "
     r"ACCUMULATION_STEPS \(2\); use a multiple of 2, e.g. 2"),
    # The tasks' byte vocabulary with 31869 sentinels: 3 special ids + 256 bytes + 31869 = 32128 ids.
    (dict(extra_ids=31869),
     r"the vocabulary has 32128 ids but MODEL_CONFIG.vocab_size is 384"),
])
def test_preflight_stops_before_model_dir_exists(gin_config, tmp_path, overrides, message):
  overrides = dict(overrides)
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.vocab.get_vocabulary.extra_ids", overrides.pop("extra_ids", 100))
  steps = overrides.pop("steps", 2)
  dataset = configs.DatasetConfig(TASK, LENGTHS, "train", overrides.pop("batch_size", 2))
  with pytest.raises(ValueError, match=message):
    _train(tmp_path / "run", steps, dataset, **overrides)
  assert not (tmp_path / "run").exists()


def test_a_misspelled_command_line_macro_is_named(gin_config, capsys):
  bindings = ["MODEL_DIR = '/tmp/unused'", "TRAIN_STEP = 5", "TRAIN_STEPS = 5"]
  files = ["gin/models/t5_1_1/tiny.gin", "gin/runs/finetune.gin", "gin/mixtures/quickstart.gin"]
  gin_cli.parse_gin(files, bindings, [str(PROJECT_ROOT)])
  assert gin_cli.unread_macros(bindings) == ["TRAIN_STEP"]
  gin_cli.check_macros(bindings, strict=False)
  warning = "WARNING: --gin.TRAIN_STEP: no configuration reads this macro (misspelled?)"
  assert warning in capsys.readouterr().err
  with pytest.raises(ValueError, match=r"--gin.TRAIN_STEP: .*--strict_gin refuses it"):
    gin_cli.check_macros(bindings, strict=True)


def test_a_short_run_reports_progress_at_least_every_tenth_of_its_steps(tmp_path, capsys):
  def batches(start):
    del start
    while True:
      # The shapes of _train's batches (LENGTHS): the step compiled for the test above is reused.
      yield {"input_ids": np.full((2, LENGTHS["inputs"]), 5, np.int32),
             "target_ids": np.full((2, LENGTHS["targets"]), 6, np.int32)}
  _train(tmp_path / "run", 20, train.BatchSource(batches, 2, LENGTHS), log_every=50)
  reported = [int(m) for m in re.findall(r"^step (\d+)/20", capsys.readouterr().out, re.MULTILINE)]
  assert reported == list(range(2, 21, 2))


@pytest.mark.parametrize("failure, code, line", [
    (KeyboardInterrupt(), 130, "interrupted (Ctrl-C); rerun the same command to resume"),
    (ValueError("BATCH_SIZE must be positive, got 0"), 1, "error: BATCH_SIZE must be positive, got 0"),
])
def test_scripts_end_a_ctrl_c_or_a_user_error_in_one_line(capsys, failure, code, line):
  def main(argv):
    del argv
    raise failure
  with pytest.raises(SystemExit) as stopped:
    gin_cli.one_line_errors(main)([])
  assert stopped.value.code == code and capsys.readouterr().err == line + "\n"
