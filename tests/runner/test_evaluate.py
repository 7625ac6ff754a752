"""Offline evaluation on the quickstart tasks with a random tiny model: outputs, scores, resuming."""
import functools
import json

import gin
import jax
import numpy as np
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models import reward as reward_lib
from models import scoring
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import evaluate
from runner import outputs
from runner import scoring_loop
from runner import train
from scripts import gin_cli
from tests.helpers import batching
from t5_tasks import metrics as t5_metrics
from tests.conftest import PROJECT_ROOT

CONFIG = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 256, "targets": 32}
MIXTURE = "quickstart"
SPLIT = "test"
BATCH = 8


def _save(directory, params):
  checkpoints.save_params(str(directory / "params"), params)
  checkpoints.write_model_config(str(directory), CONFIG)
  return str(directory)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  return _save(tmp_path_factory.mktemp("ckpt"), init_params(CONFIG, jax.random.PRNGKey(0)))


def _run(checkpoint_path, output_dir, *, mixture_or_task_name=MIXTURE, task_feature_lengths=LENGTHS,
         run_config=None, **evaluation):
  """evaluate.evaluate on MIXTURE's SPLIT; `evaluation`: EvaluationConfig's fields."""
  dataset = configs.DatasetConfig(mixture_or_task_name, task_feature_lengths, SPLIT, BATCH)
  return evaluate.evaluate(dataset=dataset, checkpoint_path=checkpoint_path, output_dir=str(output_dir),
                           evaluation=configs.EvaluationConfig(**evaluation), run_config=run_config)


@pytest.fixture(scope="module")
def uninterrupted(checkpoint, tmp_path_factory):
  out = tmp_path_factory.mktemp("eval")
  _run(checkpoint, out)
  return out


def _scored_tasks():
  """Quickstart tasks with a test split and score metrics, read straight from seqio."""
  return [t for t in seqio.get_mixture_or_task(MIXTURE).tasks
          if SPLIT in t.splits and t.score_metric_fns]


@functools.cache  # heap_ah's are read by two tests
def _task_arrays(task_name):
  """The task's items straight from seqio, padded by tests.helpers.batching (not by runner.data)."""
  examples = list(seqio.get_mixture_or_task(task_name).get_dataset(
      LENGTHS, split=SPLIT, shuffle=False).as_numpy_iterator())
  arrays = batching.candidates_to_numpy(examples, candidate_length=LENGTHS["targets"])
  return examples, arrays


# Candidates per item the direct computations pad to (the quickstart tasks' most): one shape for every
# task, so score_candidates compiles once rather than once per task; an empty candidate scores 0.
CANDIDATE_SLOTS = 4


def _in_batches(score_fn, arrays):
  """score_fn over rows padded to BATCH x LENGTHS and CANDIDATE_SLOTS candidates (one shape for
  every task, so no recompiling); the scores of the item's own candidates."""
  rows = -(-len(arrays["input_ids"]) // BATCH) * BATCH
  inputs = np.zeros((rows, LENGTHS["inputs"]), np.int32)
  inputs[:len(arrays["input_ids"]), :arrays["input_ids"].shape[1]] = arrays["input_ids"]
  count, slots, length = arrays["candidate_ids"].shape
  assert slots <= CANDIDATE_SLOTS, slots
  candidates = np.zeros((rows, CANDIDATE_SLOTS, length), np.int32)
  candidates[:count, :slots] = arrays["candidate_ids"]
  scores = [np.asarray(score_fn(inputs[i:i + BATCH], candidates[i:i + BATCH])) for i in range(0, rows, BATCH)]
  return np.concatenate(scores)[:count, :slots]


def _span_mask(candidates, first_sentinel):
  """Loop by loop: a candidate `<extra_id_0> span <extra_id_1> ...` scores its span's tokens only,
  any other candidate every non-padding token."""
  mask = candidates > 0
  for index in np.ndindex(*candidates.shape[:-1]):
    row = candidates[index]
    if first_sentinel is not None and row[0] >= first_sentinel:
      closing = next(t for t in range(1, len(row)) if row[t] >= first_sentinel)
      mask[index] = [0 < t < closing for t in range(len(row))]
  return mask


def _by_task(records):
  out = {}
  for r in records:
    out.setdefault(r["task"], []).append(r)
  return out


def test_writes_one_line_per_item_and_the_report(uninterrupted):
  by_task = _by_task(outputs.read_predictions(str(uninterrupted / outputs.PREDICTIONS_FILE)))
  tasks = _scored_tasks()
  assert sorted(by_task) == sorted(t.name for t in tasks)
  for task in tasks:
    assert len(by_task[task.name]) == task.num_input_examples(SPLIT), task.name
    ids = [r["id"] for r in by_task[task.name]]
    assert len(set(ids)) == len(ids)
  assert sorted(outputs.read_metrics(str(uninterrupted))) == sorted(t.name for t in tasks)
  html = (uninterrupted / "report.html").read_text()
  for task in tasks:
    assert task.name in html
  assert "timedial_cloze_full: error_rate by group" in html
  assert "asq_intent_cloze: accuracy by group" in html
  for image in ("plot_00.png", "plot_04.png"):
    assert f"src='{image}'" in html and (uninterrupted / image).stat().st_size > 1000


def test_scores_equal_score_candidates_computed_directly(uninterrupted, checkpoint):
  by_task = _by_task(outputs.read_predictions(str(uninterrupted / outputs.PREDICTIONS_FILE)))
  params = checkpoints.load_params(checkpoint, CONFIG)[1]
  for task in _scored_tasks():
    examples, arrays = _task_arrays(task.name)
    vocabulary = task.output_features["candidates"].vocabulary
    first_sentinel = vocabulary.vocab_size - vocabulary.extra_ids if vocabulary.extra_ids else None
    expected = _in_batches(lambda x, c: scoring.score_candidates(
        CONFIG, params, x, c, _span_mask(c, first_sentinel)), arrays)
    records = by_task[task.name]
    for i, (record, example) in enumerate(zip(records, examples)):
      count = int(arrays["candidate_mask"][i].sum())
      assert record["id"] == example["id"].decode()
      assert record["gold"] == arrays["candidate_labels"][i, :count].tolist()
      np.testing.assert_allclose(record["scores"], expected[i, :count], rtol=1e-5, atol=1e-6)
      assert record["prediction"] == int(np.argmax(record["scores"]))


def test_metrics_match_the_task_metrics_on_the_records(uninterrupted):
  records = _by_task(outputs.read_predictions(str(uninterrupted / outputs.PREDICTIONS_FILE)))
  metrics = outputs.read_metrics(str(uninterrupted))
  timedial = records["timedial_cloze_full"]
  scores = np.asarray([r["scores"] for r in timedial])
  labels = np.asarray([r["gold"] for r in timedial])
  assert metrics["timedial_cloze_full"]["two_best_accuracy"] == t5_metrics.two_best_accuracy(
      scores, labels).as_dict()
  rules = {f"error_rate/{rule}" for r in timedial for rule in r["candidate_rules"] if rule}
  assert rules and rules <= set(metrics["timedial_cloze_full"])
  asq = records["asq_intent_cloze"]
  pair_types = {r["pair_type"] for r in asq} - {""}
  assert pair_types and {f"accuracy/{p}" for p in pair_types} <= set(metrics["asq_intent_cloze"])
  # A generation task is scored on its references: the pooled loss per token and its perplexity.
  advice = records["turingadvice_generation"]
  tokens = sum(t for r in advice for t in r["tokens"])
  loss = -sum(ll for r in advice for ll in r["log_likelihoods"]) / tokens
  # Each reference's bytes, cut to leave room for EOS in the targets length, and EOS.
  assert tokens == sum(min(len(r["targets_pretokenized"].encode()), LENGTHS["targets"] - 1) + 1 for r in advice)
  assert metrics["turingadvice_generation"]["loss"]["value"] == pytest.approx(loss, rel=1e-6)
  assert metrics["turingadvice_generation"]["perplexity"]["value"] == pytest.approx(np.exp(loss), rel=1e-6)
  for by_name in metrics.values():
    for entry in by_name.values():
      assert entry["low"] <= entry["value"] <= entry["high"]


def test_interrupted_evaluation_resumes_to_the_same_outputs(uninterrupted, checkpoint, tmp_path,
                                                            monkeypatch):
  calls = []
  real_score = scoring.score_packed

  def failing_after_three(*args, **kwargs):
    if len(calls) == 3:
      raise KeyboardInterrupt("injected interruption")
    calls.append(1)
    return real_score(*args, **kwargs)

  monkeypatch.setattr(scoring, "score_packed", failing_after_three)
  with pytest.raises(KeyboardInterrupt, match="injected"):
    _run(checkpoint, tmp_path)
  partial = (tmp_path / outputs.PREDICTIONS_FILE).read_text().splitlines()
  batch_sizes = [min(BATCH, t.num_input_examples(SPLIT) - first) for t in _scored_tasks()
                 for first in range(0, t.num_input_examples(SPLIT), BATCH)]
  assert len(partial) == sum(batch_sizes[:3])
  with open(tmp_path / outputs.PREDICTIONS_FILE, "a", encoding="utf-8") as f:
    f.write('{"task": "asq_intent_cloze", "id": "cut sh')  # a write killed half-way

  calls.clear()
  monkeypatch.setattr(scoring, "score_packed", lambda *a, **k: calls.append(1) or real_score(*a, **k))
  _run(checkpoint, tmp_path)
  assert len(calls) == len(batch_sizes) - 3  # the finished batches are not scored again
  assert (tmp_path / outputs.PREDICTIONS_FILE).read_bytes() == (uninterrupted / outputs.PREDICTIONS_FILE).read_bytes()
  def without_version(directory):  # the checkout's commit may move between the two runs (others commit)
    metrics = json.loads((directory / outputs.METRICS_FILE).read_text())
    del metrics[outputs.PROVENANCE_KEY]["version"]
    return metrics
  assert without_version(tmp_path) == without_version(uninterrupted)


def test_metric_groups_average_the_finished_task_metrics(uninterrupted, checkpoint, tmp_path,
                                                         monkeypatch):
  for name in (outputs.PREDICTIONS_FILE, evaluate.SETTINGS_FILE):  # a finished evaluation
    (tmp_path / name).write_bytes((uninterrupted / name).read_bytes())
  tasks = outputs.read_metrics(str(uninterrupted))
  preference = [t for t, by_name in tasks.items() if "pairwise_accuracy" in by_name]
  assert len(preference) >= 2
  monkeypatch.setattr(scoring, "score_packed", None)  # nothing is scored again
  returned = _run(checkpoint, tmp_path, metric_groups={
      "preference": preference, "all_tasks": list(tasks), "none": ["not_evaluated"]})
  written = outputs.read_metrics(str(tmp_path))
  assert written == returned
  assert {t: written[t] for t in tasks} == tasks  # the tasks' own metrics are unchanged
  # No metric is reported by every task, and "none" has no evaluated member: only one group.
  assert sorted(set(written) - set(tasks)) == ["preference"]
  entry = written["preference"]["pairwise_accuracy"]
  assert entry["tasks"] == len(preference)
  for key in ("value", "low", "high"):
    assert entry[key] == pytest.approx(sum(tasks[t]["pairwise_accuracy"][key] for t in preference)
                                       / len(preference))
  html = (tmp_path / "report.html").read_text()
  assert f"<td>preference</td><td>pairwise_accuracy</td><td>{len(preference)}</td>" in html


def test_metric_groups_given_as_a_function_get_the_evaluated_task_names(uninterrupted, checkpoint, tmp_path,
                                                                         monkeypatch):
  """EvaluationConfig.metric_groups as a function (HEAP's clusters' form): called with the names of
  the tasks evaluated, in the mixture's order; its groups are averaged as a mapping's are."""
  for name in (outputs.PREDICTIONS_FILE, evaluate.SETTINGS_FILE):  # a finished evaluation
    (tmp_path / name).write_bytes((uninterrupted / name).read_bytes())
  tasks = outputs.read_metrics(str(uninterrupted))
  monkeypatch.setattr(scoring, "score_packed", None)  # nothing is scored again
  called = []

  def preference(names):
    called.append(list(names))
    return {"preference": [name for name in names if "pairwise_accuracy" in tasks[name]]}
  returned = _run(checkpoint, tmp_path, metric_groups=preference)
  assert called == [[t.name for t in _scored_tasks()]]
  members = preference(called[0])["preference"]
  assert len(members) >= 2 and sorted(set(returned) - set(tasks)) == ["preference"]
  for key in ("value", "low", "high"):
    assert returned["preference"]["pairwise_accuracy"][key] == pytest.approx(
        sum(tasks[t]["pairwise_accuracy"][key] for t in members) / len(members))


def test_reward_scorer_scores_with_the_reward_head(tmp_path):
  params = reward_lib.init_reward_params(CONFIG, jax.random.PRNGKey(1))
  path = _save(tmp_path / "reward", params)
  task = "heap_ah"
  metrics = _run(path, tmp_path / "out", mixture_or_task_name=task, scorer="reward")
  records = outputs.read_predictions(str(tmp_path / "out" / outputs.PREDICTIONS_FILE))
  _, arrays = _task_arrays(task)
  expected = _in_batches(lambda x, c: reward_lib.reward(CONFIG, params, x, c), arrays)
  np.testing.assert_allclose([r["scores"] for r in records], expected, rtol=1e-5, atol=1e-5)
  good_wins = np.mean([r["scores"][r["gold"].index(1)] > r["scores"][r["gold"].index(0)] for r in records])
  assert metrics[task]["pairwise_accuracy"]["value"] == pytest.approx(good_wins)


def test_reward_scorer_needs_a_reward_head(checkpoint, tmp_path):
  with pytest.raises(ValueError, match="has no 'reward_head' parameters"):
    _run(checkpoint, tmp_path, mixture_or_task_name="heap_ah", scorer="reward")


def _files(directory):
  return {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}


TARGET_FORMAT = ("task_configuration.t5_tasks.preprocessors.timedial_target_format.target_format: "
                 "recorded 'span_corruption', now 'plain'")


@pytest.mark.parametrize("overrides, binding, named", [
    (dict(normalization="none"), None, "normalization: recorded 'token', now 'none'"),
    (dict(task_feature_lengths={**LENGTHS, "targets": 16}), None,
     "task_feature_lengths.targets: recorded 32, now 16"),
    ({}, ("t5_tasks.preprocessors.timedial_target_format.target_format", "plain"), TARGET_FORMAT),
])
def test_a_finished_evaluation_is_never_reused_with_one_scoring_setting_changed(
    uninterrupted, checkpoint, gin_config, monkeypatch, overrides, binding, named):
  if binding:
    gin.bind_parameter(*binding)
  before = _files(uninterrupted)
  monkeypatch.setattr(scoring, "score_packed", None)  # refused before anything is scored
  with pytest.raises(ValueError) as refused:
    _run(checkpoint, uninterrupted, run_config="# another configuration\n", **overrides)
  message = str(refused.value)
  assert message.startswith(f"{uninterrupted} holds predictions of another evaluation; settings that differ "
                            f"from {uninterrupted / evaluate.SETTINGS_FILE}: {named}")
  assert message.endswith("resuming or reusing them would mix their scores. Use a new EVAL_OUTPUT_DIR, "
                          "or delete this one to start over") and "\n" not in message
  assert _files(uninterrupted) == before  # config.gin, evaluation.json and the metrics as they were


def test_predictions_of_unknown_provenance_are_not_resumed(uninterrupted, checkpoint, tmp_path, monkeypatch):
  (tmp_path / outputs.PREDICTIONS_FILE).write_bytes((uninterrupted / outputs.PREDICTIONS_FILE).read_bytes())
  monkeypatch.setattr(scoring, "score_packed", None)
  with pytest.raises(ValueError, match=rf"^{tmp_path} holds predictions but no evaluation.json: what produced "
                                       r"them is unknown"):
    _run(checkpoint, tmp_path)


def test_a_scorer_that_cannot_give_a_metric_is_refused_before_scoring(tmp_path, monkeypatch):
  monkeypatch.setattr(reward_lib, "reward_packed", None)  # nothing may be scored
  with pytest.raises(ValueError) as refused:
    _run(str(tmp_path / "no_checkpoint_needed"), tmp_path / "out", scorer="reward")
  assert str(refused.value) == (
      "SCORER='reward' cannot evaluate turingadvice_generation: its metric perplexity_metric_fn reads each "
      "item's log_likelihoods and tokens, which only SCORER='likelihood' records; evaluate a mixture "
      "without turingadvice_generation, or with that scorer")
  assert not (tmp_path / "out").exists()


def test_a_reward_run_evaluating_a_generation_task_is_refused_before_its_first_step(tmp_path):
  from runner import partitioning  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match=r"^SCORER='reward' cannot evaluate turingadvice_generation: its metric "
                                       r"perplexity_metric_fn reads each item's log_likelihoods and tokens"):
    train.train(model_config=CONFIG, train_dataset=configs.DatasetConfig("heap_ah", LENGTHS, "train", 2),
                training=configs.TrainingConfig(2, objective="pairwise"),
                checkpoint=configs.CheckpointConfig(), partitioner=partitioning.Partitioner(),
                model_dir=str(tmp_path / "run"),
                evaluation=configs.EvaluationConfig(every=1, mixture_or_task_name=MIXTURE, split=SPLIT))
  assert not (tmp_path / "run").exists()


def test_rejects_unknown_scorer_and_missing_config(tmp_path):
  with pytest.raises(ValueError, match="SCORER must be one of"):
    _run(str(tmp_path), tmp_path / "out", scorer="bleu")
  checkpoints.save_params(str(tmp_path / "bare" / "params"), {"w": np.zeros(2, np.float32)})
  with pytest.raises(ValueError, match="no t5_config.json beside the checkpoint"):
    checkpoints.load_params(str(tmp_path / "bare"))


def test_model_config_round_trips_and_rejects_unknown_fields(tmp_path):
  checkpoints.write_model_config(str(tmp_path), CONFIG)
  assert checkpoints.read_model_config(str(tmp_path)) == CONFIG
  fields = json.loads((tmp_path / checkpoints.CONFIG_FILE).read_text())
  (tmp_path / checkpoints.CONFIG_FILE).write_text(json.dumps({**fields, "colour": "red"}))
  with pytest.raises(ValueError, match=r"t5_config.json: unknown T5Config field\(s\) \['colour'\]"):
    checkpoints.read_model_config(str(tmp_path))


@pytest.fixture
def gin_config():
  gin.clear_config()
  yield
  gin.clear_config()


def test_eval_gin_runs_evaluate_with_the_model_file(gin_config, tmp_path):
  tiny = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                  num_encoder_layers=2, num_decoder_layers=2)
  checkpoints.save_params(str(tmp_path / "ckpt" / "params"), init_params(tiny, jax.random.PRNGKey(2)))
  gin_cli.parse_gin(
      ["gin/models/t5_1_1/tiny.gin", "gin/runs/eval.gin", "gin/mixtures/quickstart.gin"],
      [f"CHECKPOINT_PATH = '{tmp_path / 'ckpt'}'", f"EVAL_OUTPUT_DIR = '{tmp_path / 'out'}'",
       "MIXTURE_OR_TASK_NAME = 'heap_ah'", f"TASK_FEATURE_LENGTHS = {LENGTHS}",
       "BATCH_SIZE = 4"], [str(PROJECT_ROOT)])
  metrics = gin.get_configurable(evaluate.evaluate)()
  # eval.gin's METRIC_GROUPS: HEAP's averages over the evaluated criteria, here heap_ah alone.
  assert list(metrics) == ["heap_ah", "heap", "heap_cluster_context"]
  assert metrics["heap"]["pairwise_accuracy"]["value"] == metrics["heap_ah"]["pairwise_accuracy"]["value"]
  assert outputs.read_metrics(str(tmp_path / "out")) == metrics
  settings = json.loads((tmp_path / "out" / evaluate.SETTINGS_FILE).read_text())
  assert settings["scorer"] == "likelihood" and settings["normalization"] == "token"


def test_repeated_ids_are_numbered_so_resuming_can_tell_items_apart(tmp_path, monkeypatch):
  def two_batches(*args, **kwargs):
    del args, kwargs
    for labels in ([1, 0], [0, 1]):
      batch = {"input_ids": np.full((1, 4), 5, np.int32), "candidate_ids": np.full((1, 2, 3), 6, np.int32),
               "candidate_labels": np.asarray([labels], np.int32), "candidate_mask": np.ones((1, 2), bool),
               "score_mask": np.ones((1, 2, 3), bool), "scored_chars": np.full((1, 2), 3),
               "scored_bytes": np.full((1, 2), 3)}
      yield [{"id": "post"}], batch
  monkeypatch.setattr(evaluate.data, "candidate_batches", two_batches)
  with outputs.PredictionsAppender(str(tmp_path)) as appender:
    scoring_loop.score_task("t", SPLIT, LENGTHS, 1, lambda p, arrays, lengths: {"scores": np.asarray([[0.5, 0.25]])}, None, appender)
  records = outputs.read_predictions(str(tmp_path / outputs.PREDICTIONS_FILE))
  assert [(r["id"], r["gold"], r["prediction"]) for r in records] == [
      ("post", [1, 0], 0), ("post#1", [0, 1], 0)]
