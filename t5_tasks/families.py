"""The task families, declared as data: one `TaskFamily` each, registered by `t5_tasks.tasks`.

A family is the tasks over one dataset that share a reader, an example signature, splits,
preprocessing and a metric. Its `examples` function turns the files bound to its datasets
into example dicts through the dataset's validating reader (`t5_tasks.sources`); each of its
tasks is registered as `<name>` over those files and, where a TFDS builder prepares the
dataset, as `<name>_tfds`. Variants (TimeDial's scopes, HEAP's criteria) are tasks that
replace a few of their family's fields.
"""
import collections
import dataclasses
import functools
import os
from typing import Any, Callable, Mapping

import tensorflow as tf

from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks import temporal_tagger
from t5_tasks.sources import asq
from t5_tasks.sources import heap
from t5_tasks.sources import records
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial

Files = Mapping[str, Mapping[str, str]]  # dataset key -> {split or "all": path}
Examples = dict[str, list[dict]]  # split -> example dicts


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A family's dataset as prepared by `t5_tasks.sources.tfds_builders`, for its `_tfds` tasks."""
  name: str  # "builder[/config]:version"
  splits: Mapping[str, str]  # task split -> TFDS split
  to_examples: Callable  # seqio step: prepared examples -> the example dicts `examples` makes


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
    metric_fn: seqio score metric fn over `t5_tasks.tasks.candidate_targets`; None to generate text.
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
    "preference": {**CLOZE_SIGNATURE, "instruction": _STRING, "context_labels": _STRINGS,
                   "context_texts": _STRINGS, "candidate_scores": _SCORES},
}

SPLITS = ("train", "validation", "test")
_RELEASED_SPLITS = {"train": "train", "val": "validation", "valid1": "validation",
                    "valid2": "test", "test": "test"}


# Absolute path -> the report of its latest read: provenance records what each file gave.
READ_REPORTS: dict[str, records.ReadReport] = {}


def _read(reader, path, *args):
  read, report = reader(*args, path)
  READ_REPORTS[os.path.abspath(path)] = report
  return read


def _single_file(files: Files, dataset: str) -> str:
  if "all" not in files[dataset]:
    raise ValueError(f"{dataset}: expected one file bound as {{'all': PATH}}, got {files[dataset]}")
  return files[dataset]["all"]


def _one_hot(index: int, size: int) -> list[int]:
  return [int(i == index) for i in range(size)]


def advice_examples(files: Files) -> Examples:
  """One example per good comment of each RedditAdvice2019 situation."""
  out = {split: [] for split in SPLITS}
  for s in _read(reddit_advice.read_reddit_advice, _single_file(files, "reddit_advice")):
    for i, comment in enumerate(s.good_comments):
      out[_RELEASED_SPLITS[s.split]].append(dict(
          id=f"{s.id}/{i}", subreddit=s.subreddit, created_utc=s.created_utc, title=s.title,
          selftext=s.selftext, targets=comment.body, candidates=[comment.body],
          candidate_labels=[1]))
  return out


def _masked_dialog_example(d: temporal_tagger.MaskedDialog) -> dict:
  return dict(id=d.id, conversation=list(d.conversation), mask_turn=d.mask_turn,
              candidates=list(d.candidates), candidate_labels=list(d.candidate_labels),
              candidate_rules=list(d.candidate_rules))


def timedial_examples(files: Files) -> Examples:
  out = {}
  for split, path in files["timedial"].items():
    out[split] = [_masked_dialog_example(temporal_tagger.MaskedDialog(
        id=item.id, conversation=item.conversation, mask_turn=item.mask_turn,
        candidates=item.correct + item.incorrect, candidate_labels=(1, 1, 0, 0),
        candidate_rules=("", "") + item.incorrect_rules))
        for item in _read(timedial.read_timedial, path)]
  return out


def _dialogs(path: str):
  if path.endswith(".jsonl"):
    return _read(temporal_tagger.read_dialogs, path)
  return [(item.id, tuple(turn.replace(timedial.MASK, item.correct[0])
                          for turn in item.conversation))
          for item in _read(timedial.read_timedial, path)]


def weak_supervision_examples(files: Files) -> Examples:
  return {split: [_masked_dialog_example(d)
                  for d in temporal_tagger.weak_supervision_from_dialogs(_dialogs(path))]
          for split, path in files["dialogs"].items()}


def asq_examples(files: Files) -> Examples:
  """Narrative and both questions; annotated pair types joined by id where they exist."""
  rounds = [_read(asq.read_asq_annotations, path) for path in files["asq_annotations"].values()]
  groups = {}
  for annotations in rounds:
    for a in annotations:
      groups.setdefault(a.id, asq.pair_groups(a.true_qn_type, a.paired_qn_type))
  kinds = asq.pair_types_by_id(*rounds)
  return {split: [dict(id=item.id, inputs=item.narrative, candidates=list(item.questions),
                       candidate_labels=_one_hot(item.label, 2), pair_type=kinds.get(item.id, ""),
                       pair_groups="|".join(groups.get(item.id, ())))
                  for item in _read(asq.read_asq, path)]
          for split, path in files["asq"].items()}


def summarize_examples(files: Files) -> Examples:
  """Preferred summary first; ids are the post's id and the comparison's rank for that post."""
  out = {split: [] for split in SPLITS}
  seen = collections.Counter()
  for c in _read(summarize_feedback.read_comparisons, _single_file(files, "summarize_feedback")):
    seen[c.id] += 1
    out[_RELEASED_SPLITS.get(c.split, "train")].append(dict(
        id=f"{c.id}#{seen[c.id]}", subreddit=c.subreddit, title=c.title, post=c.post,
        candidates=[c.summaries[c.choice], c.summaries[1 - c.choice]],
        candidate_labels=[1, 0], candidate_scores=[1.0, 0.0]))
  return out


def heap_examples(files: Files, criterion: str) -> Examples:
  path = _single_file(files, f"heap/{heap.HEAP_CRITERIA[criterion].source}")
  comparisons = _read(heap.read_heap_comparisons, path, criterion)
  out = {split: [] for split in SPLITS}
  splits = heap.context_splits(c.context for c in comparisons)
  for c in comparisons:
    out[splits[c.context]].append(dict(
        id=c.id, instruction=c.instruction, context_labels=[k for k, _ in c.context],
        context_texts=[v for _, v in c.context], candidates=[c.good, c.bad],
        candidate_labels=[1, 0], candidate_scores=[c.good_score, c.bad_score]))
  return out


TURINGADVICE_GENERATION = TaskFamily(
    name="turingadvice_generation",
    examples=advice_examples,
    signature=SIGNATURES["advice"],
    splits=SPLITS,
    quickstart_files={"reddit_advice": {"all": "reddit_advice_2019.jsonl"}},
    steps=(preprocessors.advice_inputs,),
    tfds=TfdsSource("reddit_advice2019:1.0.0", {s: s for s in SPLITS},
                    preprocessors.from_tfds_advice),
)
TIMEDIAL_CLOZE = TaskFamily(
    name="timedial_cloze",
    examples=timedial_examples,
    signature=SIGNATURES["dialog"],
    splits=("test",),
    quickstart_files={"timedial": {"test": "timedial_test.json"}},
    steps=(),  # each scope's own: its variant
    metric_fn=metrics.timedial_metric_fn,
    tfds=TfdsSource("timedial:1.0.0", {"test": "test"}, preprocessors.from_tfds_timedial),
    variants={scope: {"steps": (functools.partial(preprocessors.timedial_inputs, scope=scope),)}
              for scope in preprocessors.TIMEDIAL_SCOPES},
)
# Unlabeled dialogs have no TFDS builder: files only.
TIMEDIAL_WEAK_SUPERVISION = TaskFamily(
    name="timedial_weak_supervision",
    examples=weak_supervision_examples,
    signature=SIGNATURES["dialog"],
    splits=("train",),
    # TimeDial's own dialogs stand in for unlabeled ones in the demo only; bind real
    # dialogs (JSON lines of {"id", "conversation"}) for training.
    quickstart_files={"dialogs": {"train": "timedial_test.json"}},
    steps=(functools.partial(preprocessors.timedial_inputs, scope="full"),),
    metric_fn=metrics.timedial_metric_fn,
)
ASQ_INTENT_CLOZE = TaskFamily(
    name="asq_intent_cloze",
    examples=asq_examples,
    signature=SIGNATURES["asq"],
    splits=("train", "test"),
    quickstart_files={"asq": {"train": "asq_train.json", "test": "asq_test.json"},
                      "asq_annotations": {"first": "asq_human_annotation_first.json",
                                          "second": "asq_human_annotation_second.json"}},
    steps=(preprocessors.cloze_targets,),
    metric_fn=metrics.asq_metric_fn,
    # The builder also prepares ASQ's validation and annotation files; the task has no such split.
    tfds=TfdsSource("asq:1.0.0", {s: s for s in ("train", "test")}, preprocessors.from_tfds_asq),
)
SUMMARIZE_FEEDBACK_PREFERENCE = TaskFamily(
    name="summarize_feedback_preference",
    examples=summarize_examples,
    signature=SIGNATURES["summary"],
    splits=SPLITS,
    quickstart_files={"summarize_feedback": {"all": "summarize_comparisons.jsonl"}},
    steps=(preprocessors.summary_inputs,),
    metric_fn=metrics.preference_metric_fn,
    tfds=TfdsSource("summarize_from_feedback:1.0.0",
                    {"train": "train", "validation": "valid1", "test": "valid2"},
                    preprocessors.from_tfds_summaries),
)
_HEAP_QUICKSTART_FILES = {"turingadvice": {"all": "turingadvice_eval.jsonl"},
                          "tellmewhy": {"all": "tellmewhy_test_caters_sample.csv"}}
HEAP = TaskFamily(
    name="heap",
    examples=heap_examples,  # each criterion's variant binds the criterion and its source file
    signature=SIGNATURES["preference"],
    splits=SPLITS,
    quickstart_files={},
    steps=(preprocessors.preference_inputs,),
    metric_fn=metrics.preference_metric_fn,
    variants={criterion: {
        "examples": functools.partial(heap_examples, criterion=criterion),
        "quickstart_files": {f"heap/{spec.source}": _HEAP_QUICKSTART_FILES.get(spec.source, {})},
        # The builder splits by `heap.context_splits` as `heap_examples` does: the same items.
        "tfds": TfdsSource(f"heap_comparisons/{criterion}:1.1.0", {s: s for s in SPLITS},
                           preprocessors.from_tfds_heap),
    } for criterion, spec in heap.HEAP_CRITERIA.items()},
)

FAMILIES = (TURINGADVICE_GENERATION, TIMEDIAL_CLOZE, TIMEDIAL_WEAK_SUPERVISION, ASQ_INTENT_CLOZE,
            SUMMARIZE_FEEDBACK_PREFERENCE, HEAP)
