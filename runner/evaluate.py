"""Offline evaluation: score every item of a task or mixture, then write predictions, metrics, report.

Each candidate gets its likelihood under the model (`models.scoring.score_packed` over the
tokens its score mask marks, then normalised as NORMALIZATIONS lists) or its reward
(`models.reward.reward_packed`); an item's candidates are packed into one decoder row
(`data.pack_candidates`), so that short candidates are not padded to the batch's longest. A
generation task's one candidate is its reference text: its summed log-likelihood and token count
give the task's loss and perplexity (model selection by validation perplexity, as TuringAdvice
§3.2 does). Per item, one JSON line
(`runner.outputs` format) holds every candidate's score, the prediction, the gold labels and
the task's metadata. Items are batched with items of alike lengths (less padding) and read on a
thread while the device scores; each batch's lines are written as soon as it is scored (a kill
loses only the batch in flight), so an interrupted evaluation skips the items already written when
run again, and the file is put in the tasks' order at the end; metrics are computed from it with the
task's own seqio score metric functions (95% bootstrap intervals), so a resumed run and an
uninterrupted one give the same `metrics.json` (with, given `metric_groups`, each group's average
over its tasks beside them: HEAP's clusters). SIGINT (Ctrl-C) or SIGTERM stops at the end of
the batch being scored, its lines written, with `checkpoints.PreemptionGuard.Interrupted` (no
metrics, no report): scripts/evaluate.py prints its line and exits 130 or 143.

Several processes (a pod, or scripts/launch_local.py) run it as one SPMD program: the mesh spans
every process's devices, each process reads every item in the same order and places on its
devices the rows they hold, and the scores come back whole to every process. Process 0 alone writes the output
directory; the others keep track of the same items. A SIGTERM to any of them stops all after the
same batch (jax's preemption sync point).

Every output directory records its provenance (`evaluation.json`, and metrics.json's
"provenance"): the checkpoint's step and a fingerprint of its parameters, the model config, each
data file or folder read (path, size, sha256, records read and skipped; a TFDS dataset's name,
version, splits and prepared files) and the examples per split, every setting of t5_tasks'
configurables (`t5_tasks.tasks.task_configuration`: TimeDial's target_format, HEAP's split, ...),
the vocabulary, feature lengths, scorer and normalisation, and the project's git commit. An output
directory holding predictions (finished or not) of a provenance that differs in anything but where
the checkpoint and the data are and the commit (`score_identity`) is refused, before anything is
scored or written, naming each differing setting with both values.
"""
import collections
import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import queue
import subprocess
import threading
import time
from typing import Callable, Iterator, Mapping, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from models import reward as reward_lib
from models import scoring
from models.config import T5Config
from runner import checkpoints
from runner import data
from runner import host_memory
from runner import outputs
from runner import partitioning
from runner import report
from runner import run_dir
from runner.progress import Progress
import storage

SETTINGS_FILE = run_dir.SETTINGS  # what an output directory holds, checked on resuming
# Provenance fields that do not change scores: a moved checkpoint or a new commit may resume.
NOT_SCORE_FIELDS = ("checkpoint_path", "vocabulary.model_file", "version")
MAX_CHANGES_SHOWN = 4  # settings named with both values in a refusal; the rest are counted
# Elements hashed per parameter: all of a smaller one, an evenly strided sample of a larger one
# (with its shape), so that fingerprinting an XXL model costs a few MB of transfers, not 40 GB.
FINGERPRINT_SAMPLE = 1 << 16
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Every normalisation of a likelihood score, by its gin name (NORMALIZATION): fn(summed
# log-likelihood of the scored tokens [B, K], log-likelihood given an empty context or None,
# lengths) -> scores [B, K], and what the report calls it. "char" and "byte" are
# lm-evaluation-harness's acc_norm and per-byte normalisation, "none" its acc, and
# "mutual_information" its acc_mutual_info (the empty context is the encoder input [EOS]).
NORMALIZATIONS = {
    "token": (lambda total, empty, n: total / np.maximum(n["tokens"], 1),
              "mean log-likelihood per scored token"),
    "char": (lambda total, empty, n: total / np.maximum(n["scored_chars"], 1),
             "log-likelihood per character of the scored text (acc_norm)"),
    "byte": (lambda total, empty, n: total / np.maximum(n["scored_bytes"], 1),
             "log-likelihood per UTF-8 byte of the scored text"),
    "none": (lambda total, empty, n: total, "summed log-likelihood of the scored tokens"),
    "mutual_information": (lambda total, empty, n: total - empty,
                           "log p(candidate | context) - log p(candidate | empty context)"),
}


def _on_every_host(values) -> np.ndarray:
  """A batch's results, whole, as numpy on every process: with several processes each holds only
  its rows of the global array the scorer returns."""
  return multihost_utils.process_allgather(values, tiled=True)


def _likelihood_scorer(config: T5Config, normalization: str):
  normalize, _ = NORMALIZATIONS[normalization]

  def score(params, arrays, lengths):
    def total(input_ids):
      return _on_every_host(scoring.score_packed(config, params, input_ids, arrays["candidate_ids"],
                                                 arrays["candidate_segments"], arrays["score_mask"],
                                                 num_candidates=lengths["tokens"].shape[-1], length_normalize=False))
    summed = total(arrays["input_ids"])
    empty = None
    if normalization == "mutual_information":
      empty = total(jax.numpy.ones_like(arrays["input_ids"][:, :1]))  # the context [EOS] alone
    return {"scores": normalize(summed, empty, lengths), "log_likelihoods": summed,
            "tokens": lengths["tokens"]}
  return score


def _reward_scorer(config: T5Config, normalization: str):
  del normalization  # a reward is one number per response
  def score(params, arrays, lengths):
    if reward_lib.HEAD not in params:
      raise ValueError(f"SCORER='reward' needs a reward model; the checkpoint has no "
                       f"'{reward_lib.HEAD}' parameters")
    return {"scores": _on_every_host(reward_lib.reward_packed(config, params, arrays["input_ids"],
                                                              arrays["candidate_ids"], arrays["candidate_segments"],
                                                              num_responses=lengths["tokens"].shape[-1]))}
  return score


# Every scorer, by its gin name (SCORER): make(config, normalization) -> fn(params, arrays,
# lengths) -> {"scores": [B, K], and per-candidate extras for predictions.jsonl}. `arrays` holds
# input_ids [B, L] and each row's K candidates packed end to end (`data.pack_candidates`):
# candidate_ids, candidate_segments and score_mask [B, S] (on the mesh); `lengths` the host's
# tokens, scored_chars and scored_bytes [B, K]. Adding one is adding an entry.
SCORERS = {"likelihood": _likelihood_scorer, "reward": _reward_scorer}
# The per-candidate extras each scorer records in predictions.jsonl, which some metrics read (a
# generation task's perplexity reads log_likelihoods and tokens; a metric function names what it
# reads as its `record_fields`, t5_tasks.tasks).
SCORER_RECORDS = {"likelihood": ("log_likelihoods", "tokens"), "reward": ()}


def check_scoring(scorer: str, normalization: str) -> None:
  if scorer not in SCORERS:
    raise ValueError(f"SCORER must be one of {sorted(SCORERS)}, got {scorer!r}")
  if normalization not in NORMALIZATIONS:
    raise ValueError(f"NORMALIZATION must be one of {sorted(NORMALIZATIONS)}, got {normalization!r}")


def check_metrics_scorable(tasks, scorer: str) -> None:
  """Stops, before anything is scored, when a task's metric reads what `scorer` does not record
  (a reward model has no perplexity for a generation task): the scores would be thrown away."""
  for task in tasks:
    for metric_fn in task.score_metric_fns:
      reads = getattr(metric_fn, "record_fields", ())
      missing = [field for field in reads if field not in SCORER_RECORDS[scorer]]
      if missing:
        able = [name for name, fields in SCORER_RECORDS.items() if set(reads) <= set(fields)]
        name = getattr(getattr(metric_fn, "func", metric_fn), "__name__", "metric")
        raise ValueError(f"SCORER={scorer!r} cannot evaluate {task.name}: its metric {name} reads each "
                         f"item's {' and '.join(missing)}, which only SCORER={' or '.join(map(repr, able))} "
                         f"records; evaluate a mixture without {task.name}, or with that scorer")


def make_score_fn(config: T5Config, scorer: str, normalization: str = "token", mesh=None,
                  rules=partitioning.STANDARD_LOGICAL_AXIS_RULES):
  """fn(params, arrays, lengths) -> {"scores": [B, K], ...} (numpy, the whole batch on every
  process), run on `mesh` (see SCORERS)."""
  check_scoring(scorer, normalization)
  score = SCORERS[scorer](config, normalization)
  if mesh is None:
    return score

  def score_on_mesh(params, arrays, lengths):
    with partitioning.activate(mesh, rules):
      return score(params, arrays, lengths)
  return score_on_mesh


def item_record(task: str, item_id: str, metadata: dict, scores, labels, mask, extras=None) -> dict:
  """One predictions.jsonl line: scores and gold of the item's real candidates, its metadata, and
  `extras` ({name: per-candidate values}, e.g. log_likelihoods and tokens)."""
  count = int(np.sum(mask))
  scores = [float(s) for s in scores[:count]]
  record = {"task": task, "id": item_id, "scores": scores, "prediction": int(np.argmax(scores)),
            "gold": [int(y) for y in labels[:count]]}
  for name, values in (extras or {}).items():
    record[name] = [v.item() if hasattr(v, "item") else v for v in values[:count]]
  return {**record, **{k: v for k, v in metadata.items() if k not in record}}


def distinct_ids(ids, occurrences: dict[str, int]) -> list[str]:
  """The ids as written to predictions.jsonl: an id seen before (counted in `occurrences`, updated
  here) becomes "id#1", "id#2", ..., so that resuming can tell repeated items apart."""
  out = []
  for item_id in map(str, ids):
    seen = occurrences.get(item_id, 0)
    occurrences[item_id] = seen + 1
    out.append(f"{item_id}#{seen}" if seen else item_id)
  return out


# Host batches read ahead of the one being scored: reading, tokenizing and padding them runs on a
# thread while the device scores.
PREFETCH_BATCHES = 2


@dataclasses.dataclass
class TaskStats:
  """What `score_task` did: items scored, its wall time, and the tokens it sent to the device.

  `real_tokens` counts the non-padding input and candidate ids of the arrays scored, `positions`
  every position of them (the input once per row, the packed candidates' S per row, padded rows
  included).
  `ids` are the task's item ids in its order (repeated ones numbered, as written)."""
  task: str
  items: int = 0
  seconds: float = 0.0
  input_tokens: int = 0
  candidate_tokens: int = 0
  positions: int = 0
  batches: int = 0
  shapes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (B, L, S): batches
  ids: list = dataclasses.field(default_factory=list, repr=False)

  @property
  def real_tokens(self) -> int:
    return self.input_tokens + self.candidate_tokens

  @property
  def items_per_s(self) -> float:
    return self.items / self.seconds if self.seconds else 0.0

  @property
  def real_tokens_per_s(self) -> float:
    return self.real_tokens / self.seconds if self.seconds else 0.0

  @property
  def padding_share(self) -> float:
    return 1.0 - self.real_tokens / self.positions if self.positions else 0.0

  def line(self) -> str:
    return (f"{self.task}: {self.items} items in {self.seconds:.1f} s: {self.items_per_s:.1f} items/s, "
            f"{self.real_tokens_per_s:,.0f} real tokens/s, padding {self.padding_share:.0%} of the tokens "
            f"scored ({len(self.shapes)} batch shapes)")


def _prefetched(batches: Iterator, size: int = PREFETCH_BATCHES) -> Iterator:
  """`batches`, produced on a thread `size` ahead of the consumer. An error there is raised here;
  when the consumer stops early (a signal, an error), the thread ends once the batch it is making
  is made, unwaited for (a daemon: reading a window may take seconds)."""
  entries = queue.Queue(maxsize=size)
  stopped = threading.Event()
  finished = object()

  def offer(entry) -> bool:
    """Queues `entry` unless the consumer has stopped; whether it was queued."""
    while not stopped.is_set():
      with contextlib.suppress(queue.Full):
        entries.put(entry, timeout=0.1)
        return True
    return False

  def produce():
    try:
      for batch in batches:
        if not offer((batch, None)):
          return
      offer((finished, None))
    except BaseException as error:  # pylint: disable=broad-except  # raised again by the consumer
      offer((None, error))

  thread = threading.Thread(target=produce, name="evaluation batches", daemon=True)
  thread.start()
  try:
    while True:
      batch, error = entries.get()
      if error is not None:
        raise error
      if batch is finished:
        return
      yield batch
  finally:
    stopped.set()


def _task_batches(task_name, split, feature_lengths, batch_size, use_cached, bucket_by_length, row_multiple):
  """(each real row's position in the task's order, metadata with distinct ids (`distinct_ids`,
  numbered in the task's order), batch), bucketed by length or in the task's order; a batch of
  fewer than `batch_size` items has its rows rounded up to `row_multiple` (`data.batch_rows`)."""
  occurrences: dict[str, int] = {}
  if bucket_by_length and batch_size > 1:  # a one-item batch is trimmed to its own lengths already
    examples, vocabulary = data.candidate_examples(task_name, split, feature_lengths, use_cached)

    def numbered():
      for example in examples:
        [example["id"]] = distinct_ids([data.example_id(example)], occurrences)
        yield example
    yield from data.bucketed_candidate_batches(numbered(), feature_lengths, batch_size, vocabulary,
                                               row_multiple=row_multiple)
    return
  start = 0
  for metadata, batch in data.candidate_batches(task_name, split, feature_lengths, batch_size, use_cached=use_cached,
                                                row_multiple=row_multiple):
    for item, item_id in zip(metadata, distinct_ids([item["id"] for item in metadata], occurrences)):
      item["id"] = item_id
    yield list(range(start, start + len(metadata))), metadata, batch
    start += len(metadata)


def score_task(task_name: str, split: str, feature_lengths, batch_size: int, score_fn, params,
               appender: outputs.PredictionsAppender, total: int | None = None, mesh=None,
               rules=partitioning.STANDARD_LOGICAL_AXIS_RULES, use_cached=False,
               progress_every_s: float = 10.0, should_stop: Callable[[], bool] = lambda: False,
               bucket_by_length: bool = True) -> TaskStats:
  """Scores the items of one task not yet in `appender`; returns what it did (`TaskStats`) and
  prints its line.

  Items must be told apart for resuming: a repeated id keeps it the first time and becomes
  "id#1", "id#2", ... on later occurrences, in the task's fixed order. `bucket_by_length` batches
  items of alike lengths together (`data.bucketed_candidate_batches`: less padding); each batch's
  lines are written as soon as it is scored, so they are out of the task's order
  (`outputs.reorder_predictions` puts the file in order at the end; `stats.ids` is the order). Before
  each batch `should_stop()` is asked; when it says so (or scoring raises) the task stops there,
  every scored item written. Batches are read, padded and packed on a thread ahead of scoring.
  `batch_size` is global: with `mesh`, each process reads every batch and places on its devices
  the rows they hold (`partitioning.global_batch`); `score_fn` returns the whole batch's scores to
  every process, so every process calls `appender.write` for the same items.
  """
  progress = Progress(task_name, total, "items")
  stats = TaskStats(task_name)
  started = time.perf_counter()
  ids_at: dict[int, str] = {}  # position -> distinct id
  row_multiple = 1 if mesh is None else partitioning.batch_blocks(mesh, rules)
  batches = _prefetched((positions, metadata, batch, data.packed_arrays(batch))  # made on the reading thread
                        for positions, metadata, batch in _task_batches(task_name, split, feature_lengths, batch_size,
                                                                        use_cached, bucket_by_length, row_multiple))
  try:
    for positions, metadata, batch, arrays in batches:
      if should_stop():
        break
      ids = [item["id"] for item in metadata]
      ids_at.update(zip(positions, ids))
      todo = [(task_name, item_id) not in appender.done for item_id in ids]
      if not any(todo):
        progress.advance(len(metadata))
        continue
      input_ids, candidate_ids = arrays["input_ids"], arrays["candidate_ids"]
      lengths = {"tokens": batch["score_mask"].sum(-1), "scored_chars": batch["scored_chars"],
                 "scored_bytes": batch["scored_bytes"]}
      if mesh is not None:
        arrays = partitioning.global_batch(arrays, mesh, rules)
      scored = score_fn(params, arrays, lengths)
      # Written as soon as scored, in the batch's order (bucketed batches finish out of the task's
      # order): a kill loses only the batch in flight; `outputs.reorder_predictions` sorts the file.
      for i, item in enumerate(metadata):
        if todo[i]:
          extras = {name: values[i] for name, values in scored.items() if name != "scores"}
          appender.write(item_record(task_name, ids[i], item, scored["scores"][i], batch["candidate_labels"][i],
                                     batch["candidate_mask"][i], extras))
      appender.flush()
      input_tokens, candidate_tokens = int(np.count_nonzero(input_ids)), int(np.count_nonzero(candidate_ids))
      stats.items += sum(todo)
      stats.input_tokens += input_tokens
      stats.candidate_tokens += candidate_tokens
      stats.positions += input_ids.size + candidate_ids.size
      stats.batches += 1
      stats.shapes[input_ids.shape + candidate_ids.shape[1:]] += 1  # (B, L, S)
      progress.advance(len(metadata), input_tokens + candidate_tokens)
      if progress.seconds_since_report() >= progress_every_s:
        progress.report()
  finally:
    batches.close()  # stops the reading thread
    stats.seconds = time.perf_counter() - started
    stats.ids = [ids_at[p] for p in sorted(ids_at)]
  if progress.done:
    progress.report()
  if stats.items and jax.process_index() == 0:
    print(stats.line(), flush=True)
  return stats


def _number(value) -> float:
  return float(getattr(value, "value", value))  # seqio metric fns may return seqio.metrics.Scalar


def _interval_entries(task_name: str, flat: dict) -> dict:
  """seqio's flat `{name, name_low, name_high}` -> `{name: {"value", "low", "high"}}`; NaNs dropped."""
  entries = {}
  for name, value in flat.items():
    if name.endswith(("_low", "_high")) and name.rsplit("_", 1)[0] in flat:
      continue
    value = _number(value)
    low, high = _number(flat.get(f"{name}_low", value)), _number(flat.get(f"{name}_high", value))
    if np.isnan((value, low, high)).any():
      print(f"{task_name}: {name} is undefined on these items (NaN); left out of metrics.json")
    else:
      entries[name] = outputs.interval(value, low, high)
  return entries


def task_metrics(task, records: list[dict]) -> dict:
  """The task's seqio score metrics over its records, with their 95% intervals."""
  targets = []
  for r in records:
    example = {k: v for k, v in r.items() if k not in ("task", "scores", "prediction", "gold")}
    targets.append(task.postprocess_fn(None, example={**example, "candidate_labels": r["gold"]},
                                       is_target=True))
  scores = [r["scores"] for r in records]
  metrics = {}
  for metric_fn in task.score_metric_fns:
    metrics.update(_interval_entries(task.name, metric_fn(targets=targets, scores=scores)))
  return metrics


def worst_items(records: Sequence[Mapping], count: int = 5) -> list[dict]:
  """The `count` items whose best wrong candidate outscored their best correct one by the most.

  Each: {"id", "margin" (best wrong score minus best correct score, > 0), "context" (the input
  text predictions.jsonl records, `inputs_pretokenized`), "candidates": [(text, score, correct)]}.
  Items the model ranks right, and items without both a correct and a wrong candidate, have no
  such margin and are left out; ties go by id, so the list is the same on every run.
  """
  wrong = []
  for record in records:
    scores, gold = record["scores"], record["gold"]
    correct = [s for s, y in zip(scores, gold) if y]
    incorrect = [s for s, y in zip(scores, gold) if not y]
    if correct and incorrect and max(incorrect) > max(correct):
      wrong.append((max(incorrect) - max(correct), record))
  wrong.sort(key=lambda pair: (-pair[0], str(pair[1]["id"])))
  return [{"id": record["id"], "margin": margin, "context": record.get("inputs_pretokenized", ""),
           "candidates": list(zip(_candidate_texts(record), record["scores"],
                                  (bool(y) for y in record["gold"])))}
          for margin, record in wrong[:count]]


def _candidate_texts(record: Mapping) -> list[str]:
  texts = record.get("candidates_pretokenized") or record.get("candidate_texts")
  if texts is None or len(texts) != len(record["scores"]):
    return [f"candidate {j}" for j in range(len(record["scores"]))]
  return [str(t) for t in texts]


def group_metrics(metrics: Mapping[str, Mapping[str, Mapping[str, float]]],
                  metric_groups: Mapping[str, Sequence[str]] | None) -> dict:
  """`{group: {metric: {"value", "low", "high", "tasks"}}}`: per group of tasks, each metric that
  every evaluated member reports, averaged over them unweighted; `tasks` counts them.

  A group with no evaluated member is left out; members not evaluated are not counted (HEAP
  Tables 2 and 3 average accuracy over the criteria of a cluster, each criterion once). The
  interval is the members' bounds averaged: exact if their errors moved together, wider than
  the group's own otherwise (the members share no items to resample jointly).
  """
  out = {}
  for group, names in (metric_groups or {}).items():
    if group in metrics:
      raise ValueError(f"metric group {group!r} is named like a task; groups need their own names")
    members = [metrics[name] for name in dict.fromkeys(names) if name in metrics]
    shared = [metric for metric in (members[0] if members else ())
              if all(metric in member for member in members)]
    if shared:
      out[group] = {metric: {**outputs.interval(*(np.mean([m[metric][k] for m in members])
                                                   for k in ("value", "low", "high"))),
                             "tasks": len(members)}
                    for metric in shared}
  return out


def candidate_tasks(mixture_or_task_name: str, split: str):
  """The tasks to score: those of the mixture (or the task) that have `split` and score metrics."""
  import seqio  # pylint: disable=g-import-not-at-top  # runner must import without TensorFlow

  provider = data.get_provider(mixture_or_task_name)
  tasks = provider.tasks if isinstance(provider, seqio.Mixture) else [provider]
  chosen = []
  for task in tasks:
    if split not in task.splits:
      print(f"skipping {task.name}: it has no {split!r} split (it has {', '.join(task.splits)})")
    elif not task.score_metric_fns:
      print(f"skipping {task.name}: it has no score metric (a generation task)")
    else:
      chosen.append(task)
  if not chosen:
    raise ValueError(f"{mixture_or_task_name!r} has no task with a {split!r} split and score "
                     "metrics to evaluate")
  return chosen


def checkpoint_step(checkpoint_path: str) -> int | None:
  """The training step of the checkpoint evaluation reads (`<step>/params`), None when it has none."""
  try:
    location = checkpoints.params_location(checkpoint_path)
  except (FileNotFoundError, NotADirectoryError):  # Hugging Face or t5x: no orbax step directory
    return None
  name = storage.name(storage.parent(location))
  return int(name) if name.isdigit() else None


def params_fingerprint(params) -> str:
  """sha256 over every parameter's path, shape, dtype and values (a strided sample of a big one)."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    stride = max(1, leaf.size // FINGERPRINT_SAMPLE)
    sample = _on_every_host(leaf.reshape(-1)[::stride])  # a leaf split over hosts is whole on none
    digest.update(f"{jax.tree_util.keystr(path)} {leaf.shape} {leaf.dtype} {stride}\n".encode())
    digest.update(sample.tobytes())
  return "sha256:" + digest.hexdigest()


def project_version() -> str:
  """The project's git commit ("+modified" when tracked files differ from it), or "unknown"."""
  def git(*args):
    return subprocess.run(["git", "-C", PROJECT_ROOT, *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()
  try:
    commit = git("rev-parse", "HEAD")
    return commit + ("+modified" if git("status", "--porcelain", "--untracked-files=no") else "")
  except (OSError, subprocess.SubprocessError):  # no git, or not a checkout (an installed copy)
    return "unknown"


def _vocabulary(tasks) -> dict:
  vocabulary = tasks[0].output_features["inputs"].vocabulary
  vocabulary = getattr(vocabulary, "resolved", vocabulary)  # t5_tasks' gin-configured wrapper
  model_file = getattr(vocabulary, "sentencepiece_model_file", None)
  return {"class": type(vocabulary).__name__, "size": int(vocabulary.vocab_size), "model_file": model_file,
          "model_sha256": model_file and hashlib.sha256(storage.read_bytes(model_file)).hexdigest()}


def provenance(*, mixture_or_task_name, split, checkpoint_path, config: T5Config, params, tasks,
               task_feature_lengths, scorer, normalization) -> dict:
  """What produced an evaluation's numbers (the module docstring lists it), as JSON reads it back
  (tuples as lists), so that it compares equal to a recorded one."""
  described, configuration = data.tasks_provenance(tasks)
  record = {"mixture_or_task_name": mixture_or_task_name, "split": split, "scorer": scorer,
            "normalization": normalization if scorer == "likelihood" else None,
            "checkpoint_path": storage.absolute(checkpoint_path),
            "checkpoint_step": checkpoint_step(checkpoint_path),
            "params_fingerprint": params_fingerprint(params), "model_config": dataclasses.asdict(config),
            "task_feature_lengths": dict(task_feature_lengths), "vocabulary": _vocabulary(tasks),
            "data": described, "task_configuration": configuration, "version": project_version()}
  return json.loads(json.dumps(record))


def score_identity(settings: Mapping) -> dict:
  """`settings` as compared on resuming (`data.content_identity`): all but where the checkpoint,
  the vocabulary's file and the data are (their fingerprints and sha256 identify them) and the
  project's version (NOT_SCORE_FIELDS)."""
  return data.content_identity(json.loads(json.dumps(settings)), NOT_SCORE_FIELDS)


def _check_settings(output_dir: str, settings: dict) -> None:
  """Refuses predictions of another provenance in `output_dir` (finished or not), naming each
  setting that differs with both values (`score_identity` compares them), and predictions whose
  provenance is unknown; `_record_settings` records it."""
  layout = run_dir.EvalDir(output_dir)
  path = layout.settings
  if not (outputs.read_written_ids(layout.predictions) or storage.list_names(layout.prediction_parts)):
    return
  if not storage.exists(path):
    raise ValueError(f"{output_dir} holds predictions but no {run_dir.SETTINGS}: what produced them is "
                     "unknown, and resuming could mix their scores with these. Use a new EVAL_OUTPUT_DIR, "
                     "or delete this one to start over")
  changed = data.identity_differences(score_identity(json.loads(storage.read_text(path))), score_identity(settings))
  if changed:
    shown = "; ".join(changed[:MAX_CHANGES_SHOWN])
    more = f"; and {len(changed) - MAX_CHANGES_SHOWN} more" if len(changed) > MAX_CHANGES_SHOWN else ""
    raise ValueError(f"{output_dir} holds predictions of another evaluation; settings that differ from "
                     f"{path}: {shown}{more}; resuming or reusing them would mix their scores. Use a new "
                     "EVAL_OUTPUT_DIR, or delete this one to start over")


def _record_settings(output_dir: str, settings: dict) -> None:
  storage.write_text(run_dir.EvalDir(output_dir).settings,
                            json.dumps(settings, indent=2, sort_keys=True) + "\n")


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


@contextlib.contextmanager
def _predictions(output_dir: str):
  """The appender of output_dir/predictions.jsonl on process 0, `_ItemsWrittenByProcessZero` on
  the others; when the block ends, the file is complete and closed for every process to read."""
  with contextlib.ExitStack() as stack:
    if _writes_outputs():
      appender = stack.enter_context(outputs.predictions_appender(output_dir))
    _sync("evaluate: predictions.jsonl opened")  # the others read it after any repair
    if not _writes_outputs():
      appender = _ItemsWrittenByProcessZero(output_dir)
    yield appender
  _sync("evaluate: predictions.jsonl closed")


def _records(file: dict) -> str:
  if file.get("records_read") is None:
    return ""
  normalised = file.get("records_normalised") or {}
  return (f", {file['records_read']} records read, {file['records_skipped']} skipped"
          + "".join(f", {count} {what}" for what, count in normalised.items()))


def _notes(settings: dict) -> list[str]:
  """The provenance lines of the report header and the console."""
  step = settings["checkpoint_step"]
  files = [f for task_data in settings["data"].values() for f in task_data.get("files", [])]
  unique = {f["path"]: f for f in files}
  lines = [f"checkpoint {settings['checkpoint_path']}" + (f" at step {step}" if step is not None else "")
           + f", parameters {settings['params_fingerprint'][:23]}…",
           f"vocabulary {settings['vocabulary']['class']} ({settings['vocabulary']['size']} ids), "
           f"feature lengths {settings['task_feature_lengths']}, project version {settings['version']}",
           "data: " + ("; ".join(f"{f['path']} ({f['bytes']} bytes, sha256 {f['sha256'][:12]}"
                                 + _records(f) + ")"
                                 for f in unique.values()) or "no files (TFDS or other sources)")]
  quickstart = sorted({f["dataset"] for f in unique.values() if f["quickstart"]})
  if quickstart:
    lines.append(f"QUICKSTART DATA (a few hand-written examples, not the datasets): {', '.join(quickstart)}")
  return lines


def evaluate(*, mixture_or_task_name: str, task_feature_lengths, checkpoint_path: str, output_dir: str,
             batch_size: int = 32, split: str = "test", normalization: str = "token",
             scorer: str = "likelihood", model_config: T5Config | None = None, mesh_shape=(-1, 1),
             logical_axis_rules=partitioning.STANDARD_LOGICAL_AXIS_RULES, use_cached_tasks=False,
             multi_host: bool | None = None, run_config: str | None = None,
             metric_groups: Mapping[str, Sequence[str]] | None = None,
             references: report.References | None = None, bucket_by_length: bool = True) -> dict:
  """Scores a task or mixture with a checkpoint; writes predictions, metrics.json and report.html.

  Returns the metrics (`{task or group: {metric: {"value", "low", "high"}}}`). On SIGINT or SIGTERM it
  stops after the batch being scored and raises `checkpoints.PreemptionGuard.Interrupted` saying
  how many items predictions.jsonl holds; calling it again resumes. The model and batches are
  sharded over every device of every process by `mesh_shape` (data, model) and the rules, every
  scoring call inside the mesh and the rules. `multi_host` (None: detected from the environment,
  as training's) joins the processes of a multi-host run first (`partitioning.
  initialize_distributed`); they run as one program, and process 0 alone writes `output_dir`, the
  same files one process writes. `run_config` (the gin configuration's text) is written to
  `output_dir/config.gin`. scripts/evaluate.py calls it through gin (gin/runs/eval.gin).

  `metric_groups` ({group: [task names]}) adds, beside the tasks, each group's average over its
  evaluated tasks (`group_metrics`; scripts/evaluate.py names HEAP's clusters). Groups are
  computed from the finished predictions like the tasks' metrics, so they are not provenance:
  a resumed evaluation may name other groups. `references` (`{task: [(metric, label, value,
  source), ...]}`, plain data: scripts/evaluate.py builds it from t5_tasks.references) puts the
  papers' figures on the report. The report also lists each task's items most wrong
  (`worst_items`). `bucket_by_length` (BUCKET_BY_LENGTH) batches items of alike lengths together
  (`score_task`); predictions.jsonl holds the items in the tasks' order either way.
  """
  check_scoring(scorer, normalization)
  storage.check_reachable(output_dir, "EVAL_OUTPUT_DIR")
  if not isinstance(bucket_by_length, bool):
    raise ValueError(f"BUCKET_BY_LENGTH must be True or False, got {bucket_by_length!r}")
  partitioning.initialize_distributed(multi_host)
  host_memory.reuse_freed_memory()
  mesh = partitioning.create_mesh(*mesh_shape)  # every process's devices: a model may outgrow a host
  rules = partitioning.as_rules(logical_axis_rules)
  partitioning.check_batch_size(batch_size, mesh, rules)
  tasks = candidate_tasks(mixture_or_task_name, split)
  check_metrics_scorable(tasks, scorer)
  data.require_examples(tasks, split)
  config, params = checkpoints.load_params(checkpoint_path, model_config, mesh, rules)
  settings = provenance(mixture_or_task_name=mixture_or_task_name, split=split,
                        checkpoint_path=checkpoint_path, config=config, params=params, tasks=tasks,
                        task_feature_lengths=task_feature_lengths, scorer=scorer,
                        normalization=normalization)
  _check_settings(output_dir, settings)  # every process, so that all refuse alike
  _sync("evaluate: settings checked")  # before process 0 records its own
  if _writes_outputs():
    storage.makedirs(output_dir)
    _record_settings(output_dir, settings)
    if run_config is not None:
      outputs.write_run_config(output_dir, run_config)
  notes = _notes(settings)
  print("\n".join(notes), flush=True)
  score_fn = make_score_fn(config, scorer, normalization, mesh, rules)
  stopping = "finishing the batch being scored, then stopping"
  # Batches are numbered across tasks, skipped ones included: the sequence jax's preemption sync
  # point needs, the same on every process.
  batch_numbers = itertools.count(1)
  with _predictions(output_dir) as appender, checkpoints.PreemptionGuard(stopping=stopping) as guard:
    if appender.done:
      print(f"resuming: {len(appender.done)} items already in {appender.path}", flush=True)
    order = []  # (task, id) of every item, in the tasks' order
    for task in tasks:
      if guard.should_stop():
        break
      stats = score_task(task.name, split, task_feature_lengths, batch_size, score_fn, params, appender,
                         total=task.num_input_examples(split), mesh=mesh, rules=rules,
                         use_cached=use_cached_tasks, should_stop=lambda: guard.should_stop(next(batch_numbers)),
                         bucket_by_length=bucket_by_length)
      order += [(task.name, item_id) for item_id in stats.ids]
    totals = [t.num_input_examples(split) for t in tasks]
    total = None if None in totals else sum(totals)
    if guard.should_stop() and len(appender.done) != total:  # a signal after the last batch: done
      raise guard.interrupted(f"interrupted after {len(appender.done)}/{total or '?'} items, kept in "
                              f"{appender.path}; rerun the same command to resume")
    path = appender.path
  if _writes_outputs():  # a resumed file holds the items scored before the stop, perhaps out of order
    outputs.reorder_predictions(path, order)
  _sync("evaluate: predictions.jsonl in the tasks' order")
  by_task = {}
  for record in outputs.read_predictions(path):
    by_task.setdefault(record["task"], []).append(record)
  metrics = {task.name: task_metrics(task, by_task[task.name]) for task in tasks if task.name in by_task}
  groups = group_metrics(metrics, metric_groups)
  if not _writes_outputs():
    return {**metrics, **groups}
  outputs.write_metrics(output_dir, {**metrics, **groups}, provenance=settings)
  counts = report.Table("Items scored", ("task", "items"),
                        [(task.name, len(by_task.get(task.name, []))) for task in tasks])
  notes = [f"{mixture_or_task_name}, split {split!r}, scorer {scorer}"
           + (f", normalisation {normalization!r}: {NORMALIZATIONS[normalization][1]}"
              if scorer == "likelihood" else "")] + notes
  # Tasks the model ranks right throughout, and generation tasks (one candidate), have none.
  wrong_items = {task.name: worst_items(by_task.get(task.name, [])) for task in tasks}
  most_wrong = [report.worst_items_table(name, items) for name, items in wrong_items.items() if items]
  html_path = report.write_report(output_dir, title=f"Evaluation of {mixture_or_task_name}",
                                  metrics=metrics, groups=groups, tables=[counts, *most_wrong],
                                  notes=notes, references=references)
  print(f"wrote {path}, {run_dir.EvalDir(output_dir).metrics} and {html_path}", flush=True)
  return {**metrics, **groups}
