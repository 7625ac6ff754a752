"""Evaluation during training (t5x's eval period and keep-best), for runner/train.py.

Every EVAL_EVERY steps the run scores the eval split with its current parameters as offline
evaluation does (`runner.scoring_loop.evaluate_tasks`, the same scorer and NORMALIZATION), writes
`eval/<task>/<metric>` scalars beside the loss, adds a line to MODEL_DIR/eval_metrics.jsonl (with
what the feature lengths cut of each task's items, `runner.truncation`), prints one line, and keeps
the best checkpoint by BEST_METRIC in MODEL_DIR/best.
"""
import json

import jax
import numpy as np

from runner import checkpoints
from runner import configs
from runner import data
from runner import partitioning
from runner import run_dir
from runner import scorers
from runner import scoring_loop
import storage

EVAL_METRICS_FILE = run_dir.EVAL_METRICS
BEST_MODES = ("max", "min")


def _flat_metrics(metrics: dict) -> dict[str, float]:
  """`{task or group: {metric: {"value", ...}}}` -> `{"task/metric": value}`, BEST_METRIC's names."""
  return {f"{name}/{metric}": entry["value"] for name, by_metric in metrics.items()
          for metric, entry in by_metric.items()}


def _read_eval_lines(path: str) -> tuple[list[dict], bool]:
  """(the complete lines of eval_metrics.jsonl, whether anything follows them: a last line cut
  short by a crash)."""
  if not storage.exists(path):
    return [], False
  raw = storage.read_bytes(path)
  lines, end = [], 0
  for line in raw.splitlines(keepends=True):
    try:
      lines.append(json.loads(line))
    except (json.JSONDecodeError, UnicodeDecodeError):
      break
    if not line.endswith(b"\n"):
      lines.pop()
      break
    end += len(line)
  return lines, end < len(raw)


def _eval_lines_until(path: str, step: int) -> list[dict]:
  """The evaluations of steps up to `step` (where the run resumes). Later ones, of an attempt
  that stopped before its checkpoint of them, are dropped from the file (their steps are trained
  and evaluated again), as is a line cut short."""
  lines, cut = _read_eval_lines(path)
  kept = [line for line in lines if line["step"] <= step]
  if cut or len(kept) < len(lines):
    _write_lines(path, kept)
  return kept


def _write_lines(path: str, lines: list[dict]) -> None:
  """Writes eval_metrics.jsonl whole (a bucket has no append; it holds a line per evaluation)."""
  storage.write_text(path, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))


def _all_tasks(name: str) -> list:
  import seqio  # pylint: disable=g-import-not-at-top  # runner must import without TensorFlow
  provider = data.get_provider(name)
  return list(provider.tasks) if isinstance(provider, seqio.Mixture) else [provider]


def _eval_tasks(name: str, split: str) -> list:
  """The tasks of the eval mixture that evaluation scores, chosen as offline evaluation chooses them
  (`scoring_loop.candidate_tasks`: a task without `split` is skipped in a line naming it); refused
  only when no task of the mixture has `split`."""
  all_tasks = _all_tasks(name)
  if not any(split in task.splits for task in all_tasks):
    raise ValueError(f"EVAL_SPLIT {split!r} is not a split of "
                     + "; ".join(f"{task.name} (it has {', '.join(task.splits)})" for task in all_tasks)
                     + f": choose a split a task of {name!r} has, or another EVAL_MIXTURE_OR_TASK_NAME")
  tasks = scoring_loop.candidate_tasks(name, split)
  data.require_examples(tasks, split)
  return tasks


def _metric_groups(groups, task_names) -> dict:
  """{group: [task names]}: `groups` itself, or what it returns for the evaluated task names
  (HEAP's clusters, which finetune.gin binds)."""
  if groups is None:
    return {}
  return dict(groups(task_names) if callable(groups) else groups)


def _check_best_metric(best_metric, best_mode, names, eval_name) -> None:
  """Stops before training when BEST_METRIC cannot name a metric of the evaluation: its part
  before the first '/' must be an evaluated task or group (the metric itself is known only once
  the first evaluation reports it)."""
  if best_mode not in BEST_MODES:
    raise ValueError(f"BEST_MODE must be one of {BEST_MODES}, got {best_mode!r}")
  if not isinstance(best_metric, str) or "/" not in best_metric:
    raise ValueError(f"BEST_METRIC must be '<task or group>/<metric>' (e.g. 'asq_intent_cloze/accuracy'), "
                     f"got {best_metric!r}")
  owner = best_metric.split("/", 1)[0]
  if owner not in names:
    raise ValueError(f"BEST_METRIC {best_metric!r}: {owner!r} is no task or group the evaluation of "
                     f"{eval_name!r} reports (it reports {', '.join(names)})")


class _Evaluation:
  """Evaluation during training: scores the eval split with the current parameters as offline
  evaluation does (`scoring_loop.evaluate_tasks`), writes `eval/<task>/<metric>` scalars beside the loss, appends a
  line to MODEL_DIR/eval_metrics.jsonl, prints one line, and keeps the best checkpoint by
  BEST_METRIC in MODEL_DIR/best (t5x's eval_period and keep-best)."""

  def __init__(self, *, every, tasks, groups, split, feature_lengths, batch_size, score_fn, partitioner,
               use_cached, model_dir, best_metric, best_mode):
    self.every = every  # steps between evaluations
    self.tasks, self.groups, self.split = tasks, groups, split
    self.feature_lengths, self.batch_size, self.score_fn = feature_lengths, batch_size, score_fn
    self.partitioner, self.use_cached = partitioner, use_cached
    self.best_metric, self.best_mode = best_metric, best_mode
    self.path = run_dir.RunDir(model_dir).eval_metrics
    self.model_dir = model_dir
    self.lines: list[dict] = []  # eval_metrics.jsonl's
    self.evaluated_steps: set[int] = set()
    self.best = None  # {"step", "value"} of the best checkpoint
    self.best_manager = None

  def resume(self, step: int) -> None:
    """Reads what earlier attempts of the run recorded, as of the step it resumes from."""
    self.lines = _eval_lines_until(self.path, step)
    self.evaluated_steps = {line["step"] for line in self.lines}
    if self.best_metric is None:
      return
    self.best_manager = checkpoints.best_checkpoint_manager(self.model_dir, self.best_mode)
    recorded = checkpoints.recorded_best(self.best_manager)
    if recorded is None:
      return
    best_step, record = recorded
    if (record.get("metric"), record.get("mode")) != (self.best_metric, self.best_mode):
      raise ValueError(f"{self.best_manager.directory} holds the best checkpoint by {record.get('metric')!r} "
                       f"({record.get('mode')}), not BEST_METRIC {self.best_metric!r} ({self.best_mode}): "
                       "use another MODEL_DIR, or move that directory away to select anew")
    self.best = {"step": best_step, "value": record["value"]}
    print(f"best checkpoint so far: {self.best_metric} {record['value']:.4f} at step {best_step} in "
          f"{self.best_manager.directory}", flush=True)

  def score(self, params) -> scoring_loop.Evaluated:
    """Every evaluated task's and group's metrics (and what the lengths cut), scored with `params`."""
    return scoring_loop.evaluate_tasks(
        self.tasks, self.split, self.score_fn, params, scoring_loop.RecordsInMemory(),
        feature_lengths=self.feature_lengths, batch_size=self.batch_size, metric_groups=self.groups,
        partitioner=self.partitioner, use_cached=self.use_cached)

  def _improves(self, value: float) -> bool:
    if self.best is None:
      return True
    return value > self.best["value"] if self.best_mode == "max" else value < self.best["value"]

  def _keep_best(self, step, params, metrics) -> None:
    if self.best_metric not in metrics:
      raise ValueError(f"BEST_METRIC {self.best_metric!r} is not among the metrics the evaluation at "
                       f"step {step} reports: {', '.join(sorted(metrics))}")
    value = metrics[self.best_metric]
    if self._improves(value):  # a tie keeps the earlier step
      checkpoints.save_best(self.best_manager, step, params,
                            {"metric": self.best_metric, "mode": self.best_mode, "value": value})
      self.best = {"step": step, "value": value}

  def __call__(self, step: int, params, writer) -> dict[str, float]:
    """Evaluates the parameters of `step`; records and prints the result."""
    evaluated = self.score(params)
    metrics = _flat_metrics(evaluated.metrics)
    if self.best_metric is not None:
      self._keep_best(step, params, metrics)
    if writer is not None:
      writer.write_scalars(step, {f"eval/{name}": value for name, value in metrics.items()})
      writer.flush()
    line = {"step": step, "metrics": metrics, "truncation": evaluated.truncation}
    shown = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
    if self.best is not None:
      line["best"] = {"metric": self.best_metric, **self.best}
      shown += f"; best {self.best_metric} {self.best['value']:.4f} at step {self.best['step']}"
    if jax.process_index() == 0:
      self.lines.append(line)
      _write_lines(self.path, self.lines)
      print(f"eval at step {step}: {shown}", flush=True)
    self.evaluated_steps.add(step)
    return metrics


def make(evaluation: configs.EvaluationConfig | None, *, goal, model_config, train_dataset: configs.DatasetConfig,
         partitioner: partitioning.Partitioner, model_dir: str) -> _Evaluation | None:
  """The run's evaluation during training, its settings checked; None when `evaluation` is None or
  its `every` is 0. It scores at the training batch's size and feature lengths; its
  `mixture_or_task_name` None evaluates what the run trains on (`train_dataset`'s)."""
  if evaluation is None or not evaluation.every:
    if evaluation is not None and evaluation.best_metric is not None:
      raise ValueError(f"BEST_METRIC {evaluation.best_metric!r} needs evaluation during training: set EVAL_EVERY")
    return None
  every, best_metric, best_mode = evaluation.every, evaluation.best_metric, evaluation.best_mode
  if not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 0:
    raise ValueError(f"EVAL_EVERY must be a whole number of steps (0 or None: no evaluation), got {every!r}")
  name = evaluation.mixture_or_task_name or train_dataset.mixture_or_task_name
  if name is None:
    raise ValueError("evaluation during training needs EVAL_MIXTURE_OR_TASK_NAME (or MIXTURE_OR_TASK_NAME)")
  if jax.process_count() > 1:
    raise ValueError("evaluation during training runs in one process; on several hosts, set EVAL_EVERY = 0 "
                     "and evaluate the checkpoints with scripts.evaluate")
  tasks = _eval_tasks(name, evaluation.split)
  # A reward model's scores are its rewards; any other model's, its likelihoods (as evaluate's SCORER).
  scorer = "reward" if goal.reward_head else "likelihood"
  scorers.check_metrics_scorable(tasks, scorer)  # before the first step: a metric it cannot give
  scoring_loop.check_truncated_candidates(tasks, evaluation.split, train_dataset.task_feature_lengths,
                                          evaluation.truncated_candidates, use_cached=train_dataset.use_cached)
  names = [task.name for task in tasks]
  groups = _metric_groups(evaluation.metric_groups, names)
  if best_metric is not None:
    _check_best_metric(best_metric, best_mode, names + list(groups), name)
  return _Evaluation(every=every, tasks=tasks, groups=groups, split=evaluation.split,
                     feature_lengths=train_dataset.task_feature_lengths, batch_size=train_dataset.batch_size,
                     score_fn=scorers.make_score_fn(model_config, scorer, evaluation.normalization, partitioner),
                     partitioner=partitioner, use_cached=train_dataset.use_cached, model_dir=model_dir,
                     best_metric=best_metric, best_mode=best_mode)
