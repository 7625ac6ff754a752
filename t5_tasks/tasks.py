"""The seqio tasks of the declared task families (`t5_tasks.families`), registered on import.

Every task reads released-format files through `t5_tasks.sources` when its dataset is
built (never at import). By default these are the quickstart files in `t5_tasks/data/`;
a gin binding points a dataset at real files, keyed by split ("all" for a file whose
records carry their own split). A family with a TFDS builder also has a `<name>_tfds`
variant of each task that reads the dataset prepared by `t5_tasks.sources.tfds_builders`
(`python -m scripts.build_tfds --manual_dir=...`) through `seqio.TfdsDataSource`, from the TFDS data dir
(seqio.set_tfds_data_dir_override):

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
import functools
import hashlib
import os
import pathlib
from typing import Callable, Mapping

import gin
import seqio
import tensorflow as tf

import storage
from t5_tasks import families
from t5_tasks import preprocessors
from t5_tasks import vocab
from t5_tasks.sources import tfds_builders  # pylint: disable=unused-import  (registers builders)

QUICKSTART_DIR = pathlib.Path(__file__).resolve().parent / "data"
# Dataset key -> {split or "all": file in QUICKSTART_DIR}, from the registered families.
QUICKSTART_FILES: dict[str, dict[str, str]] = {}
_ANNOUNCED_QUICKSTART: set[str] = set()  # datasets whose quickstart notice was printed


@gin.configurable
def data_files(dataset: str, files: Mapping[str, Mapping[str, str]] | None = None
               ) -> dict[str, str]:
  """{split or "all": path} for `dataset`: `files[dataset]` if bound, else the quickstart.

  A bound key that no task reads is an error (it would leave its task on the quickstart files
  without a word); falling back to the quickstart files is announced once per dataset.
  """
  unknown = sorted(set(files or {}) - set(QUICKSTART_FILES))
  if unknown:
    raise ValueError(f"t5_tasks.tasks.data_files.files binds {unknown}, which no task reads; "
                     f"the keys are {sorted(QUICKSTART_FILES)}")
  if files and dataset in files:
    return dict(files[dataset])
  if not QUICKSTART_FILES.get(dataset):
    raise ValueError(f"no quickstart data for {dataset!r}; bind its released files with "
                     f"t5_tasks.tasks.data_files.files = {{'{dataset}': {{'all': PATH}}}}")
  if dataset not in _ANNOUNCED_QUICKSTART:
    _ANNOUNCED_QUICKSTART.add(dataset)
    print(f"NOTE: {dataset!r} reads its built-in QUICKSTART files (a few hand-written examples, "
          f"not the dataset); bind t5_tasks.tasks.data_files.files = {{'{dataset}': ...}} for real "
          "data", flush=True)
  return {key: str(QUICKSTART_DIR / name) for key, name in QUICKSTART_FILES[dataset].items()}


_FILE_HASHES: dict[tuple, str] = {}  # (path, size, mtime) -> sha256: each file is hashed once


def _identity(path) -> tuple[tuple, int]:
  """(the hash cache's key, the size in bytes) of a data file: a local file by its absolute path,
  size and mtime (os.stat, as ever); a bucket object by its path as given, size and update time
  (one metadata request: an object is never downloaded only to learn that it is unchanged)."""
  if storage.is_bucket(path):
    with storage.naming_failures(path):
      stat = storage.Path(path).stat()
    return (os.fspath(path), stat.length, stat.mtime), stat.length
  stat = os.stat(path)
  return (os.path.abspath(path), stat.st_size, stat.st_mtime_ns), stat.st_size


def file_record(dataset: str, key: str, path: str) -> dict:
  """What provenance keeps of one data file (local or `gs://`): dataset key, split key, path,
  size and sha256."""
  cache_key, size = _identity(path)
  if cache_key not in _FILE_HASHES:
    digest = hashlib.sha256()
    with storage.open_file(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
    _FILE_HASHES[cache_key] = digest.hexdigest()
  quickstart = not storage.is_bucket(path) and os.path.dirname(cache_key[0]) == str(QUICKSTART_DIR)
  return {"dataset": dataset, "split": key, "path": cache_key[0], "bytes": size,
          "sha256": _FILE_HASHES[cache_key], "quickstart": quickstart}


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

  def data_provenance(self) -> dict:
    """The files this source reads (path, size, sha256, quickstart or not, records read and
    skipped) and its examples per split.

    The readers validate every record and stop at the first bad one (none is skipped here), so
    the examples per split are what the files hold.
    """
    examples = {split: len(self.examples(split)) for split in self.splits}  # reads the files
    files = []
    for dataset in self._files_key:
      for key, path in sorted(data_files(dataset).items()):
        report = families.READ_REPORTS.get(families.file_key(path))
        files.append({**file_record(dataset, key, path),
                      "records_read": None if report is None else report.read,
                      "records_skipped": None if report is None else report.skipped,
                      "records_normalised": None if report is None else dict(report.normalised)})
    return {"files": files, "examples": examples}


def candidate_targets(output, example=None, is_target=False):
  """seqio postprocess_fn: for targets, the candidate metadata the metric_fns read."""
  if not is_target:
    return output
  def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value
  out = {k: text(example[k]) for k in ("id", "pair_type", "pair_groups", "context_id")
         if k in example}
  out.update({k: list(example[k]) for k in ("candidate_labels", "candidate_scores",
                                             "log_likelihoods", "tokens") if k in example})
  if "candidate_rules" in example:
    out["candidate_rules"] = [text(rule) for rule in example["candidate_rules"]]
  # Ranked Spearman keys each output by (context_id, its text): the texts tokenize keeps
  # (evaluation's predictions.jsonl records them), else the token ids name the output.
  if "candidates_pretokenized" in example:
    out["candidate_texts"] = [text(c) for c in example["candidates_pretokenized"]]
  elif "candidates" in example:
    candidates = example["candidates"]
    candidates = candidates.to_list() if hasattr(candidates, "to_list") else candidates
    out["candidate_ids"] = [[int(t) for t in c] for c in candidates]
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


def _examples_from_bound_files(examples: Callable[[families.Files], families.Examples],
                               datasets: tuple[str, ...]) -> families.Examples:
  return examples({dataset: data_files(dataset) for dataset in datasets})


def _add_quickstart_files(quickstart_files: families.Files):
  for dataset, files in quickstart_files.items():
    if QUICKSTART_FILES.setdefault(dataset, dict(files)) != files:
      raise ValueError(f"two families name different quickstart files for {dataset!r}: "
                       f"{QUICKSTART_FILES[dataset]} and {dict(files)}")


def register_family(family: families.TaskFamily) -> tuple[str, ...]:
  """Adds each task of `family` to seqio.TaskRegistry, with its `_tfds` twin; returns the names."""
  names = []
  for task in family.tasks():
    _add_quickstart_files(task.quickstart_files)
    datasets = tuple(task.quickstart_files)
    sources = {task.name: (ReaderSource(
        functools.partial(_examples_from_bound_files, task.examples, datasets),
        task.signature, task.splits, datasets), task.steps)}
    if task.tfds:
      sources[f"{task.name}_tfds"] = (
          seqio.TfdsDataSource(task.tfds.name, splits=task.tfds.splits),
          (task.tfds.to_examples, *task.steps))
    for name, (source, steps) in sources.items():
      seqio.TaskRegistry.add(
          name,
          source=source,
          preprocessors=[*steps, *_TOKENIZE],
          output_features=CANDIDATE_FEATURES,
          postprocess_fn=candidate_targets,
          metric_fns=[task.metric_fn] if task.metric_fn else [])
      names.append(name)
  return tuple(names)


def register_tasks():
  """Adds every task of every declared family to seqio.TaskRegistry."""
  for family in families.FAMILIES:
    register_family(family)


GENERATION_TASKS = families.TURINGADVICE_GENERATION.task_names
CLOZE_TASKS = (families.TIMEDIAL_CLOZE.task_names + families.TIMEDIAL_WEAK_SUPERVISION.task_names
               + families.ASQ_INTENT_CLOZE.task_names)
PREFERENCE_TASKS = families.SUMMARIZE_FEEDBACK_PREFERENCE.task_names + families.HEAP.task_names
