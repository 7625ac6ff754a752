"""Offline evaluation: score every item of a task or mixture, then write predictions, metrics, report.

Each candidate gets its likelihood under the model, normalised as NORMALIZATION says, or its
reward (`runner.scorers`); an item's candidates are packed into one decoder row
(`data.pack_candidates`), so that short candidates are not padded to the batch's longest. A
generation task's one candidate is its reference text: its summed log-likelihood and token count
give the task's loss and perplexity (model selection by validation perplexity, as TuringAdvice
§3.2 does). Per item, one JSON line (`runner.outputs` format) holds every candidate's score, the
prediction, the gold labels and the task's metadata. The items are scored by
`runner.scoring_loop.evaluate_tasks`, as evaluation during training scores them: each batch's
lines are written as soon as it is scored (a kill loses only the batch in flight), so an
interrupted evaluation skips the items already written when run again, and the file is put in the
tasks' order at the end; metrics are computed from it with the task's own seqio score metric
functions (95% bootstrap intervals, `runner.eval_metrics`), so a resumed run and an uninterrupted
one give the same `metrics.json` (with, given `metric_groups`, each group's average over its tasks
beside them: HEAP's clusters). SIGINT (Ctrl-C) or SIGTERM stops at the end of the batch being
scored, its lines written, with `checkpoints.PreemptionGuard.Interrupted` (no metrics, no report):
scripts/evaluate.py prints its line and exits 130 or 143.

Several processes (a pod, or scripts/launch_local.py) run it as one SPMD program: the mesh spans
every process's devices, each process reads every item in the same order and places on its
devices the rows they hold, and the scores come back whole to every process. Process 0 alone writes the output
directory; the others keep track of the same items. A SIGTERM to any of them stops all after the
same batch (jax's preemption sync point).

Every output directory records its provenance (`evaluation.json`, and metrics.json's
"provenance"; `runner.provenance` lists it), and one holding predictions of another provenance is
refused before anything is scored or written.
"""
import contextlib
from typing import Mapping

import jax
from jax.experimental import multihost_utils

from models import scoring
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import data
from runner import eval_metrics
from runner import host_memory
from runner import model_inputs
from runner import outputs
from runner import partitioning
from runner import provenance
from runner import report
from runner import run_dir
from runner import scorers
from runner import scoring_loop
import storage


SETTINGS_FILE = run_dir.SETTINGS  # what an output directory holds, checked on resuming


def _sync(name: str) -> None:
  """Waits until every process gets here (a no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def _writes_outputs() -> bool:
  """Whether this process writes the output directory: process 0 alone, so that a run on several
  processes writes what one process would."""
  return jax.process_index() == 0


class _ItemsWrittenByProcessZero:
  """A process other than 0's stand-in for the appender: process 0 writes predictions.jsonl;
  this one keeps the same `done` set (read once process 0 has cut off a partial last line, then
  grown with the items scored), so every process skips the same batches."""

  def __init__(self, output_dir: str):
    self.path = run_dir.EvalDir(output_dir).predictions
    self.done = outputs.written_ids(output_dir)

  def write(self, record: Mapping) -> None:
    self.done.add((record["task"], record["id"]))

  def flush(self) -> None:
    """Process 0 writes."""


class _PredictionsFile:
  """Offline evaluation's sink (`scoring_loop.evaluate_tasks`): output_dir/predictions.jsonl,
  appended by process 0 (`_ItemsWrittenByProcessZero` on the others); `finish` puts it in the
  tasks' order and reads it back on every process, or raises `guard`'s interruption when a signal
  stopped the scoring before all `total` items were written."""

  def __init__(self, output_dir: str, guard: checkpoints.PreemptionGuard, total: int | None):
    self.guard, self.total = guard, total
    self._open = contextlib.ExitStack()
    if _writes_outputs():
      self._appender = self._open.enter_context(outputs.predictions_appender(output_dir))
    _sync("evaluate: predictions.jsonl opened")  # the others read it after any repair
    if not _writes_outputs():
      self._appender = _ItemsWrittenByProcessZero(output_dir)
    self.path, self.done = self._appender.path, self._appender.done

  def write(self, record: Mapping) -> None:
    self._appender.write(record)

  def flush(self) -> None:
    self._appender.flush()

  def finish(self, order) -> list[dict]:
    if self.guard.should_stop() and len(self.done) != self.total:  # a signal after the last batch: done
      raise self.guard.interrupted(f"interrupted after {len(self.done)}/{self.total or '?'} items, kept in "
                                   f"{self.path}; rerun the same command to resume")
    self._open.close()
    _sync("evaluate: predictions.jsonl closed")
    if _writes_outputs():  # a resumed file holds the items scored before the stop, perhaps out of order
      outputs.reorder_predictions(self.path, order)
    _sync("evaluate: predictions.jsonl in the tasks' order")
    return outputs.read_predictions(self.path)

  def __enter__(self):
    return self

  def __exit__(self, *exc) -> None:
    self._open.close()


def evaluate(*, model_config: T5Config | None = None, dataset: configs.DatasetConfig, checkpoint_path: str,
             output_dir: str, evaluation: configs.EvaluationConfig | None = None,
             partitioner: partitioning.Partitioner | None = None, run_config: str | None = None,
             references: report.References | None = None) -> dict:
  """Scores a task or mixture with a checkpoint; writes predictions, metrics.json and report.html.

  `dataset` names the task or mixture, its split, feature lengths (None: those the checkpoint
  recorded, `runner.model_inputs`), global batch size and whether seqio's cache is read (its seed
  is unused: items are read in order). A vocabulary other than the checkpoint's recorded one is
  refused before anything is read. `evaluation` (default
  `configs.EvaluationConfig()`) gives the scorer, a likelihood's normalisation, the metric groups
  and BUCKET_BY_LENGTH; its fields for evaluation during training are unused. `model_config`
  None: the checkpoint's recorded one. scripts/evaluate.py calls it through gin (gin/runs/eval.gin).

  Returns the metrics (`{task or group: {metric: {"value", "low", "high"}}}`). On SIGINT or SIGTERM it
  stops after the batch being scored and raises `checkpoints.PreemptionGuard.Interrupted` saying
  how many items predictions.jsonl holds; calling it again resumes. The model and batches are
  sharded over every device of every process by `partitioner` (default `Partitioner()`: the
  data axis over every device, the standard rules), every scoring call inside its mesh and rules.
  The partitioner joins the processes of a multi-host run first (its `multi_host`); they run as
  one program, and process 0 alone writes `output_dir`, the same files one process writes.
  `run_config` (the gin configuration's text) is written to `output_dir/config.gin`.

  `evaluation.metric_groups` ({group: [task names]}, or a function of the evaluated task names
  returning it) adds, beside the tasks, each group's average over its evaluated tasks
  (`eval_metrics.group_metrics`; HEAP's clusters: `t5_tasks.metrics.heap_metric_groups`). Groups
  are computed from the finished predictions like the tasks' metrics, so they are not
  provenance: a resumed evaluation may name other groups. `references` (`{task: [(metric, label,
  value, source), ...]}`, plain data built from t5_tasks.references) puts the papers' figures on
  the report. The report also lists each task's items most wrong (`eval_metrics.worst_items`).
  `evaluation.bucket_by_length` batches items of alike lengths together
  (`scoring_loop.score_task`); predictions.jsonl holds the items in the tasks' order either way.
  """
  evaluation = configs.EvaluationConfig() if evaluation is None else evaluation
  partitioner = partitioning.Partitioner() if partitioner is None else partitioner
  task_name, split = dataset.mixture_or_task_name, dataset.split
  recorded = model_inputs.read(checkpoint_path)
  lengths = model_inputs.feature_lengths(recorded, dataset.task_feature_lengths, f"CHECKPOINT_PATH {checkpoint_path}")
  scorer, normalization = evaluation.scorer, evaluation.normalization
  scorers.check_scoring(scorer, normalization)
  storage.check_reachable(output_dir, "EVAL_OUTPUT_DIR")
  if not isinstance(evaluation.bucket_by_length, bool):
    raise ValueError(f"BUCKET_BY_LENGTH must be True or False, got {evaluation.bucket_by_length!r}")
  partitioner.initialize()
  host_memory.reuse_freed_memory()
  # The mesh spans every process's devices (made here, after the hosts joined): a model may outgrow a host.
  partitioner.check_batch_size(dataset.batch_size)
  tasks = scoring_loop.candidate_tasks(task_name, split)
  scorers.check_metrics_scorable(tasks, scorer)
  model_inputs.check_vocabulary(recorded, model_inputs.tasks_vocabulary(tasks),
                                f"CHECKPOINT_PATH {checkpoint_path}")
  data.require_examples(tasks, split)
  # TRUNCATED_CANDIDATES = 'refuse' stops here, before the checkpoint is read (issue 48).
  scoring_loop.check_truncated_candidates(tasks, split, lengths, evaluation.truncated_candidates,
                                          use_cached=dataset.use_cached)
  config, params = checkpoints.load_params(checkpoint_path, model_config, partitioner)
  settings = provenance.provenance(mixture_or_task_name=task_name, split=split,
                                   checkpoint_path=checkpoint_path, config=config, params=params, tasks=tasks,
                                   task_feature_lengths=lengths, scorer=scorer,
                                   normalization=normalization)
  provenance.check_settings(output_dir, settings)  # every process, so that all refuse alike
  _sync("evaluate: settings checked")  # before process 0 records its own
  if _writes_outputs():
    storage.makedirs(output_dir)
    provenance.record_settings(output_dir, settings)
    if run_config is not None:
      outputs.write_run_config(output_dir, run_config)
  notes = provenance.notes(settings)
  print("\n".join(notes), flush=True)
  score_fn = scorers.make_score_fn(config, scorer, normalization, partitioner)
  groups = evaluation.metric_groups
  if callable(groups):
    groups = groups([task.name for task in tasks])
  stopping = "finishing the batch being scored, then stopping"
  totals = [t.num_input_examples(split) for t in tasks]
  total = None if None in totals else sum(totals)
  with checkpoints.PreemptionGuard(stopping=stopping) as guard, _PredictionsFile(output_dir, guard, total) as sink:
    if sink.done:
      print(f"resuming: {len(sink.done)} items already in {sink.path}", flush=True)
    evaluated = scoring_loop.evaluate_tasks(
        tasks, split, score_fn, params, sink, feature_lengths=lengths, batch_size=dataset.batch_size,
        metric_groups=groups, partitioner=partitioner, use_cached=dataset.use_cached,
        bucket_by_length=evaluation.bucket_by_length, guard=guard)
  metrics, groups, by_task, path = evaluated.tasks, evaluated.groups, evaluated.records, sink.path
  if not _writes_outputs():
    return {**metrics, **groups}
  outputs.write_metrics(output_dir, {**metrics, **groups}, provenance=settings, truncation=evaluated.truncation)
  counts = report.Table("Items scored", ("task", "items"),
                        [(task.name, len(by_task.get(task.name, []))) for task in tasks])
  notes = [f"{task_name}, split {split!r}, scorer {scorer}"
           + (f", normalisation {normalization!r}: {scoring.NORMALIZATIONS[normalization][1]}"
              if scorer == "likelihood" else "")] + notes
  # Tasks the model ranks right throughout, and generation tasks (one candidate), have none.
  wrong_items = {task.name: eval_metrics.worst_items(by_task.get(task.name, [])) for task in tasks}
  most_wrong = [report.worst_items_table(name, items) for name, items in wrong_items.items() if items]
  html_path = report.write_report(output_dir, title=f"Evaluation of {task_name}",
                                  metrics=metrics, groups=groups, tables=[counts, *most_wrong],
                                  notes=notes, references=references, truncation=evaluated.truncation)
  print(f"wrote {path}, {run_dir.EvalDir(output_dir).metrics} and {html_path}", flush=True)
  return {**metrics, **groups}
