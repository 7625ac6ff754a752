"""TFDS builders over the readers: `python -m scripts.build_tfds --manual_dir=DIR` prepares them offline.

Each builder finds its released files under `manual_dir` (searched recursively,
so both `../shared/data`, which lacks RedditAdvice2019 and summarize-from-feedback,
and the flat `t5_tasks/data` work) and reads them with
the validating readers of this package. Importing this module registers the
builders with TFDS and imports TensorFlow, so the readers themselves do not.
"""
import glob
import os

import numpy as np
import tensorflow_datasets as tfds

from t5_tasks import families
from t5_tasks.sources import asq
from t5_tasks.sources import heap
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice

_TEXT = tfds.features.Text()
_TEXTS = tfds.features.Sequence(tfds.features.Text())


def find_files(manual_dir, patterns) -> list[str]:
  """Every path under manual_dir matching one of the glob patterns, sorted, each once."""
  found = {p for pattern in patterns for p in glob.glob(os.path.join(manual_dir, pattern), recursive=True)}
  return sorted(found)


def manual_builders() -> list[type[tfds.core.GeneratorBasedBuilder]]:
  """Every dataset builder here (the public subclasses of _ManualBuilder), sorted by name."""
  found, pending = [], [_ManualBuilder]
  while pending:
    cls = pending.pop()
    pending += cls.__subclasses__()
    if not cls.__name__.startswith("_"):
      found.append(cls)
  return sorted(found, key=lambda cls: cls.name)


class _ManualBuilder(tfds.core.GeneratorBasedBuilder):
  """Shared plumbing: FILES maps a split to the glob patterns of its files."""
  VERSION = tfds.core.Version("1.0.0")
  FILES: dict[str, tuple[str, ...]] = {}
  FEATURES: dict = {}
  DESCRIPTION = ""

  def _info(self):
    # Built directly: dataset_info_from_configs wants package metadata files this module does not have.
    return tfds.core.DatasetInfo(builder=self, description=self.DESCRIPTION,
                                 features=tfds.features.FeaturesDict(self.FEATURES))

  # TFDS prints "Downloading and preparing dataset Unknown size ..." and "Dataset ... downloaded and
  # prepared to ..." around each build, with no download here; scripts.build_tfds prints one line.
  def _log_download_bytes(self) -> None:
    pass

  def _log_download_done(self) -> None:
    pass

  def found_files(self, manual_dir) -> dict[str, list[str]]:
    """{split: paths} of this builder's files under manual_dir; splits without files are left out."""
    files = {split: find_files(manual_dir, patterns) for split, patterns in self.FILES.items()}
    return {split: paths for split, paths in files.items() if paths}

  def _files(self, dl_manager) -> dict[str, list[str]]:
    files = self.found_files(dl_manager.manual_dir)
    if not files:
      raise FileNotFoundError(
          f"{self.name}: no files in {dl_manager.manual_dir}. {self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
    return files

  def _split_generators(self, dl_manager):
    return {split: self._generate_examples(paths) for split, paths in self._files(dl_manager).items()}


class Timedial(_ManualBuilder):
  """TimeDial: four options (two correct) for a masked temporal expression in a dialog."""
  name = "timedial"
  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.0.0": "The released items as read.",
                   "1.1.0": "Normalised as read_timedial reads them: options stripped, a space after "
                            "each speaker tag, empty trailing turns dropped."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Put TimeDial's test.json in manual_dir as timedial_test*.json or "
                                  "timedial/test*.json.")
  FILES = {"test": ("**/timedial_test*.json", "**/timedial/test*.json")}
  FEATURES = {"id": _TEXT, "conversation": _TEXTS, "mask_turn": np.int32, "correct": _TEXTS,
              "incorrect": _TEXTS, "incorrect_rules": _TEXTS}

  def _generate_examples(self, paths):
    for path in paths:
      for item in timedial.read_timedial(path)[0]:
        yield f"{path}:{item.id}", {
            "id": item.id, "conversation": list(item.conversation), "mask_turn": item.mask_turn,
            "correct": list(item.correct), "incorrect": list(item.incorrect),
            "incorrect_rules": list(item.incorrect_rules)}


class Asq(_ManualBuilder):
  """ASQ: which of two questions the narrator asked; pair types joined from annotation rounds."""
  name = "asq"
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Put the ASQ files in manual_dir: asq_train*.json, asq_valid*.json, asq_test*.json and/or "
      "asq_annotation.json, plus the annotation rounds *annotation_first*.json and *annotation_second*.json.")
  FILES = {"train": ("**/asq_train*.json",), "validation": ("**/asq_valid*.json", "**/asq_val.json"),
           "test": ("**/asq_test*.json",), "annotation": ("**/asq_annotation.json",)}
  ROUNDS = (("**/*annotation_first*.json",), ("**/*annotation_second*.json",))
  FEATURES = {"id": _TEXT, "narrative": _TEXT, "questions": _TEXTS, "label": np.int32, "pair_type": _TEXT}

  def _split_generators(self, dl_manager):
    rounds = [asq.read_asq_annotations(path)[0]
              for patterns in self.ROUNDS for path in find_files(dl_manager.manual_dir, patterns)]
    types = asq.pair_types_by_id(*rounds)
    return {split: self._generate_examples(paths, types) for split, paths in self._files(dl_manager).items()}

  def _generate_examples(self, paths, pair_types):
    for path in paths:
      for item in asq.read_asq(path)[0]:
        yield f"{path}:{item.id}", {"id": item.id, "narrative": item.narrative, "questions": list(item.questions),
                                    "label": item.label, "pair_type": pair_types.get(item.id, "")}


class _SplitFieldBuilder(_ManualBuilder):
  """JSON lines whose records name their own split: one pass per split over the same files."""
  SPLIT_NAMES: dict[str, str] = {}  # record split -> TFDS split

  @staticmethod
  def read(path) -> list:
    raise NotImplementedError

  def _split_generators(self, dl_manager):
    paths = [p for ps in self._files(dl_manager).values() for p in ps]
    present = {r.split for path in paths for r in self.read(path)}  # TFDS rejects empty splits
    return {tfds_split: self._generate_examples(paths, split)
            for split, tfds_split in self.SPLIT_NAMES.items() if split in present}


class RedditAdvice2019(_SplitFieldBuilder):
  """RedditAdvice2019: situations and their upvoted advice, split by date."""
  name = "reddit_advice2019"
  MANUAL_DOWNLOAD_INSTRUCTIONS = "Put the RedditAdvice2019 JSON lines (reddit_advice*.jsonl) in manual_dir."
  FILES = {"all": ("**/reddit_advice*.jsonl", "**/redditadvice2019/*.jsonl")}
  SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}
  FEATURES = {"id": _TEXT, "subreddit": _TEXT, "created_utc": np.int64, "title": _TEXT, "selftext": _TEXT,
              "good_comments": tfds.features.Sequence({"body": _TEXT, "score": np.int64})}

  @staticmethod
  def read(path):
    return reddit_advice.read_reddit_advice(path)[0]

  def _generate_examples(self, paths, split):
    for path in paths:
      for s in self.read(path):
        if s.split == split:
          yield f"{path}:{s.id}", {
              "id": s.id, "subreddit": s.subreddit, "created_utc": s.created_utc, "title": s.title,
              "selftext": s.selftext,
              "good_comments": [{"body": c.body, "score": c.score} for c in s.good_comments]}


class SummarizeFromFeedback(_SplitFieldBuilder):
  """Human comparisons of two summaries of a post (learning to summarize from human feedback)."""
  name = "summarize_from_feedback"
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Put the comparison JSON lines (summarize_comparisons*.jsonl or "
                                  "comparisons/*.json) in manual_dir.")
  FILES = {"all": ("**/summarize_comparisons*.jsonl", "**/comparisons/*.json")}
  SPLIT_NAMES = {"train": "train", "valid1": "valid1", "valid2": "valid2"}
  FEATURES = {"id": _TEXT, "subreddit": _TEXT, "title": _TEXT, "post": _TEXT, "summaries": _TEXTS,
              "policies": _TEXTS, "choice": np.int32, "confidence": np.int32}

  @staticmethod
  def read(path):
    return summarize_feedback.read_comparisons(path)[0]

  def _generate_examples(self, paths, split):
    for path in paths:
      for n, c in enumerate(self.read(path)):
        if c.split == split:
          yield f"{path}:{n}", {
              "id": c.id, "subreddit": c.subreddit, "title": c.title, "post": c.post,
              "summaries": list(c.summaries), "policies": list(c.policies), "choice": c.choice,
              "confidence": -1 if c.confidence is None else c.confidence}


class TuringadviceEval(_ManualBuilder):
  """TuringAdvice human evaluation: per situation, each system's advice and its Turk verdict."""
  name = "turingadvice_eval"
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Put the evaluation results JSON lines (turingadvice*.jsonl or "
                                  "turingadvice/*.jsonl) in manual_dir.")
  FILES = {"test": ("**/turingadvice*.jsonl", "**/turingadvice/*.jsonl")}
  FEATURES = {"id": _TEXT, "subreddit": _TEXT, "title": _TEXT, "selftext": _TEXT, "submitted_time": np.int64,
              "best_advice": _TEXT, "systems": _TEXTS, "model_advice": _TEXTS,
              "is_preferred": tfds.features.Sequence(np.bool_),
              "preference_score": tfds.features.Sequence(np.float32)}

  def _generate_examples(self, paths):
    for path in paths:
      for s in turingadvice.read_turingadvice_eval(path)[0]:
        systems = list(s.model_advice)
        yield f"{path}:{s.id}", {
            "id": s.id, "subreddit": s.subreddit, "title": s.title, "selftext": s.selftext,
            "submitted_time": s.submitted_time, "best_advice": s.best_advice, "systems": systems,
            "model_advice": [s.model_advice[x] for x in systems],
            "is_preferred": [s.ratings[x].is_preferred for x in systems],
            "preference_score": [s.ratings[x].preference_score() for x in systems]}


class HeapComparisons(_ManualBuilder):
  """HEAP: one config per criterion (its abbreviation in lower case); the examples of the file
  task `heap_<abbreviation>` (`families.heap_examples`: Table 5's inputs, the good then the bad
  output), in the splits it makes, so a `_tfds` task has its items. The gin settings
  `heap_split` and `heap_instruction` in force when the dataset is built are the ones it keeps.
  """
  name = "heap_comparisons"
  VERSION = tfds.core.Version("2.0.0")
  RELEASE_NOTES = {"1.0.0": "Every comparison in 'test'.",
                   "1.1.0": "train/validation/test by context (heap.context_splits), as the file tasks.",
                   "2.0.0": "All 22 criteria, named by abbreviation; Table 5's rendered inputs and a "
                            "context id; the paper's random 80/10/10 split by default."}
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=a.lower(), description=c.name)
                     for a, c in heap.HEAP_CRITERIA.items()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = ("Put HEAP's released judgment files in manual_dir (../shared/data works as is): "
                                  + "; ".join(f"{s}: {' or '.join(p)}" for s, p in heap.SOURCE_FILES.items()))
  FEATURES = {"id": _TEXT, "context_id": _TEXT, "context_texts": _TEXTS, "inputs": _TEXT,
              "good": _TEXT, "bad": _TEXT,
              "good_score": np.float32, "bad_score": np.float32}

  @property
  def _criterion(self):
    return heap.criterion_of(self.builder_config.name)

  def found_files(self, manual_dir):
    paths = find_files(manual_dir, heap.SOURCE_FILES[heap.HEAP_CRITERIA[self._criterion].source])
    return {"all": paths} if paths else {}

  def _files(self, dl_manager):
    files = self.found_files(dl_manager.manual_dir)
    if not files:
      source = heap.HEAP_CRITERIA[self._criterion].source
      raise FileNotFoundError(f"{self.name}/{self.builder_config.name}: no {source} file in "
                              f"{dl_manager.manual_dir}. {self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
    return files

  def _split_generators(self, dl_manager):
    source = f"heap/{heap.HEAP_CRITERIA[self._criterion].source}"
    by_split = {}
    for path in self._files(dl_manager)["all"]:
      for split, examples in families.heap_examples({source: {"all": path}}, self._criterion).items():
        by_split.setdefault(split, []).extend((path, ex) for ex in examples)
    return {split: self._generate_examples(rows) for split, rows in by_split.items() if rows}

  def _generate_examples(self, rows):
    for path, ex in rows:
      yield f"{path}:{ex['id']}", {
          "id": ex["id"], "context_id": ex["context_id"], "context_texts": ex["context_texts"],
          "inputs": ex["inputs"], "good": ex["candidates"][0], "bad": ex["candidates"][1],
          "good_score": ex["candidate_scores"][0], "bad_score": ex["candidate_scores"][1]}
