"""seqio tasks and mixtures -> numpy batches for this host.

Training order is seqio's own deterministic pipeline: the task (or mixture) is shuffled with
`seed` and repeated, then batched; resuming at step n skips the first n batches of that same
stream (`tf.data.Dataset.skip`), so a restarted run sees exactly the batches the uninterrupted
one would have. Skipping re-reads the skipped examples (seconds for the project's datasets; a
cached task, USE_CACHED_TASKS, makes it cheaper).

With several processes, every host reads that same global stream of whole batches, and
`partitioning.global_batch` places on each host's devices the rows they hold: the batches do not
depend on the process count, so 2 processes x 2 devices train exactly as 1 x 4 do, and a run
resumes on another number of hosts with the batches it would have read. seqio's `ShardInfo`
would read disjoint files instead, at the price of an order that changes with the host count;
every host preprocessing every example is cheap at these datasets' sizes (thousands of
examples, not C4), and a batch of token ids is small.

Token-CE batches use seqio's `EncDecFeatureConverter` without packing (the network has no
segment ids, so packed rows would attend across examples). Cloze and preference items become
`[B, K, T]` candidate tensors by `candidate_arrays` (runner/arrays.py).

seqio and TensorFlow are imported inside the functions: the rest of runner/ runs without them.
"""
import contextlib
import difflib
import itertools
import time
from typing import Any, Iterator, Mapping, Sequence

import jax
import numpy as np

from models import scoring
from runner import truncation
# Examples -> arrays (runner/arrays.py), read here by their callers as data's.
from runner.arrays import (  # pylint: disable=unused-import
    TOKEN_FEATURES, bucket_length, candidate_arrays, candidate_rows, example_id, example_metadata,
    first_sentinel_id, pack_candidates, packed_arrays, scored_text_lengths, trim_columns, trim_padding)


def get_provider(name: str):
  """The registered seqio task or mixture `name`; an unknown name is an error listing close names."""
  import seqio  # pylint: disable=g-import-not-at-top
  known = set(seqio.TaskRegistry.names()) | set(seqio.MixtureRegistry.names())
  if name not in known:
    close = difflib.get_close_matches(name, sorted(known), n=6, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else "no close name"
    raise ValueError(f"unknown task or mixture {name!r} ({hint}; {len(known)} are registered, "
                     "t5_tasks/tasks.py and t5_tasks/mixtures.py list them)")
  return seqio.get_mixture_or_task(name)


def mixture_rates(name: str, split: str) -> list[tuple[str, float]]:
  """(task name, share of the examples it contributes to `split`) of a mixture, or [(task, 1.0)].

  As seqio's Mixture.get_dataset, tasks without `split` (TimeDial's test-only cloze) take no share.
  """
  import seqio  # pylint: disable=g-import-not-at-top
  provider = get_provider(name)
  if not isinstance(provider, seqio.Mixture):
    return [(provider.name, 1.0)]
  rates = [(task.name, float(provider.get_rate(task))) for task in provider.tasks if split in task.splits]
  total = sum(rate for _, rate in rates) or 1.0
  return [(task, rate / total) for task, rate in rates]


def tasks_with_split(name: str, split: str) -> list:
  """The seqio tasks of mixture (or task) `name` that have `split`."""
  import seqio  # pylint: disable=g-import-not-at-top
  provider = get_provider(name)
  tasks = provider.tasks if isinstance(provider, seqio.Mixture) else [provider]
  return [task for task in tasks if split in task.splits]


def source_provenance(task) -> dict:
  """What a task's data source read: files (path, size, sha256, records read and skipped) and
  examples per split.

  t5_tasks' file-backed sources describe themselves (`data_provenance`); runner does not import
  t5_tasks, so any other source is named by seqio's description of it (a TFDS one by its name).
  """
  describe = getattr(task.source, "data_provenance", None)
  return describe() if describe is not None else {"source": str(task.source)}


def tasks_provenance(tasks) -> tuple[dict, dict | None]:
  """({task name: `source_provenance`}, the tasks' configuration): t5_tasks' sources each report
  the configuration of all its configurables (gin's, the same for every task), kept once."""
  described = {task.name: dict(source_provenance(task)) for task in tasks}
  configurations = [entry.pop("configuration") for entry in described.values() if "configuration" in entry]
  return described, (configurations[0] if configurations else None)


# Fields of a data file's record that do not identify its data: where it is (a run copied
# elsewhere reads the same data), and what its reader made of it (decided by the content, which
# the sha256 identifies).
FILE_LOCATION_FIELDS = ("path", "records_read", "records_skipped", "records_normalised")
# A record's top-level fields that its data and settings decide rather than identify: what the
# feature lengths cut (`training_truncation`), which a resume at other lengths may change.
DERIVED_FIELDS = ("truncation",)


def content_identity(record: Mapping, ignore: Sequence[str] = ()) -> dict:
  """A provenance `record` flattened to {"a.b[0].c": value}, without the fields `ignore` names
  (dotted), each data file's FILE_LOCATION_FIELDS and the DERIVED_FIELDS: every other field,
  present or future, is compared, so that no hand-kept list can miss one."""
  ignore = (*ignore, *DERIVED_FIELDS)

  def flat(value, prefix):
    if isinstance(value, Mapping):
      for key, item in value.items():
        if f"{prefix}{key}" in ignore or (".files[" in prefix and key in FILE_LOCATION_FIELDS):
          continue
        yield from flat(item, f"{prefix}{key}.")
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
      for i, item in enumerate(value):
        yield from flat(item, f"{prefix[:-1]}[{i}].")
    else:
      yield prefix[:-1], list(value) if isinstance(value, tuple) else value
  return dict(flat(record, ""))


def identity_differences(recorded: Mapping, now: Mapping, only_recorded: bool = False) -> list[str]:
  """"field: recorded X, now Y" for each field of two `content_identity`s that differs (with
  `only_recorded`, of the fields `recorded` holds: a record older than a field does not know it)."""
  fields = set(recorded) if only_recorded else set(recorded) | set(now)
  return [f"{k}: recorded {recorded.get(k, '(none)')!r}, now {now.get(k, '(none)')!r}"
          for k in sorted(fields) if recorded.get(k, "(none)") != now.get(k, "(none)")]


def require_examples(tasks, split: str) -> None:
  """Stops with the task, split and files named when a task's `split` holds no example."""
  for task in tasks:
    if task.num_input_examples(split) == 0:
      files = [f["path"] for f in source_provenance(task).get("files", [])]
      raise ValueError(f"task {task.name}: split {split!r} has no examples (files read: "
                       f"{', '.join(files) or 'none'}); bind files that hold {split!r} records")


def _chunks(iterator, size):
  while chunk := list(itertools.islice(iterator, size)):
    yield chunk


@contextlib.contextmanager
def graph_mode_maps():
  """Builds tf.data pipelines without AutoGraph: every `map` function is traced as plain Python.

  seqio's and t5_tasks' preprocessors are tensor code with no Python control flow on tensors, so
  AutoGraph's source-to-source conversion changes nothing they compute, yet it is what building a
  pipeline mostly costs (about 8 of the 25 s a process takes to build the quickstart mixture's).
  TensorFlow has no public switch for it: this is its own status context (ag_ctx), and without
  it pipelines are built with AutoGraph, as before.
  """
  try:
    from tensorflow.python.autograph.core import ag_ctx  # pylint: disable=g-import-not-at-top
  except ImportError:
    yield
    return
  with ag_ctx.ControlStatusCtx(status=ag_ctx.Status.DISABLED):
    yield


def _lengths(feature_lengths):
  return feature_lengths["inputs"], feature_lengths.get("candidates", feature_lengths["targets"])


def train_batches(mixture_or_task_name: str, feature_lengths: Mapping[str, int], batch_size: int, *,
                  candidates=False, split="train", seed=0, start_step=0,
                  use_cached=False) -> Iterator[dict[str, np.ndarray]]:
  """Endless whole training batches (the same on every host), from batch number `start_step` on.

  Token batches hold `input_ids` [B, L] and `target_ids` [B, T]; with `candidates` (reward
  objectives) they are candidate arrays.
  """
  import seqio  # pylint: disable=g-import-not-at-top
  if not candidates:
    with graph_mode_maps():
      dataset = seqio.get_dataset(
          mixture_or_task_name, dict(feature_lengths), seqio.EncDecFeatureConverter(pack=False),
          dataset_split=split, use_cached=use_cached, shuffle=True, num_epochs=None, seed=seed,
          verbose=False)
    dataset = dataset.batch(batch_size, drop_remainder=True).skip(start_step)
    for batch in dataset.as_numpy_iterator():
      yield {"input_ids": batch["encoder_input_tokens"], "target_ids": batch["decoder_target_tokens"]}
    return
  provider = get_provider(mixture_or_task_name)
  with graph_mode_maps():
    dataset = provider.get_dataset(dict(feature_lengths), split, use_cached=use_cached, shuffle=True,
                                   seed=seed, num_epochs=None)
  dataset = dataset.skip(start_step * batch_size)
  for chunk in _chunks(dataset.as_numpy_iterator(), batch_size):
    yield candidate_arrays(chunk, *_lengths(feature_lengths))


# Items sorted by length together (`bucketed_candidate_batches`): enough that batches of similar
# lengths form, few enough that a large task's examples are not all held at once.
BUCKET_WINDOW = 4096


# Examples `candidate_examples` takes from tf.data per step. Each step out of tf.data costs
# milliseconds of Python and eager overhead (about as much as the task's whole pipeline), so
# examples come in groups and are split in numpy; a group is a few evaluation batches.
READ_GROUP = 128


def _ragged_numpy(values: np.ndarray, splits: Sequence[np.ndarray]) -> np.ndarray:
  """What `tf.RaggedTensor.numpy()` returns for (flat values, nested row splits): rows as a 1-D
  object array where their lengths differ, else stacked (its own code, on numpy arrays)."""
  if len(splits) > 1:
    values = _ragged_numpy(values, splits[1:])
  rows = [values[a:b] for a, b in zip(splits[0][:-1], splits[0][1:])]
  if not rows:
    return np.zeros((0, 0) + values.shape[1:], values.dtype)
  return np.array(rows, dtype=object if any(len(row) != len(rows[0]) for row in rows) else None)


def _feature_rows(value) -> list:
  """A feature of a `ragged_batch` group -> each example's value, as `as_numpy_iterator` gives it
  for one example: bytes or numpy scalars, arrays, ragged features as `_ragged_numpy` (read-only
  arrays, as tf.data's)."""
  if not hasattr(value, "nested_row_splits"):  # dense: fixed shape in every example
    array = value.numpy()
    array.setflags(write=False)
    return list(array)
  flat = value.flat_values.numpy()
  splits = [s.numpy() for s in value.nested_row_splits]
  out = []
  for i in range(len(splits[0]) - 1):
    start, stop = splits[0][i], splits[0][i + 1]
    inner = []  # this example's own row splits, from 0
    for level in splits[1:]:
      inner.append(level[start:stop + 1] - level[start])
      start, stop = level[start], level[stop]
    row = _ragged_numpy(flat[start:stop], inner) if inner else flat[start:stop]
    row.setflags(write=False)
    out.append(row)
  return out


def _grouped_examples(dataset, size: int) -> Iterator[dict]:
  if not hasattr(dataset, "ragged_batch"):  # not a tf.data.Dataset: a stand-in that only iterates (tests)
    yield from dataset.as_numpy_iterator()
    return
  for group in dataset.ragged_batch(size).prefetch(1):
    features = {name: _feature_rows(value) for name, value in group.items()}
    for i in range(len(next(iter(features.values())))):
      yield {name: rows[i] for name, rows in features.items()}


def candidate_examples(task_name: str, split: str, feature_lengths: Mapping[str, int], use_cached=False,
                       group: int = READ_GROUP, counter: truncation.TaskCounter | None = None):
  """(iterator over the task's tokenized examples in its order, the candidates' vocabulary).

  The examples are exactly `as_numpy_iterator`'s, read `group` at a time (READ_GROUP); a `counter`
  counts what the lengths cut of each as it passes (with the task's vocabulary).
  """
  task = get_provider(task_name)
  with graph_mode_maps():
    dataset = task.get_dataset(dict(feature_lengths), split, use_cached=use_cached, shuffle=False, num_epochs=1)
  examples = _grouped_examples(dataset, group)
  if counter is not None:
    examples = counter.reading(task.output_features).counted(examples)
  return examples, task.output_features["candidates"].vocabulary


# Seconds between the progress lines of a pass that counts what the lengths cut.
COUNT_PROGRESS_S = 10.0


def count_truncation(task_name: str, split: str, feature_lengths: Mapping[str, int], features: Sequence[str],
                     use_cached=False) -> dict:
  """One pass over a task's split as its pipeline makes it at `feature_lengths` (in order, once):
  the `truncation.TaskCounter` record of `features`, with a progress line every COUNT_PROGRESS_S."""
  counter = truncation.TaskCounter(task_name, feature_lengths, features)
  examples, _ = candidate_examples(task_name, split, feature_lengths, use_cached, counter=counter)
  total, started = get_provider(task_name).num_input_examples(split), time.perf_counter()
  for _ in examples:
    if time.perf_counter() - started >= COUNT_PROGRESS_S:
      started = time.perf_counter()
      if jax.process_index() == 0:
        print(f"{task_name}: counting what the feature lengths cut, {counter.items:,}/{total or '?'} examples",
              flush=True)
  return counter.record()


def training_truncation(tasks, dataset, candidates: bool, recorded: Mapping | None = None) -> dict:
  """{task: `count_truncation` record} of each training task's split (inputs and targets, or
  candidates for a reward objective); prints a line per task with anything cut.

  One pass over each split when a run starts, not a count in the stream: a mixture keeps only the
  output features (a carried length would not reach the batches) and the stream repeats. A resume
  on the same data (data_files.json checked) takes `recorded`, the count it kept, when it was made
  at the same lengths of the same features. Process 0 alone counts: it alone prints and writes it.
  """
  if jax.process_index() != 0:
    return {}
  features = ("inputs", "candidates") if candidates else ("inputs", "targets")
  lengths = dict(dataset.task_feature_lengths)
  records = {}
  for task in tasks:
    kept = (recorded or {}).get(task.name)
    same = kept is not None and kept["feature_lengths"] == lengths and all(name in kept for name in features)
    records[task.name] = kept if same else count_truncation(task.name, dataset.split, lengths, features,
                                                            dataset.use_cached)
  for line in truncation.lines(records):
    print(line, flush=True)
  return records


def batch_rows(items: int, batch_size: int, row_multiple: int = 1, powers_of_two: bool = False) -> int:
  """Rows of a batch of `items` examples: `batch_size`, or fewer for a last batch, its items
  rounded up to `row_multiple` (the blocks a mesh splits rows into, `partitioning.batch_blocks`).
  A task of 4 items in batches of 32 was 87% empty rows; a short batch compiles its own shape, but
  there is one per task (per window, bucketed).

  `powers_of_two` rounds a short batch up to a power of two of those blocks, for callers whose
  short batches come in every size (a server: one per request); they then compile at most
  log2(batch_size / row_multiple) + 1 shapes, not one per size."""
  blocks = -(-items // row_multiple)
  if powers_of_two:
    blocks = 1 << (blocks - 1).bit_length()
  return min(batch_size, blocks * row_multiple)


def candidate_batch(examples: Sequence[Mapping[str, Any]], feature_lengths: Mapping[str, int], batch_size: int,
                    vocabulary, num_candidates=None, row_multiple: int = 1) -> dict[str, np.ndarray]:
  """One evaluation batch of `examples` (at most `batch_size`), as `candidate_batches` describes."""
  real = len(examples)
  rows = batch_rows(real, batch_size, row_multiple)
  arrays = candidate_arrays(examples, *_lengths(feature_lengths), num_candidates)
  arrays["score_mask"] = np.asarray(scoring.span_score_mask(arrays["candidate_ids"], first_sentinel_id(vocabulary),
                                                            vocabulary.eos_id))
  arrays.update(scored_text_lengths(vocabulary, arrays["candidate_ids"], arrays["score_mask"]))
  batch = {name: np.pad(value, [(0, rows - real)] + [(0, 0)] * (value.ndim - 1))
           for name, value in arrays.items()}
  batch["example_mask"] = np.arange(rows) < real
  return batch


def candidate_batches(task_name: str, split: str, feature_lengths: Mapping[str, int], batch_size: int, *,
                      use_cached=False, num_candidates=None, row_multiple: int = 1,
                      counter: truncation.TaskCounter | None = None
                      ) -> Iterator[tuple[list[dict], dict[str, np.ndarray]]]:
  """Every example of a cloze/preference task exactly once, in the task's order, for evaluation.

  Yields (metadata of each real example, batch). Batches have `batch_size` rows, the last one its
  items' rows padded to a multiple of `row_multiple` (`batch_rows`); `example_mask` [B] marks the
  real rows. Besides `candidate_arrays`' arrays, `score_mask` [B, K, T] marks the tokens a
  candidate's score sums (`models.scoring.span_score_mask`), and `scored_chars`, `scored_bytes`
  [B, K] measure the text those tokens decode to, for per-character and per-byte normalisation.
  Metadata holds every non-token feature (id, *_pretokenized texts, candidate_rules, ...). A
  `counter` counts what the lengths cut (`candidate_examples`).
  """
  examples, vocabulary = candidate_examples(task_name, split, feature_lengths, use_cached, counter=counter)
  for chunk in _chunks(examples, batch_size):
    yield ([example_metadata(example) for example in chunk],
           candidate_batch(chunk, feature_lengths, batch_size, vocabulary, num_candidates, row_multiple))


def length_key(example: Mapping[str, Any], feature_lengths: Mapping[str, int]) -> tuple[int, ...]:
  """(input bucket, packed candidates' bucket, candidates, input length, packed length): the order in which
  `bucketed_candidate_batches` groups examples, so that a batch's rows need alike padding. The
  packed length is the candidates' tokens end to end (`pack_candidates`), what the decoder reads."""
  input_limit, candidate_limit = _lengths(feature_lengths)
  inputs = min(len(example["inputs"]), input_limit)
  rows = candidate_rows(example["candidates"])
  packed = sum(min(len(row), candidate_limit) for row in rows)
  return (bucket_length(inputs, input_limit), bucket_length(packed, candidate_limit * max(len(rows), 1)), len(rows),
          inputs, packed)


def bucketed_candidate_batches(examples: Iterator[Mapping[str, Any]], feature_lengths: Mapping[str, int],
                               batch_size: int, vocabulary, num_candidates=None, window: int = BUCKET_WINDOW,
                               row_multiple: int = 1) -> Iterator[tuple[list[int], list[dict], dict[str, np.ndarray]]]:
  """`candidate_batches` of `examples` (`candidate_examples`' iterator) grouped by length: yields
  (each real row's position in the examples' order, metadata, batch).

  Each `window` examples are sorted by `length_key` (ties by position, so every process forms the
  same batches) and batched in that order; after `trim_padding` a batch pads little beyond its own
  longest row, and its shape is one of `bucket_length`'s few buckets. A window's remainder (fewer
  than `batch_size` items, its rows rounded up to `row_multiple`: `batch_rows`) is its first batch,
  of the shortest items, so that any empty rows are as short as they can be.
  """
  start = 0
  for items in _chunks(examples, window):
    order = sorted(range(len(items)), key=lambda i: (length_key(items[i], feature_lengths), i))
    remainder = len(order) % batch_size
    for rows in itertools.chain([order[:remainder]] if remainder else [], _chunks(iter(order[remainder:]), batch_size)):
      chunk = [items[i] for i in rows]
      yield ([start + i for i in rows], [example_metadata(example) for example in chunk],
             candidate_batch(chunk, feature_lengths, batch_size, vocabulary, num_candidates, row_multiple))
    start += len(items)
