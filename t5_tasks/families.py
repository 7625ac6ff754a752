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
import random
from typing import Any, Callable, Mapping

import gin
import tensorflow as tf

import storage
from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks import temporal_tagger
from t5_tasks.sources import asq
from t5_tasks.sources import heap
from t5_tasks.sources import records
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import summarize_references
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
_RELEASED_SPLITS = {"train": "train", "val": "validation", "valid1": "validation",
                    "valid2": "test", "test": "test"}


# file_key(path) -> the report of its latest read: provenance records what each file gave.
READ_REPORTS: dict[str, records.ReadReport] = {}


def file_key(path) -> str:
  """One name per data file: a local path made absolute (a relative one names the same file from
  anywhere), a bucket path (`gs://...`) as it is."""
  return os.fspath(path) if storage.is_bucket(path) else os.path.abspath(path)


def _read(reader, path, *args):
  """The reader's records; what it normalised in the file is told once per file."""
  read, report = reader(*args, path)
  key = file_key(path)
  if report.normalised and key not in READ_REPORTS:
    print(f"NOTE: {report.summary()}", flush=True)
  READ_REPORTS[key] = report
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
  """Four candidates per item, the two correct first; each file's incorrect options are counted
  by rule on the console (the denominators of `error_rate/<rule>`)."""
  out = {}
  for split, path in files["timedial"].items():
    items = _read(timedial.read_timedial, path)
    rules = ", ".join(f"{rule} {n['options']} ({n['items']} items)"
                      for rule, n in timedial.count_per_rule(items).items())
    print(f"{path}: {len(items)} TimeDial items; incorrect options by rule: {rules}", flush=True)
    out[split] = [_masked_dialog_example(temporal_tagger.MaskedDialog(
        id=item.id, conversation=item.conversation, mask_turn=item.mask_turn,
        candidates=item.correct + item.incorrect, candidate_labels=(1, 1, 0, 0),
        candidate_rules=("", "") + item.incorrect_rules))
        for item in items]
  return out


_ANNOUNCED_LEFT_OUT: set[str] = set()  # the weak-supervision file sets whose count was printed


def weak_supervision_examples(files: Files) -> Examples:
  """Every bound dialogs file pooled, the TimeDial test dialogs (the bound `timedial` files) left
  out, then split by dialog into train and validation (`temporal_tagger.weak_supervision_splits`)."""
  dialogs = [d for path in files["dialogs"].values()
             for d in _read(temporal_tagger.read_dialogs, path)]
  test = temporal_tagger.TimeDialTestDialogs(
      item.conversation for path in files["timedial"].values()
      for item in _read(timedial.read_timedial, path))
  kept = [(dialog_id, turns) for dialog_id, turns in dialogs if turns not in test]
  key = repr(sorted((k, sorted(v.items())) for k, v in files.items()))
  if key not in _ANNOUNCED_LEFT_OUT:
    _ANNOUNCED_LEFT_OUT.add(key)
    print(f"timedial_weak_supervision: left out {len(dialogs) - len(kept)} of {len(dialogs)} "
          f"dialogs found in the TimeDial test set ({len(test)} test items: "
          f"{', '.join(files['timedial'].values())})", flush=True)
  return {split: [_masked_dialog_example(d) for d in items]
          for split, items in temporal_tagger.weak_supervision_splits(kept).items()}


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


@gin.configurable
def comparison_filter(min_confidence: int | Mapping[str, int] | None = None, splits: tuple[str, ...] = SPLITS):
  """(min_confidence, splits): the comparisons of `splits` kept are those the labeller rated at
  least `min_confidence` (1..9), or at least the labeller's own threshold when it is a {worker:
  threshold} mapping (a worker it does not name keeps none); None keeps every one, with or
  without a confidence.

  Stiennon et al. select reward models on validation labels above per-labeler high-confidence
  thresholds (C.1, step 4; `scripts.analyze agreement` estimates them), yet found that dropping
  low-confidence labels from training hurt (C.2). Asked when the dataset is built (the tasks
  register before gin parses).
  """
  thresholds = min_confidence.values() if isinstance(min_confidence, Mapping) else [min_confidence]
  if min_confidence is not None and any(t not in range(1, 10) for t in thresholds):
    raise ValueError(f"comparison_filter.min_confidence must be 1..9, {{worker: 1..9}} or None, "
                     f"got {min_confidence!r}")
  unknown = set(splits) - set(SPLITS)
  if unknown:
    raise ValueError(f"comparison_filter.splits names {sorted(unknown)}; the splits are {SPLITS}")
  return min_confidence, tuple(splits)


def summarize_examples(files: Files) -> Examples:
  """Preferred summary first; ids are the post's id and the comparison's rank for that post
  (counted before `comparison_filter`, so that an id names the same comparison either way)."""
  min_confidence, filtered_splits = comparison_filter()
  out = {split: [] for split in SPLITS}
  seen, dropped = collections.Counter(), collections.Counter()
  for c in _read(summarize_feedback.read_comparisons, _single_file(files, "summarize_feedback")):
    seen[c.id] += 1
    split = _RELEASED_SPLITS.get(c.split, "train")
    # 10 is above the 1-9 scale: a worker the mapping does not name keeps no label.
    threshold = min_confidence.get(c.worker, 10) if isinstance(min_confidence, Mapping) else min_confidence
    if (min_confidence is not None and split in filtered_splits
        and (c.confidence is None or c.confidence < threshold)):
      dropped[split] += 1
      continue
    out[split].append(dict(
        id=f"{c.id}#{seen[c.id]}", subreddit=c.subreddit, title=c.title, post=c.post,
        candidates=[c.summaries[c.choice], c.summaries[1 - c.choice]],
        candidate_labels=[1, 0], candidate_scores=[1.0, 0.0]))
  if min_confidence is not None:
    below = ("their labeler's threshold, of a labeler without one," if isinstance(min_confidence, Mapping)
             else min_confidence)
    print(f"summarize_feedback: dropped {sum(dropped.values())} comparisons of confidence below "
          f"{below} or none (" + ", ".join(f"{s} {dropped[s]}" for s in filtered_splits)
          + f"); kept {sum(map(len, out.values()))}", flush=True)
  return out


@gin.configurable
def reference_filter(max_post_tokens: int | None = None, min_summary_tokens: int | None = None,
                     max_summary_tokens: int | None = None):
  """(max_post_tokens, min_summary_tokens, max_summary_tokens) for the TL;DR references; None: no limit.

  The paper's TL;DR filters (appendix A) are 512, 24 and 48 GPT-2 BPE tokens; they are counted
  in the same unit whatever the tasks' vocabulary (`summarize_references.paper_token_count`).
  """
  return max_post_tokens, min_summary_tokens, max_summary_tokens


def _reference_rejection(count, post: str, summary: str, is_post: bool) -> str | None:
  """Which of `reference_filter`'s limits the pair breaks, or None. News articles have no post limit."""
  max_post, min_summary, max_summary = reference_filter()
  if is_post and max_post is not None and count(post) > max_post:
    return f"post over {max_post} tokens"
  if min_summary is None and max_summary is None:
    return None
  length = count(summary)
  if min_summary is not None and length < min_summary:
    return f"summary under {min_summary} tokens"
  if max_summary is not None and length > max_summary:
    return f"summary over {max_summary} tokens"
  return None


def sft_examples(files: Files) -> Examples:
  """One example per distinct (post id, reference summary): the comparisons' summaries by policy
  `ref` (a post is compared many times with its one reference) and the references files'.

  The target is the reference (the only candidate). A references file bound under a split key
  puts all its records in that split; under "all", each record's own `split`. Bind a dataset to
  {} to read none of it. `reference_filter` drops pairs, counted in one printed line.
  """
  pairs = {}  # (post id, summary) -> (split, post record)
  comparisons = files["summarize_feedback"]
  if comparisons:
    for c in _read(summarize_feedback.read_comparisons, _single_file(files, "summarize_feedback")):
      for text, policy in zip(c.summaries, c.policies):
        if policy == "ref":
          pairs.setdefault((c.id, text), (_RELEASED_SPLITS.get(c.split, "train"), c))
  from_comparisons = len(pairs)
  for key, path in files["summarize_references"].items():
    for r in _read(summarize_references.read_references, path):
      split = r.split if key == "all" else key
      split = _RELEASED_SPLITS.get(split, split)
      if split not in SPLITS:
        raise ValueError(f"summarize_references is bound under {key!r}; use 'all' or one of {SPLITS}")
      pairs.setdefault((r.id, r.summary), (split, r))
  count = summarize_references.paper_token_count
  out = {split: [] for split in SPLITS}
  rejected = collections.Counter()
  for (post_id, summary), (split, r) in pairs.items():
    reason = _reference_rejection(count, r.post, summary, bool(r.subreddit))
    if reason:
      rejected[reason] += 1
      continue
    out[split].append(dict(id=post_id, subreddit=r.subreddit, title=r.title, post=r.post,
                           candidates=[summary], candidate_labels=[1], candidate_scores=[1.0]))
  counts = (f"{len(pairs)} references ({from_comparisons} from comparisons), filtered out "
            f"{sum(rejected.values())}" + "".join(f"; {reason}: {n}" for reason, n in sorted(rejected.items())))
  if pairs and rejected.total() == len(pairs):
    raise ValueError(f"summarize_feedback_sft: t5_tasks.families.reference_filter {reference_filter()} "
                     f"leaves no reference: {counts}")
  print(f"summarize_feedback_sft: {counts}", flush=True)
  return out


@gin.configurable
def heap_split(method: str = "paper", seed: int = 0) -> tuple[str, int]:
  """(method, seed) of HEAP's splits: 'paper' (§3: each task's comparisons at random, 80% train,
  10% validation, 10% test; seeded) or 'by_context' (every comparison of one context in one split,
  so no test context is trained on). Asked when the dataset is built."""
  if method not in heap.SPLIT_METHODS:
    raise ValueError(f"heap_split.method must be one of {heap.SPLIT_METHODS}, got {method!r}")
  return method, int(seed)


@gin.configurable
def heap_instruction(template: str | int = "paper", instructions_file: str | None = None,
                     seed: int = 0) -> tuple[str | int, str | None, int]:
  """(template, instructions_file, seed): which instruction each HEAP example carries.

  'paper': Table 5's phrasing (built in). An index: that phrasing of each criterion in
  `instructions_file` (HEAP's instructions.json). 'random': one of the file's phrasings per
  comparison, drawn from (seed, comparison id), so an example keeps its phrasing every epoch.
  """
  if template not in ("paper", "random") and not isinstance(template, int):
    raise ValueError(f"heap_instruction.template must be 'paper', 'random' or an index, got {template!r}")
  if template != "paper" and not instructions_file:
    raise ValueError(f"heap_instruction.template={template!r} needs heap_instruction.instructions_file "
                     "(HEAP's instructions.json)")
  return template, instructions_file, int(seed)


def _heap_instructions(criterion: str, comparisons) -> list[str]:
  """The instruction of each comparison, by `heap_instruction`."""
  template, path, seed = heap_instruction()
  if template == "paper":
    return [heap.HEAP_CRITERIA[criterion].instruction] * len(comparisons)
  templates = _read(heap.read_instruction_templates, path)[criterion]
  if template == "random":
    return [templates[random.Random(f"{seed}/{c.id}").randrange(len(templates))] for c in comparisons]
  if not 0 <= template < len(templates):
    raise ValueError(f"heap_instruction.template={template}: {path} has {len(templates)} phrasings "
                     f"of {criterion}")
  return [templates[template]] * len(comparisons)


def heap_examples(files: Files, criterion: str) -> Examples:
  """One example per comparison: Table 5's inputs (`heap.render_inputs`), the good then the bad
  output as candidates, split by `heap_split`."""
  criterion = heap.criterion_of(criterion)
  spec = heap.HEAP_CRITERIA[criterion]
  path = _single_file(files, f"heap/{spec.source}")
  comparisons = _read(heap.read_heap_comparisons, path, criterion)
  splits = heap.split_comparisons(comparisons, *heap_split())
  out = {split: [] for split in SPLITS}
  for c, instruction in zip(comparisons, _heap_instructions(criterion, comparisons)):
    out[splits[c.id]].append(dict(
        id=c.id, context_id=heap.context_id(c.context), context_texts=[text for _, text in c.context],
        inputs=heap.render_inputs(instruction, c.context, c.output_label, spec.label_input),
        candidates=[c.good, c.bad], candidate_labels=[1, 0],
        candidate_scores=[c.good_score, c.bad_score]))
  return out


TURINGADVICE_GENERATION = TaskFamily(
    name="turingadvice_generation",
    examples=advice_examples,
    signature=SIGNATURES["advice"],
    splits=SPLITS,
    quickstart_files={"reddit_advice": {"all": "reddit_advice_2019.jsonl"}},
    steps=(preprocessors.advice_inputs,),
    # Evaluation scores each reference advice: loss and perplexity (TuringAdvice §3.2 selects
    # models by validation perplexity).
    metric_fn=metrics.perplexity_metric_fn,
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
    tfds=TfdsSource("timedial:1.1.0", {"test": "test"}, preprocessors.from_tfds_timedial),
    variants={scope: {"steps": (functools.partial(preprocessors.timedial_inputs, scope=scope),)}
              for scope in preprocessors.TIMEDIAL_SCOPES},
)
# Unlabeled dialogs have no TFDS builder: files only. The `timedial` files are read to leave
# their dialogs out of training.
TIMEDIAL_WEAK_SUPERVISION = TaskFamily(
    name="timedial_weak_supervision",
    examples=weak_supervision_examples,
    signature=SIGNATURES["dialog"],
    splits=("train", "validation"),
    # Hand-written dialogs for the demo; bind real ones (JSON lines of {"id", "conversation"}).
    quickstart_files={"dialogs": {"all": "timedial_unlabeled_dialogs.jsonl"},
                      "timedial": {"test": "timedial_test.json"}},
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
# Supervised fine-tuning on TL;DR references (B.1: "supervised baselines"): a generation task,
# inputs the query, targets the reference. Files only (no TFDS builder).
SUMMARIZE_FEEDBACK_SFT = TaskFamily(
    name="summarize_feedback_sft",
    examples=sft_examples,
    signature=SIGNATURES["summary"],
    splits=SPLITS,
    quickstart_files={"summarize_feedback": {"all": "summarize_comparisons.jsonl"},
                      "summarize_references": {"all": "summarize_references.jsonl"}},
    steps=(preprocessors.summary_inputs,),
    metric_fn=metrics.perplexity_metric_fn,
)
# Every source with a hand-written quickstart file; CommonGen, defeasible inference and story
# rewriting must be bound to their released files (../shared/data/heap has them).
_HEAP_QUICKSTART_FILES = {"turingadvice": {"all": "turingadvice_eval.jsonl"},
                          "tellmewhy": {"all": "tellmewhy_test_caters_sample.csv"},
                          "hellaswag": {"all": "heap_hellaswag.jsonl"},
                          "counter_narratives": {"all": "heap_counter_narratives.csv"},
                          "chasm": {"all": "heap_chasm.json"}}
HEAP = TaskFamily(
    name="heap",
    examples=heap_examples,  # each criterion's variant binds the criterion and its source file
    signature=SIGNATURES["preference"],
    splits=SPLITS,
    quickstart_files={},
    steps=(preprocessors.cloze_targets,),
    metric_fn=metrics.preference_metric_fn,
    variants={abbreviation.lower(): {
        "examples": functools.partial(heap_examples, criterion=abbreviation),
        "quickstart_files": {f"heap/{spec.source}": _HEAP_QUICKSTART_FILES.get(spec.source, {})},
        # Spearman with the human scores only where Table 2 reports it.
        "metric_fn": functools.partial(metrics.preference_metric_fn, ranked=spec.ranked),
        # The builder makes its examples with `heap_examples`, so its items and splits are the same.
        "tfds": TfdsSource(f"heap_comparisons/{abbreviation.lower()}:2.0.0", {s: s for s in SPLITS},
                           preprocessors.from_tfds_heap),
    } for abbreviation, spec in heap.HEAP_CRITERIA.items()},
)

FAMILIES = (TURINGADVICE_GENERATION, TIMEDIAL_CLOZE, TIMEDIAL_WEAK_SUPERVISION, ASQ_INTENT_CLOZE,
            SUMMARIZE_FEEDBACK_PREFERENCE, SUMMARIZE_FEEDBACK_SFT, HEAP)
