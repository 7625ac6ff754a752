"""The scoring loop: a task's items, read and batched on a thread ahead of the device, scored,
and written in batches to a sink; and `evaluate_tasks`, the evaluation offline evaluation
(runner/evaluate.py) and evaluation during training (runner/training_evaluation.py) both run.

Items are batched with items of alike lengths (less padding) and read on a thread while the
device scores; each batch's lines are written as soon as it is scored (a kill loses only the batch
in flight), so that an interrupted evaluation skips the items already written when run again.
"""
import collections
import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from typing import Callable, Iterator, Mapping, Sequence

import jax
import numpy as np

from runner import data
from runner import eval_metrics
from runner import outputs
from runner import partitioning
from runner import truncation
from runner.progress import Progress

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
  `ids` are the task's item ids in its order (repeated ones numbered, as written). `truncation` is
  what the feature lengths cut of the task's items (`truncation.TaskCounter.record`), once every
  item was read (None when the task stopped early)."""
  task: str
  items: int = 0
  seconds: float = 0.0
  input_tokens: int = 0
  candidate_tokens: int = 0
  positions: int = 0
  batches: int = 0
  shapes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (B, L, S): batches
  ids: list = dataclasses.field(default_factory=list, repr=False)
  truncation: dict | None = None

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


def _task_batches(task_name, split, feature_lengths, batch_size, use_cached, bucket_by_length, row_multiple, counter):
  """(each real row's position in the task's order, metadata with distinct ids (`distinct_ids`,
  numbered in the task's order), batch), bucketed by length or in the task's order; a batch of
  fewer than `batch_size` items has its rows rounded up to `row_multiple` (`data.batch_rows`).
  `counter` counts what the lengths cut of each item as it is read."""
  occurrences: dict[str, int] = {}
  if bucket_by_length and batch_size > 1:  # a one-item batch is trimmed to its own lengths already
    examples, vocabulary = data.candidate_examples(task_name, split, feature_lengths, use_cached, counter=counter)

    def numbered():
      for example in examples:
        [example["id"]] = distinct_ids([data.example_id(example)], occurrences)
        yield example
    yield from data.bucketed_candidate_batches(numbered(), feature_lengths, batch_size, vocabulary,
                                               row_multiple=row_multiple)
    return
  start = 0
  for metadata, batch in data.candidate_batches(task_name, split, feature_lengths, batch_size, use_cached=use_cached,
                                                row_multiple=row_multiple, counter=counter):
    for item, item_id in zip(metadata, distinct_ids([item["id"] for item in metadata], occurrences)):
      item["id"] = item_id
    yield list(range(start, start + len(metadata))), metadata, batch
    start += len(metadata)


def score_task(task_name: str, split: str, feature_lengths, batch_size: int, score_fn, params,
               appender: outputs.PredictionsAppender, total: int | None = None,
               partitioner: partitioning.Partitioner | None = None, use_cached=False,
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
  `batch_size` is global: with a `partitioner`, each process reads every batch and places on its devices
  the rows they hold (`Partitioner.global_batch`); `score_fn` returns the whole batch's scores to
  every process, so every process calls `appender.write` for the same items.
  What the feature lengths cut of the items (inputs, candidates) is counted as they are read,
  printed in one line when anything was, and kept in `stats.truncation`.
  """
  progress = Progress(task_name, total, "items")
  stats = TaskStats(task_name)
  started = time.perf_counter()
  ids_at: dict[int, str] = {}  # position -> distinct id
  row_multiple = 1 if partitioner is None else partitioner.batch_blocks()
  counter = truncation.TaskCounter(task_name, feature_lengths)  # counted on the reading thread
  batches = _prefetched((positions, metadata, batch, data.packed_arrays(batch))  # made on the reading thread
                        for positions, metadata, batch in _task_batches(task_name, split, feature_lengths, batch_size,
                                                                        use_cached, bucket_by_length, row_multiple,
                                                                        counter))
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
      if partitioner is not None:
        arrays = partitioner.global_batch(arrays)
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
    else:  # every item read (the reading thread has finished): the count is whole
      stats.truncation = counter.record()
  finally:
    batches.close()  # stops the reading thread
    stats.seconds = time.perf_counter() - started
    stats.ids = [ids_at[p] for p in sorted(ids_at)]
  if progress.done:
    progress.report()
  if stats.items and jax.process_index() == 0:
    print(stats.line(), flush=True)
  if stats.truncation and truncation.any_cut(stats.truncation) and jax.process_index() == 0:
    print(truncation.line(task_name, stats.truncation), flush=True)
  return stats


class RecordsInMemory(outputs.CollectedRecords):
  """A sink that keeps the records in memory (evaluation during training keeps no predictions file)."""

  def finish(self, order: Sequence[tuple[str, str]]) -> list[dict]:
    """The records in `order` ((task, id) of every item, in the tasks' order)."""
    rank = {key: i for i, key in enumerate(order)}
    return sorted(self.records, key=lambda record: rank[(record["task"], record["id"])])


@dataclasses.dataclass
class Evaluated:
  """What `evaluate_tasks` gives: each task's metrics, each group's, the records of each task in
  its order, and what the feature lengths cut of each task's items."""
  tasks: dict  # {task: {metric: {"value", "low", "high"}}}
  groups: dict  # {group: {metric: {"value", "low", "high", "tasks"}}}
  records: dict  # {task: [record, ...]}
  truncation: dict  # {task: truncation.TaskCounter record}

  @property
  def metrics(self) -> dict:
    return {**self.tasks, **self.groups}


def evaluate_tasks(tasks, split: str, score_fn, params, sink, *, feature_lengths, batch_size: int,
                   metric_groups: Mapping[str, Sequence[str]] | None = None,
                   partitioner: partitioning.Partitioner | None = None, use_cached=False, bucket_by_length: bool = True,
                   guard=None) -> Evaluated:
  """Scores the items of `tasks` not yet in `sink` (`score_task`), then computes each task's
  metrics and each group's average of them from every item's record.

  `sink` takes each scored item's record (`write`, `flush`, the `done` (task, id) pairs) and, once
  every task is scored, gives back all records in the tasks' order (`finish(order)`: a file put
  in order and read back, or `RecordsInMemory`). `guard` (a `checkpoints.PreemptionGuard`) stops
  the scoring at the end of a batch when a signal asked it to; its batches are numbered across
  tasks, skipped ones included: the sequence jax's preemption sync point needs, the same on every
  process.
  """
  batch_numbers = itertools.count(1)
  should_stop = (lambda: False) if guard is None else (lambda: guard.should_stop(next(batch_numbers)))
  order = []  # (task, id) of every item, in the tasks' order
  cut = {}  # {task: what the lengths cut of its items}
  for task in tasks:
    if guard is not None and guard.should_stop():
      break
    stats = score_task(task.name, split, feature_lengths, batch_size, score_fn, params, sink,
                       total=task.num_input_examples(split), partitioner=partitioner, use_cached=use_cached,
                       should_stop=should_stop, bucket_by_length=bucket_by_length)
    order += [(task.name, item_id) for item_id in stats.ids]
    if stats.truncation is not None:
      cut[task.name] = stats.truncation
  by_task = {}
  for record in sink.finish(order):
    by_task.setdefault(record["task"], []).append(record)
  metrics = {task.name: eval_metrics.task_metrics(task, by_task[task.name]) for task in tasks
             if task.name in by_task}
  return Evaluated(metrics, eval_metrics.group_metrics(metrics, metric_groups), by_task, cut)


def check_truncated_candidates(tasks, split: str, feature_lengths, policy: str, use_cached=False) -> None:
  """Refuses, before anything is scored, a task with candidates longer than their length when
  `policy` (TRUNCATED_CANDIDATES) is 'refuse': one line naming the task, the count, an item and
  the length that holds them (`truncation.refusal`); 'score' scores them cut, counted as read."""
  truncation.check_policy(policy)
  if policy != "refuse":
    return
  for task in tasks:
    record = data.count_truncation(task.name, split, feature_lengths, ("inputs", "candidates"), use_cached)
    if record["candidates"]["cut"]:
      raise ValueError(truncation.refusal(task.name, record))


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
