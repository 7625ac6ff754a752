"""The seqio tasks of the four families, registered on import.

Every task reads released-format files through `t5_tasks.sources` when its dataset is
built (never at import). By default these are the quickstart files in `t5_tasks/data/`;
a gin binding points a dataset at real files, keyed by split ("all" for a file whose
records carry their own split). Each task also has a `<name>_tfds` variant that reads the
dataset prepared by `t5_tasks.sources.tfds_builders` (`tfds build --manual_dir`) through
`seqio.TfdsDataSource`, from the TFDS data dir (seqio.set_tfds_data_dir_override):

    t5_tasks.tasks.data_files.files = {
        'asq': {'test': '/data/asq/asq_test.json'},
        'heap/defeasible': {'all': '/data/heap/def_inf_eval_results.jsonl'},
    }

Every task (so that any of them mix) yields, after `get_dataset`:
  inputs [L] int32, targets [T] int32 (EOS last; for cloze and preference items the tokens
  of the first correct candidate), candidates [K, T_k] int32 (ragged, EOS after each,
  trimmed to the `candidates` length, else the `targets` length), candidate_labels [K]
  int32 (1 = correct / preferred; preference items are [good, bad] -> [1, 0]; an advice
  example is one candidate, [1]),
  id string, and `<key>_pretokenized` strings for inputs, targets and candidates.
Metadata: TimeDial `candidate_rules` [K] string ("" for correct ones), ASQ `pair_type`
and `pair_groups` ("|"-joined) strings, preference `candidate_scores` [K] float32.
Mixtures keep only inputs, targets, candidates and candidate_labels.
"""
import collections
import functools
import hashlib
import pathlib
from typing import Callable, Mapping

import gin
import seqio
import tensorflow as tf

from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks import temporal_tagger
from t5_tasks import vocab
from t5_tasks.sources import asq
from t5_tasks.sources import heap
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import tfds_builders  # pylint: disable=unused-import  (registers builders)
from t5_tasks.sources import timedial

QUICKSTART_DIR = pathlib.Path(__file__).resolve().parent / "data"
QUICKSTART_FILES = {
    "reddit_advice": {"all": "reddit_advice_2019.jsonl"},
    "timedial": {"test": "timedial_test.json"},
    # TimeDial's own dialogs stand in for unlabeled ones in the demo only; bind real
    # dialogs (JSON lines of {"id", "conversation"}) for training.
    "dialogs": {"train": "timedial_test.json"},
    "asq": {"train": "asq_train.json", "test": "asq_test.json"},
    "asq_annotations": {"first": "asq_human_annotation_first.json",
                        "second": "asq_human_annotation_second.json"},
    "summarize_feedback": {"all": "summarize_comparisons.jsonl"},
    "heap/turingadvice": {"all": "turingadvice_eval.jsonl"},
    "heap/tellmewhy": {"all": "tellmewhy_test_caters_sample.csv"},
}
# Splits of each dataset; a real file set must use these names.
DATASET_SPLITS = {
    "reddit_advice": ("train", "validation", "test"),
    "timedial": ("test",),
    "dialogs": ("train",),
    "asq": ("train", "test"),
    "summarize_feedback": ("train", "validation", "test"),
    "heap": ("train", "validation", "test"),
}
_RELEASED_SPLITS = {"train": "train", "val": "validation", "valid1": "validation",
                    "valid2": "test", "test": "test"}


@gin.configurable
def data_files(dataset: str, files: Mapping[str, Mapping[str, str]] | None = None
               ) -> dict[str, str]:
  """{split or "all": path} for `dataset`: `files[dataset]` if bound, else the quickstart."""
  if files and dataset in files:
    return dict(files[dataset])
  if dataset not in QUICKSTART_FILES:
    raise ValueError(f"no quickstart data for {dataset!r}; bind its released files with "
                     f"t5_tasks.tasks.data_files.files = {{'{dataset}': {{'all': PATH}}}}")
  return {key: str(QUICKSTART_DIR / name) for key, name in QUICKSTART_FILES[dataset].items()}


def _read(reader, path):
  records, _ = reader(path)
  return records


def _single_file(dataset: str) -> str:
  files = data_files(dataset)
  if "all" not in files:
    raise ValueError(f"{dataset}: expected one file bound as {{'all': PATH}}, got {files}")
  return files["all"]


def _context_splits(contexts) -> dict:
  """{context: split}: contexts ordered by a hash, the last tenths to validation and test.

  All comparisons of one context share a split; with 3 or more contexts each split gets at
  least one, so even the quickstart files evaluate.
  """
  ordered = sorted(set(contexts), key=lambda c: hashlib.sha256(repr(c).encode()).hexdigest())
  held_out = max(1, round(0.1 * len(ordered))) if len(ordered) >= 3 else 0
  train = len(ordered) - 2 * held_out
  return {c: "train" if i < train else "validation" if i < train + held_out else "test"
          for i, c in enumerate(ordered)}


def _one_hot(index: int, size: int) -> list[int]:
  return [int(i == index) for i in range(size)]


def advice_examples() -> dict[str, list[dict]]:
  """One example per good comment of each RedditAdvice2019 situation."""
  out = {split: [] for split in DATASET_SPLITS["reddit_advice"]}
  for s in _read(reddit_advice.read_reddit_advice, _single_file("reddit_advice")):
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


def timedial_examples() -> dict[str, list[dict]]:
  out = {}
  for split, path in data_files("timedial").items():
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


def weak_supervision_examples() -> dict[str, list[dict]]:
  return {split: [_masked_dialog_example(d)
                  for d in temporal_tagger.weak_supervision_from_dialogs(_dialogs(path))]
          for split, path in data_files("dialogs").items()}


def asq_examples() -> dict[str, list[dict]]:
  """Narrative and both questions; annotated pair types joined by id where they exist."""
  rounds = [_read(asq.read_asq_annotations, path)
            for path in data_files("asq_annotations").values()]
  groups = {}
  for annotations in rounds:
    for a in annotations:
      groups.setdefault(a.id, asq.pair_groups(a.true_qn_type, a.paired_qn_type))
  kinds = asq.pair_types_by_id(*rounds)
  return {split: [dict(id=item.id, inputs=item.narrative, candidates=list(item.questions),
                       candidate_labels=_one_hot(item.label, 2), pair_type=kinds.get(item.id, ""),
                       pair_groups="|".join(groups.get(item.id, ())))
                  for item in _read(asq.read_asq, path)]
          for split, path in data_files("asq").items()}


def summarize_examples() -> dict[str, list[dict]]:
  """Preferred summary first; ids are the post's id and the comparison's rank for that post."""
  out = {split: [] for split in DATASET_SPLITS["summarize_feedback"]}
  seen = collections.Counter()
  for c in _read(summarize_feedback.read_comparisons, _single_file("summarize_feedback")):
    seen[c.id] += 1
    out[_RELEASED_SPLITS.get(c.split, "train")].append(dict(
        id=f"{c.id}#{seen[c.id]}", subreddit=c.subreddit, title=c.title, post=c.post,
        candidates=[c.summaries[c.choice], c.summaries[1 - c.choice]],
        candidate_labels=[1, 0], candidate_scores=[1.0, 0.0]))
  return out


def heap_examples(criterion: str) -> dict[str, list[dict]]:
  path = _single_file(f"heap/{heap.HEAP_CRITERIA[criterion].source}")
  comparisons, _ = heap.read_heap_comparisons(criterion, path)
  out = {split: [] for split in DATASET_SPLITS["heap"]}
  splits = _context_splits(c.context for c in comparisons)
  for c in comparisons:
    out[splits[c.context]].append(dict(
        id=c.id, instruction=c.instruction, context_labels=[k for k, _ in c.context],
        context_texts=[v for _, v in c.context], candidates=[c.good, c.bad],
        candidate_labels=[1, 0], candidate_scores=[c.good_score, c.bad_score]))
  return out


_STRING = tf.TensorSpec([], tf.string)
_STRINGS = tf.TensorSpec([None], tf.string)
CLOZE_SIGNATURE = {"id": _STRING, "candidates": _STRINGS,
                   "candidate_labels": tf.TensorSpec([None], tf.int32)}
SIGNATURES = {
    "advice": {**CLOZE_SIGNATURE, "subreddit": _STRING,
               "created_utc": tf.TensorSpec([], tf.int64), "title": _STRING,
               "selftext": _STRING, "targets": _STRING},
    "dialog": {**CLOZE_SIGNATURE, "conversation": _STRINGS,
               "mask_turn": tf.TensorSpec([], tf.int32), "candidate_rules": _STRINGS},
    "asq": {**CLOZE_SIGNATURE, "inputs": _STRING, "pair_type": _STRING, "pair_groups": _STRING},
    "summary": {**CLOZE_SIGNATURE, "subreddit": _STRING, "title": _STRING, "post": _STRING,
                "candidate_scores": tf.TensorSpec([None], tf.float32)},
    "preference": {**CLOZE_SIGNATURE, "instruction": _STRING, "context_labels": _STRINGS,
                   "context_texts": _STRINGS,
                   "candidate_scores": tf.TensorSpec([None], tf.float32)},
}


class ReaderSource(seqio.FunctionDataSource):
  """Examples built in Python by a reader-backed function, when the dataset is first built.

  The files are resolved through gin at that time, so bindings parsed after import apply;
  examples are kept per resolved file set.
  """

  def __init__(self, build: Callable[[], dict[str, list[dict]]], signature, splits, files_key):
    self._build = build
    self._signature = signature
    self._files_key = files_key
    self._cache = {}
    super().__init__(dataset_fn=self._dataset_fn, splits=splits)

  def examples(self, split: str) -> list[dict]:
    key = repr(sorted((k, sorted(data_files(k).items())) for k in self._files_key))
    if key not in self._cache:
      self._cache[key] = self._build()
    built = self._cache[key]
    if split not in built:
      raise ValueError(f"no {split!r} split in {built.keys()} (files: {key})")
    return built[split]

  def _dataset_fn(self, split, shuffle_files, seed=None):
    del shuffle_files, seed  # the Task shuffles examples
    examples = self.examples(split)
    return tf.data.Dataset.from_generator(lambda: iter(examples),
                                          output_signature=self._signature)

  def num_input_examples(self, split: str) -> int:
    return len(self.examples(split))


def candidate_targets(output, example=None, is_target=False):
  """seqio postprocess_fn: for targets, the candidate metadata the metric_fns read."""
  if not is_target:
    return output
  def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value
  out = {k: text(example[k]) for k in ("id", "pair_type", "pair_groups") if k in example}
  out.update({k: list(example[k]) for k in ("candidate_labels", "candidate_scores")
              if k in example})
  if "candidate_rules" in example:
    out["candidate_rules"] = [text(rule) for rule in example["candidate_rules"]]
  return out


TEXT = seqio.Feature(vocab.ConfiguredVocabulary())
# Every task has the same features, so that seqio can mix any of them; an advice example is
# an item whose one candidate is its target.
CANDIDATE_FEATURES = {
    "inputs": TEXT,
    "targets": TEXT,
    "candidates": seqio.Feature(vocab.ConfiguredVocabulary(), rank=2),
    "candidate_labels": seqio.Feature(seqio.PassThroughVocabulary(0), add_eos=False,
                                      dtype=tf.int32),
}
_TOKENIZE = (preprocessors.tokenize, preprocessors.append_eos_after_trim)


# Task family -> (TFDS name, {task split: TFDS split}, the step to the file sources' examples).
TFDS_SOURCES = {
    "advice": ("reddit_advice2019:1.0.0", {s: s for s in DATASET_SPLITS["reddit_advice"]},
               preprocessors.from_tfds_advice),
    "timedial": ("timedial:1.0.0", {"test": "test"}, preprocessors.from_tfds_timedial),
    "asq": ("asq:1.0.0", {"train": "train", "validation": "validation", "test": "test"},
            preprocessors.from_tfds_asq),
    "summary": ("summarize_from_feedback:1.0.0",
                {"train": "train", "validation": "valid1", "test": "valid2"},
                preprocessors.from_tfds_summaries),
    # The builder keeps every HEAP comparison in "test": these variants evaluate only.
    "heap": ("heap_comparisons/{criterion}:1.0.0", {"test": "test"}, preprocessors.from_tfds_heap),
}


def _add_candidate_task(name, build, signature, splits, files_key, format_steps, metric_fn,
                        tfds_family, criterion=""):
  """Registers `name` over the released files and `name`_tfds over the prepared dataset."""
  tfds_name, tfds_splits, from_tfds = TFDS_SOURCES[tfds_family]
  for task_name, source, steps in (
      (name, ReaderSource(build, signature, splits, files_key), format_steps),
      (f"{name}_tfds", seqio.TfdsDataSource(tfds_name.format(criterion=criterion),
                                            splits=tfds_splits),
       [from_tfds, *format_steps])):
    seqio.TaskRegistry.add(
        task_name,
        source=source,
        preprocessors=[*steps, *_TOKENIZE],
        output_features=CANDIDATE_FEATURES,
        postprocess_fn=candidate_targets,
        metric_fns=[metric_fn] if metric_fn else [])


def register_tasks():
  """Adds every task of the four families to seqio.TaskRegistry."""
  _add_candidate_task(
      "turingadvice_generation", advice_examples, SIGNATURES["advice"],
      DATASET_SPLITS["reddit_advice"], ["reddit_advice"], [preprocessors.advice_inputs], None,
      "advice")
  for scope in preprocessors.TIMEDIAL_SCOPES:
    _add_candidate_task(
        f"timedial_cloze_{scope}", timedial_examples, SIGNATURES["dialog"],
        DATASET_SPLITS["timedial"], ["timedial"],
        [functools.partial(preprocessors.timedial_inputs, scope=scope)],
        metrics.timedial_metric_fn, "timedial")
  # Weak supervision reads unlabeled dialogs, which have no TFDS builder: files only.
  seqio.TaskRegistry.add(
      "timedial_weak_supervision",
      source=ReaderSource(weak_supervision_examples, SIGNATURES["dialog"],
                          DATASET_SPLITS["dialogs"], ["dialogs"]),
      preprocessors=[functools.partial(preprocessors.timedial_inputs, scope="full"), *_TOKENIZE],
      output_features=CANDIDATE_FEATURES,
      postprocess_fn=candidate_targets,
      metric_fns=[metrics.timedial_metric_fn])
  _add_candidate_task(
      "asq_intent_cloze", asq_examples, SIGNATURES["asq"], DATASET_SPLITS["asq"],
      ["asq", "asq_annotations"], [preprocessors.cloze_targets], metrics.asq_metric_fn, "asq")
  _add_candidate_task(
      "summarize_feedback_preference", summarize_examples, SIGNATURES["summary"],
      DATASET_SPLITS["summarize_feedback"], ["summarize_feedback"],
      [preprocessors.summary_inputs], metrics.preference_metric_fn, "summary")
  for criterion, spec in heap.HEAP_CRITERIA.items():
    _add_candidate_task(
        f"heap_{criterion}", functools.partial(heap_examples, criterion),
        SIGNATURES["preference"], DATASET_SPLITS["heap"], [f"heap/{spec.source}"],
        [preprocessors.preference_inputs], metrics.preference_metric_fn, "heap", criterion)


PREFERENCE_TASKS = tuple(["summarize_feedback_preference"] +
                         [f"heap_{criterion}" for criterion in heap.HEAP_CRITERIA])
CLOZE_TASKS = tuple([f"timedial_cloze_{s}" for s in preprocessors.TIMEDIAL_SCOPES] +
                    ["timedial_weak_supervision", "asq_intent_cloze"])
GENERATION_TASKS = ("turingadvice_generation",)
