"""What every task family module shares: the `TaskFamily` declaration, the example signatures and
the reading helpers (each file read is reported once, for provenance)."""
import dataclasses
import os
from typing import Any, Callable, Mapping

import tensorflow as tf

import storage
from t5_tasks.sources import records

Files = Mapping[str, Mapping[str, str]]  # dataset key -> {split or "all": path}
Examples = dict[str, list[dict]]  # split -> example dicts


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """How `t5_tasks.sources.tfds_builders` prepares a family's dataset for its `_tfds` tasks: the
  builder finds these files under a manual_dir and stores what the family's `examples` makes of
  them, split by split, so that a `_tfds` task has its file task's items.

  Attributes:
    name: "builder[/config]:version".
    files: {dataset key: {split or "all": glob patterns under manual_dir}}, for the keys that
      `examples` reads; each file of the first dataset is read with every file of the others.
    instructions: where the files come from and where to put them (TFDS's manual download text).
    release_notes: {version: what changed}.
  """
  name: str
  files: Mapping[str, Mapping[str, tuple[str, ...]]]
  instructions: str
  release_notes: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskFamily:
  """The declaration of a family of seqio tasks over one dataset's released files.

  Attributes:
    name: the task's name; with variants, the prefix of each `<name>_<variant>`.
    examples: {dataset key: {split or "all": path}} -> {split: [example dict]}.
    signature: {feature: tf.TensorSpec} of one example dict.
    splits: the task's splits, each a key of what `examples` returns.
    quickstart_files: {dataset key: {split or "all": file in t5_tasks/data/}}: the datasets that
      `examples` reads (the keys `t5_tasks.tasks.data_files.files` binds) and their default
      files; {} for a dataset without one, which must then be bound.
    steps: seqio preprocessors that make the `inputs` and `targets` text; tokenizing follows.
    metric_fn: seqio score metric fn over `t5_tasks.tasks.candidate_targets` (a generation
      task's: `metrics.perplexity_metric_fn` over its references).
    tfds: the prepared TFDS dataset, for a `<name>_tfds` twin of each task; None if there is none.
    variants: {variant: {field: value}}: a task `<name>_<variant>` for each, this declaration
      with those fields replaced; {} for a family of one task, `<name>`.
  """
  name: str
  examples: Callable[[Files], Examples]
  signature: Mapping[str, tf.TensorSpec]
  splits: tuple[str, ...]
  quickstart_files: Files
  steps: tuple[Callable, ...]
  metric_fn: Callable | None = None
  tfds: TfdsSource | None = None
  variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

  def tasks(self) -> tuple["TaskFamily", ...]:
    """The declaration of each file task: this one, or one per variant."""
    if not self.variants:
      return (self,)
    return tuple(dataclasses.replace(self, name=f"{self.name}_{variant}", variants={}, **fields)
                 for variant, fields in self.variants.items())

  @property
  def task_names(self) -> tuple[str, ...]:
    return tuple(task.name for task in self.tasks())


_STRING = tf.TensorSpec([], tf.string)
_STRINGS = tf.TensorSpec([None], tf.string)
_SCORES = tf.TensorSpec([None], tf.float32)
# Every example holds its candidates, so that any task's examples can be scored.
CLOZE_SIGNATURE = {"id": _STRING, "candidates": _STRINGS,
                   "candidate_labels": tf.TensorSpec([None], tf.int32)}
# By kind of example: TimeDial's cloze and its weak supervision both yield masked dialogs.
SIGNATURES = {
    "advice": {**CLOZE_SIGNATURE, "subreddit": _STRING,
               "created_utc": tf.TensorSpec([], tf.int64), "title": _STRING,
               "selftext": _STRING, "targets": _STRING},
    "dialog": {**CLOZE_SIGNATURE, "conversation": _STRINGS,
               "mask_turn": tf.TensorSpec([], tf.int32), "candidate_rules": _STRINGS},
    "asq": {**CLOZE_SIGNATURE, "inputs": _STRING, "pair_type": _STRING, "pair_groups": _STRING},
    "summary": {**CLOZE_SIGNATURE, "subreddit": _STRING, "title": _STRING, "post": _STRING,
                "candidate_scores": _SCORES},
    "preference": {**CLOZE_SIGNATURE, "inputs": _STRING, "context_id": _STRING,
                   "context_texts": _STRINGS, "candidate_scores": _SCORES},
}

SPLITS = ("train", "validation", "test")
RELEASED_SPLITS = {"train": "train", "val": "validation", "valid1": "validation",
                   "valid2": "test", "test": "test"}


# file_key(path) -> the report of its latest read: provenance records what each file gave.
READ_REPORTS: dict[str, records.ReadReport] = {}


def file_key(path) -> str:
  """One name per data file: a local path made absolute (a relative one names the same file from
  anywhere), a bucket path (`gs://...`) as it is."""
  return os.fspath(path) if storage.is_bucket(path) else os.path.abspath(path)


def read(reader, path, *args):
  """The reader's records; what it normalised in the file is told once per file."""
  records_read, report = reader(*args, path)
  key = file_key(path)
  if report.normalised and key not in READ_REPORTS:
    print(f"NOTE: {report.summary()}", flush=True)
  READ_REPORTS[key] = report
  return records_read


def single_file(files: Files, dataset: str) -> str:
  if "all" not in files[dataset]:
    raise ValueError(f"{dataset}: expected one file bound as {{'all': PATH}}, got {files[dataset]}")
  return files[dataset]["all"]


def one_hot(index: int, size: int) -> list[int]:
  return [int(i == index) for i in range(size)]
