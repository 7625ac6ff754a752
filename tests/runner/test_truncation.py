"""Nothing cut without a word (issue 48): what the feature lengths cut of each task's items is
counted exactly (untrimmed tokens with EOS), printed, recorded in metrics.json, the report,
eval_metrics.jsonl and data_files.json, and refused in one line with TRUNCATED_CANDIDATES = 'refuse'.

The items are a hand-made ASQ file at {'inputs': 32, 'targets': 16} in bytes (one id per ASCII
character, plus EOS): a long input, a long candidate, one that fits exactly and one a token over.
"""
import itertools
import json
import os
import subprocess
import sys

import gin
import jax
import numpy as np
import pytest

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import data
from runner import evaluate
from runner import outputs
from runner import partitioning
from runner import run_dir
from runner import scoring_loop
from runner import train
from runner import truncation
from tests.conftest import PROJECT_ROOT

CONFIG = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 32, "targets": 16}
TASK = "asq_intent_cloze"
FILES = "t5_tasks.tasks.data_files.files"
ITEMS = [
    {"id": "long_input", "narrative": "n" * 40, "qn1": "Why a?", "qn2": "Why b?", "label": 0},  # 41 > 32
    {"id": "long_candidate", "narrative": "short one.", "qn1": "q" * 19 + "?", "qn2": "Why b?", "label": 0},  # 21 > 16
    {"id": "exact", "narrative": "e" * 31, "qn1": "x" * 14 + "?", "qn2": "y" * 14 + "?", "label": 0},  # 32, 16, 16
    {"id": "one_over", "narrative": "o" * 32, "qn1": "z" * 15 + "?", "qn2": "Why c?", "label": 0},  # 33, 17
]
EXPECTED = {
    "items": 4, "feature_lengths": LENGTHS,
    "inputs": {"length": 32, "count": 4, "cut": 2, "items_cut": 2, "longest": 41, "first_cut": "long_input"},
    "candidates": {"length": 16, "count": 8, "cut": 2, "items_cut": 2, "longest": 21, "first_cut": "long_candidate"},
}
LINE = ("asq_intent_cloze: cut by the feature lengths (tokens with EOS): 2 of 4 inputs longer than 'inputs' 32 "
        "(the longest 41, first in item 'long_input'); 2 of 8 candidates in 2 items longer than 'targets' 16 "
        "(the longest 21, first in item 'long_candidate')")


@pytest.fixture
def asq_file(tmp_path):
  """ITEMS bound as ASQ's train and test files (gin cleared after)."""
  path = tmp_path / "asq.json"
  path.write_text(json.dumps(ITEMS))
  gin.clear_config()
  with gin.unlock_config():
    gin.bind_parameter(FILES, {"asq": {"train": str(path), "test": str(path)}})
  yield path
  gin.clear_config()


@pytest.fixture
def checkpoint(tmp_path):
  directory = tmp_path / "ckpt"
  checkpoints.save_params(str(directory / "params"), init_params(CONFIG, jax.random.PRNGKey(0)))
  checkpoints.write_model_config(str(directory), CONFIG)
  return str(directory)


def test_counts_are_exact_at_the_boundary_with_eos(asq_file):
  """31 bytes + EOS fill 32 and are not cut; 32 + EOS are; a 15-byte question + EOS fills 16."""
  del asq_file
  assert data.count_truncation(TASK, "test", LENGTHS, ("inputs", "candidates")) == EXPECTED
  assert truncation.line(TASK, EXPECTED) == LINE


def test_tokens_without_their_text_count_as_they_are():
  """Hand-made examples (no `<feature>_pretokenized`): seqio did not cut them, the arrays would."""
  counter = truncation.TaskCounter("t", {"inputs": 4, "targets": 3})
  counter.add({"id": "a", "inputs": np.arange(1, 5), "candidates": [np.arange(1, 4), np.arange(1, 5)]})
  counter.add({"id": "b", "inputs": np.arange(1, 6), "candidates": [np.arange(1, 3)]})
  record = counter.record()
  assert (record["inputs"]["cut"], record["inputs"]["first_cut"], record["inputs"]["longest"]) == (1, "b", 5)
  assert (record["candidates"]["cut"], record["candidates"]["items_cut"], record["candidates"]["count"]) == (1, 1, 3)
  assert truncation.report_lines({"t": record}) == [truncation.line("t", record)]
  nothing = truncation.TaskCounter("u", {"inputs": 8, "targets": 8})
  nothing.add({"id": "c", "inputs": [1], "candidates": [[1]]})
  assert truncation.lines({"u": nothing.record()}) == []
  assert truncation.report_lines({"u": nothing.record()})[0].startswith("Nothing was cut by the feature lengths")


@pytest.mark.parametrize("bucket_by_length", [False, True])
def test_the_scoring_loop_counts_every_item_as_it_reads_it(asq_file, capsys, tmp_path, bucket_by_length):
  del asq_file
  with outputs.PredictionsAppender(str(tmp_path / "out")) as appender:
    stats = scoring_loop.score_task(TASK, "test", LENGTHS, 3, lambda p, arrays, lengths: {
        "scores": np.zeros(lengths["tokens"].shape)}, None, appender, bucket_by_length=bucket_by_length)
  assert stats.truncation == EXPECTED
  assert LINE in capsys.readouterr().out.splitlines()


def test_an_evaluation_prints_the_counts_and_records_them_in_metrics_json_and_the_report(asq_file, checkpoint,
                                                                                        tmp_path, capsys):
  del asq_file
  out = tmp_path / "eval"
  evaluate.evaluate(dataset=configs.DatasetConfig(TASK, LENGTHS, "test", 4), checkpoint_path=checkpoint,
                    output_dir=str(out))
  assert LINE in capsys.readouterr().out.splitlines()
  assert outputs.read_truncation(str(out)) == {TASK: EXPECTED}
  assert set(outputs.read_metrics(str(out))) == {TASK}  # the record is not a task
  assert LINE.replace("'", "&#x27;") in (out / "report.html").read_text()


def test_refuse_stops_before_scoring_in_one_line(asq_file, checkpoint, tmp_path):
  del asq_file
  out = tmp_path / "refused"
  with pytest.raises(ValueError) as refused:
    evaluate.evaluate(dataset=configs.DatasetConfig(TASK, LENGTHS, "test", 4), checkpoint_path=checkpoint,
                      output_dir=str(out), evaluation=configs.EvaluationConfig(truncated_candidates="refuse"))
  assert str(refused.value) == (
      "TRUNCATED_CANDIDATES = 'refuse': asq_intent_cloze has 2 of 8 candidates (in 2 of 4 items, first in item "
      "'long_candidate') longer than TASK_FEATURE_LENGTHS['targets'] = 16 tokens with EOS; 'targets': 21 would "
      "hold them all (or TRUNCATED_CANDIDATES = 'score' scores them cut, counted)")
  assert not out.exists()
  with pytest.raises(ValueError, match=r"^TRUNCATED_CANDIDATES must be one of \('score', 'refuse'\), got 'cut'$"):
    scoring_loop.check_truncated_candidates([], "test", LENGTHS, "cut")
  # With room for every candidate, 'refuse' scores.
  scoring_loop.check_truncated_candidates([data.get_provider(TASK)], "test", {"inputs": 32, "targets": 21}, "refuse")


def test_the_command_line_refuses_in_one_line(asq_file, checkpoint, tmp_path):
  """scripts.evaluate with --gin.TRUNCATED_CANDIDATES="'refuse'" (a macro the command line knows)."""
  command = [sys.executable, "-m", "scripts.evaluate", "--gin_file=gin/models/t5_1_1/tiny.gin",
             "--gin_file=gin/runs/eval.gin",
             f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'", f"--gin.CHECKPOINT_PATH='{checkpoint}'",
             f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'cli'}'", f"--gin.TASK_FEATURE_LENGTHS={LENGTHS}",
             f"--gin.{FILES}={{'asq': {{'test': '{asq_file}'}}}}", "--gin.TRUNCATED_CANDIDATES='refuse'"]
  result = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert result.returncode == 1, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
  assert errors == [f"error: {truncation.refusal(TASK, EXPECTED)}"], result.stderr[-3000:]


def _train(model_dir, steps, objective="cross_entropy", evaluation=None):
  return train.train(model_config=CONFIG, train_dataset=configs.DatasetConfig(TASK, LENGTHS, "train", 2),
                     training=configs.TrainingConfig(steps, objective=objective, log_every=1000),
                     checkpoint=configs.CheckpointConfig(), partitioner=partitioning.Partitioner(),
                     model_dir=str(model_dir), evaluation=evaluation)


def test_training_counts_inputs_and_targets_in_data_files_json_and_resumes(asq_file, tmp_path, capsys, monkeypatch):
  """Cross-entropy: the targets are the correct questions (label 0: qn1). The run evaluates its test
  split at the end: eval_metrics.jsonl has the evaluation's counts. A resume is not refused, and
  takes the count it kept rather than reading every split again."""
  del asq_file
  model_dir = tmp_path / "run"
  _train(model_dir, 1, evaluation=configs.EvaluationConfig(every=1, split="test"))
  targets = {"length": 16, "count": 4, "cut": 2, "items_cut": 2, "longest": 21, "first_cut": "long_candidate"}
  expected = {**EXPECTED, "targets": targets}
  del expected["candidates"]
  recorded = json.loads((model_dir / run_dir.DATA_FILES).read_text())
  assert recorded["truncation"] == {TASK: expected}
  printed = capsys.readouterr().out.splitlines()
  assert truncation.line(TASK, expected) in printed and LINE in printed  # training's, then its evaluation's
  eval_line = json.loads((model_dir / run_dir.EVAL_METRICS).read_text().splitlines()[0])
  assert eval_line["truncation"] == {TASK: EXPECTED}
  monkeypatch.setattr(data, "count_truncation", lambda *args: pytest.fail("a resume counted again"))
  assert _train(model_dir, 2).step == 2
  assert json.loads((model_dir / run_dir.DATA_FILES).read_text())["truncation"] == {TASK: expected}
  assert truncation.line(TASK, expected) in capsys.readouterr().out.splitlines()  # said again


def test_a_reward_objective_counts_candidates_and_the_count_leaves_the_batches_as_they_were(asq_file):
  del asq_file
  def first_batches():
    return list(itertools.islice(data.train_batches(TASK, LENGTHS, 2, candidates=True, seed=3), 3))
  before = first_batches()
  records = data.training_truncation([data.get_provider(TASK)], configs.DatasetConfig(TASK, LENGTHS, "train", 2),
                                     candidates=True)
  assert records == {TASK: EXPECTED}
  for ours, theirs in zip(first_batches(), before, strict=True):
    assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in ours)


def test_asq_test_file_at_the_quickstart_lengths(shared_data):
  """The real file's counts at {'inputs': 256, 'targets': 64} in bytes (docs/evaluation.md's numbers)."""
  gin.clear_config()
  with gin.unlock_config():
    gin.bind_parameter(FILES, {"asq": {"test": str(shared_data / "asq" / "asq_test_first1000.json")}})
  try:
    record = data.count_truncation(TASK, "test", {"inputs": 256, "targets": 64}, ("inputs", "candidates"))
  finally:
    gin.clear_config()
  assert (record["items"], record["inputs"]["cut"], record["candidates"]["cut"], record["candidates"]["items_cut"]) == (
      1000, 969, 722, 585)


def test_refuse_in_training_evaluation_stops_before_the_first_step(asq_file, tmp_path):
  del asq_file
  model_dir = tmp_path / "refused_run"
  with pytest.raises(ValueError, match=r"^TRUNCATED_CANDIDATES = 'refuse': asq_intent_cloze has 2 of 8 candidates"):
    _train(model_dir, 1, evaluation=configs.EvaluationConfig(every=1, split="test", truncated_candidates="refuse"))
  assert not (model_dir / run_dir.CHECKPOINTS).exists()


def test_the_recipes_table_counts_the_released_files(shared_data):
  """scripts.analyze truncation's row of ASQ's annotation split at finetune.gin's 512 and 128: bytes
  cut 356 narratives and 32 questions (30 items), whole words none."""
  from scripts.analyses import truncation as analysis  # pylint: disable=g-import-not-at-top
  [table4] = [m for m in analysis.measurements(str(shared_data)) if m.recipe.startswith("asq/table4.gin")]
  result = analysis.measure(table4, str(shared_data))
  assert (result["bytes"]["items"], result["bytes"]["inputs"]["cut"], result["bytes"]["candidates"]["cut"],
          result["bytes"]["candidates"]["items_cut"], result["words"]) == (
              500, 356, 32, 30, {"inputs": 0, "candidates": 0})
  assert analysis.table([result]).rows[0][5:8] == ("0-356", "0-32 of 1000", 30)
