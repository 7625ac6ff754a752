"""Evaluation during training: eval/<task>/<metric> scalars beside the loss, eval_metrics.jsonl,
the best checkpoint by BEST_METRIC across a restart, and the settings refused before training."""
import dataclasses
import json

import jax
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from runner import checkpoints
from runner import configs
from runner import partitioning
from runner import train
from runner import training_evaluation
from runner import trainer
from tests.models.t5x_fixtures import random_params
from tests.runner.test_train_entry import TINY
from tests.runner.test_train_entry import numbered_batches

LENGTHS = {"inputs": 64, "targets": 16}
TASK = "asq_intent_cloze"  # 12 test items; no validation split
BEST = f"{TASK}/accuracy"


EVALUATION = configs.EvaluationConfig(every=2, mixture_or_task_name=TASK, split="test", best_metric=BEST,
                                      best_mode="max")


def _train(model_dir, steps, train_dataset=train.BatchSource(numbered_batches, 4, LENGTHS), **evaluation):
  """test_train_entry's model and batches (its compiled step comes from the cache; a seqio
  training pipeline would cost more than the run), evaluated on TASK's test split; `evaluation`
  replaces fields of EVALUATION."""
  return train.train(model_config=TINY, train_dataset=train_dataset,
                     training=configs.TrainingConfig(steps, optimizer=trainer.make_optimizer(learning_rate=1e-2),
                                                     log_every=1000),
                     checkpoint=configs.CheckpointConfig(every=2), partitioner=partitioning.Partitioner(),
                     model_dir=str(model_dir), evaluation=dataclasses.replace(EVALUATION, **evaluation))


def _lines(model_dir):
  return [json.loads(line) for line in (model_dir / training_evaluation.EVAL_METRICS_FILE).read_text().splitlines()]


def _best_step(model_dir):
  return checkpoints.recorded_best(checkpoints.best_checkpoint_manager(str(model_dir), "max"))[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """A 6-step run evaluating every 2 steps, stopped after step 4 and resumed; then started again
  with nothing left to train, after a crash left a later evaluation and a cut line in its file."""
  model_dir = tmp_path_factory.mktemp("run")
  _train(model_dir, 4)
  best_after_4 = _best_step(model_dir)
  _train(model_dir, 6)
  lines = _lines(model_dir)
  with open(model_dir / training_evaluation.EVAL_METRICS_FILE, "a", encoding="utf-8") as f:
    f.write(json.dumps({"step": 8, "metrics": {BEST: 1.0}}) + "\n" + '{"step": 10, "metr')
  _train(model_dir, 6)
  return model_dir, best_after_4, lines


def test_eval_scalars_are_in_tensorboard_at_each_evaluation_with_the_jsonl_values(run):
  model_dir, _, lines = run
  assert [line["step"] for line in lines] == [2, 4, 6]
  assert BEST in lines[0]["metrics"] and 0 <= lines[0]["metrics"][BEST] <= 1
  events = event_accumulator.EventAccumulator(str(model_dir / "train"))
  events.Reload()
  for name in lines[0]["metrics"]:
    # clu writes TF2 summaries: a scalar is a tensor of the scalars plugin
    scalars = {event.step: tensor_util.make_ndarray(event.tensor_proto).item()
               for event in events.Tensors(f"eval/{name}")}
    assert scalars == pytest.approx({line["step"]: line["metrics"][name] for line in lines},
                                    rel=1e-6), name  # TensorBoard keeps float32
  assert "loss" in events.Tags()["tensors"]  # beside the training curves


def test_the_best_checkpoint_is_the_best_evaluated_step_and_survives_the_restart(run):
  model_dir, best_after_4, lines = run
  values = [line["metrics"][BEST] for line in lines]
  best = lines[int(np.argmax(values))]["step"]  # the first of equal values: a tie keeps the earlier
  assert _best_step(model_dir) == best == lines[-1]["best"]["step"]
  assert lines[-1]["best"]["value"] == max(values)
  assert best_after_4 == lines[int(np.argmax(values[:2]))]["step"]
  assert sorted(p.name for p in (model_dir / checkpoints.BEST_SUBDIR).iterdir() if p.name.isdigit()) == [str(best)]
  best_params = checkpoints.load_params(str(model_dir / checkpoints.BEST_SUBDIR), TINY)[1]
  step_params = checkpoints.load_params(str(model_dir / "checkpoints" / str(best)), TINY)[1]
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(best_params), jax.device_get(step_params))


def test_a_restart_drops_evaluations_past_its_checkpoint_and_adds_none(run):
  model_dir, _, lines = run
  assert _lines(model_dir) == lines  # the later step and the cut line gone; step 6 not evaluated again


@pytest.mark.parametrize("overrides, message", [
    # The training mixture is the eval mixture unless one is named.
    (dict(best_metric="asq_intent_clozee/accuracy"),
     r"BEST_METRIC 'asq_intent_clozee/accuracy': 'asq_intent_clozee' is no task or group the "
     r"evaluation of 'asq_intent_cloze' reports \(it reports asq_intent_cloze\)"),
    (dict(split="validation"),
     r"EVAL_SPLIT 'validation' is not a split of asq_intent_cloze \(it has train, test, annotation, heldout\)"),
    # NORMALIZATION reaches training's scorer (gin/runs/finetune.gin binds it to the EvaluationConfig).
    (dict(normalization="chars"),
     r"NORMALIZATION must be one of \['byte', 'char', 'mutual_information', 'none', 'token'\], got 'chars'"),
])
def test_settings_evaluation_cannot_use_stop_the_run_before_the_model_dir_exists(tmp_path, overrides, message):
  with pytest.raises(ValueError, match=message):
    _train(tmp_path / "run", 6, configs.DatasetConfig(TASK, LENGTHS, "train", 4), mixture_or_task_name=None,
           **overrides)
  assert not (tmp_path / "run").exists()


def test_tasks_without_the_eval_split_are_skipped_as_scripts_evaluate_skips_them(capsys):
  """A mixture some of whose tasks lack EVAL_SPLIT (the quickstart's ASQ has no validation split)
  evaluates the others, naming each task left out in one line, the line scripts.evaluate prints."""
  import seqio  # pylint: disable=g-import-not-at-top
  from runner import scoring_loop  # pylint: disable=g-import-not-at-top

  name = "test_train_eval_asq_and_heap_ah"
  if name not in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.add(name, [TASK, "heap_ah"], default_rate=1.0)
  tasks = training_evaluation._eval_tasks(name, "validation")  # pylint: disable=protected-access
  during_training = capsys.readouterr().out.splitlines()
  assert [task.name for task in tasks] == ["heap_ah"]
  # (after it, the NOTE that heap_ah reads its quickstart files, once per process)
  assert during_training[0] == ("skipping asq_intent_cloze: it has no 'validation' split "
                                "(it has train, test, annotation, heldout)")
  assert [task.name for task in scoring_loop.candidate_tasks(name, "validation")] == ["heap_ah"]
  assert capsys.readouterr().out.splitlines() == during_training[:1]


def test_evaluation_during_training_scores_with_the_configured_normalization(tmp_path):
  """Training's evaluation normalises a likelihood as NORMALIZATION says, as offline evaluation
  does: 'none' is the summed log-likelihood, 'token' that sum over the scored tokens."""
  from runner import scoring_loop  # pylint: disable=g-import-not-at-top

  params = random_params(TINY, 0)
  records = {}
  for normalization in ("none", "token"):
    evaluation = training_evaluation.make(
        configs.EvaluationConfig(every=2, normalization=normalization, split="test"),
        goal=trainer.get_objective("cross_entropy"), model_config=TINY,
        train_dataset=configs.DatasetConfig(TASK, LENGTHS, "train", 4), partitioner=None, model_dir=str(tmp_path))
    sink = scoring_loop.RecordsInMemory()
    scoring_loop.score_task(TASK, "test", LENGTHS, 4, evaluation.score_fn, params, sink)
    records[normalization] = sink.records
  assert len(records["none"]) == 12
  for summed, per_token in zip(records["none"], records["token"]):
    assert summed["id"] == per_token["id"]
    assert summed["scores"] == pytest.approx(summed["log_likelihoods"], rel=1e-6)
    assert per_token["scores"] == pytest.approx(
        [total / count for total, count in zip(summed["log_likelihoods"], summed["tokens"])], rel=1e-5)
    assert min(summed["tokens"]) > 1  # so that the two differ
