"""The seqio tasks of the declared task families (`t5_tasks.families`), registered on import.

Every task reads released-format files through `t5_tasks.sources` when its dataset is
built (never at import). By default these are the quickstart files in `t5_tasks/data/`;
a gin binding points a dataset at real files, keyed by split ("all" for a file whose
records carry their own split). A family with a TFDS builder also has a `<name>_tfds`
variant of each task that reads the same example dicts prepared by `t5_tasks.sources.tfds_builders`
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
import inspect
import os
import pathlib
from typing import Callable, Mapping

import gin
import seqio
import tensorflow as tf

import storage
from t5_tasks import families
from t5_tasks import metrics
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


def _file_sha256(path) -> tuple[str, str, int]:
  """(the file's name as provenance keeps it, its sha256, its size), hashed once per version."""
  cache_key, size = _identity(path)
  if cache_key not in _FILE_HASHES:
    digest = hashlib.sha256()
    with storage.open_file(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
    _FILE_HASHES[cache_key] = digest.hexdigest()
  return cache_key[0], _FILE_HASHES[cache_key], size


def _folder_sha256(path) -> tuple[str, str, int, int]:
  """(the folder's name as provenance keeps it, sha256, bytes, files) of a folder (HEAP's CommonGen
  sheets, CHASM's files, a prepared TFDS dataset): over each file's name relative to the folder and
  its own sha256, in name order, so that a copy elsewhere hashes the same and any renamed, added,
  removed or changed file does not."""
  folder = storage.absolute(path).rstrip("/")
  members = [p for p in storage.glob(folder, "**/*") if storage.is_file(p)]
  digest, total = hashlib.sha256(), 0
  for member in sorted(members, key=lambda p: p[len(folder):]):
    _, sha256, size = _file_sha256(member)
    digest.update(f"{member[len(folder):].lstrip('/')}\0{sha256}\n".encode())
    total += size
  return folder, digest.hexdigest(), total, len(members)


def file_record(dataset: str, key: str, path: str) -> dict:
  """What provenance keeps of one data file or folder (local or `gs://`): dataset key, split key,
  path, size and sha256 (a folder's over its files' relative names and contents, `_folder_sha256`,
  with their count). The path is for people; the content identifies the data."""
  if storage.is_dir(path):
    name, sha256, size, count = _folder_sha256(path)
    extra = {"files": count}
  else:
    (name, sha256, size), extra = _file_sha256(path), {}
  quickstart = not storage.is_bucket(path) and os.path.dirname(name) == str(QUICKSTART_DIR)
  return {"dataset": dataset, "split": key, "path": name, "bytes": size, "sha256": sha256,
          "quickstart": quickstart, **extra}


# Configurables whose bindings name data by path: the data's content is recorded instead.
_DATA_PATH_CONFIGURABLES = ("t5_tasks.tasks.data_files",)


def _setting_value(value):
  """A bound value as provenance compares it: a macro by its value, a file it names by its content
  (a SentencePiece model, HEAP's instructions.json: a copy elsewhere is the same setting), any
  other reference by its text."""
  if isinstance(value, gin.config.ConfigurableReference):
    if value.configurable.selector == "gin.macro":
      return _setting_value(gin.query_parameter("%" + value.scoped_selector.split("/")[0]))
    return str(value)
  if isinstance(value, (list, tuple)):
    return [_setting_value(v) for v in value]
  if isinstance(value, Mapping):
    return {str(k): _setting_value(v) for k, v in value.items()}
  if isinstance(value, str) and value and (storage.is_bucket(value) or os.path.isfile(value)):
    return {"file sha256": _file_sha256(value)[1]}
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  if value is gin.REQUIRED:
    return "REQUIRED"
  if callable(value):  # a function default (a mixture's rate): its name, not its address
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
  return repr(value)


def task_configuration() -> dict:
  """Every parameter of every t5_tasks configurable as it stands (its default, or its gin binding;
  a scoped binding under "scope/selector"): what changes the tasks' examples (TimeDial's
  target_format, HEAP's split and instructions, the vocabulary, the filters), gathered from gin,
  not listed by hand. The data files' bindings are left to `file_record` (by content)."""
  out = {}
  for selector, configurable in gin.config._REGISTRY.items():  # pylint: disable=protected-access
    if not selector.startswith("t5_tasks.") or selector in _DATA_PATH_CONFIGURABLES:
      continue
    # A function a gin file imports (`from t5_tasks import metrics` ... `@metrics.f`) is registered
    # only in a process that parsed that file: its defaults are no setting of the tasks (a
    # binding of it still counts, below), or two runs of one command could differ by history.
    if configurable.import_source is not None:
      continue
    parameters = inspect.signature(configurable.wrapped).parameters.values()
    out[selector] = {p.name: _setting_value(p.default) for p in parameters
                     if p.default is not inspect.Parameter.empty}
  for (scope, selector), bindings in gin.config._CONFIG.items():  # pylint: disable=protected-access
    if selector.startswith("t5_tasks.") and selector not in _DATA_PATH_CONFIGURABLES:
      name = f"{scope}/{selector}" if scope else selector
      out.setdefault(name, {}).update({k: _setting_value(v) for k, v in bindings.items()})
  return dict(sorted(out.items()))


class ReaderSource(seqio.FunctionDataSource):
  """Examples built in Python by a reader-backed function, when the dataset is first built.

  The files are resolved through gin at that time, so bindings parsed after import apply;
  examples are kept per resolved file set. A split is asked for only when it is used: a task whose
  test file alone is bound (ASQ's training file is not public) evaluates.
  """

  def __init__(self, build: Callable[[], dict[str, list[dict]]], signature, splits, files_key,
               task_name: str = ""):
    self._build = build
    self._signature = signature
    self._files_key = files_key
    self._task_name = task_name
    self._cache = {}
    super().__init__(dataset_fn=self._dataset_fn, splits=splits)

  def _built(self) -> dict[str, list[dict]]:
    key = repr(sorted((k, sorted(data_files(k).items())) for k in self._files_key))
    if key not in self._cache:
      self._cache[key] = self._build()
    return self._cache[key]

  def examples(self, split: str) -> list[dict]:
    built = self._built()
    if split not in built:
      bound = {k: data_files(k) for k in self._files_key}
      raise ValueError(f"{self._task_name or 'task'}: no {split!r} split in the files bound ({bound}: "
                       f"splits {', '.join(built) or 'none'}); bind a {split!r} file in "
                       "t5_tasks.tasks.data_files.files")
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
    skipped), its examples per split the files hold, and the tasks' configuration
    (`task_configuration`).

    The readers validate every record and stop at the first bad one (none is skipped here), so
    the examples per split are what the files hold.
    """
    built = self._built()  # reads the files
    examples = {split: len(built[split]) for split in self.splits if split in built}
    files = []
    for dataset in self._files_key:
      for key, path in sorted(data_files(dataset).items()):
        report = families.READ_REPORTS.get(families.file_key(path))
        files.append({**file_record(dataset, key, path),
                      "records_read": None if report is None else report.read,
                      "records_skipped": None if report is None else report.skipped,
                      "records_normalised": None if report is None else dict(report.normalised)})
    return {"files": files, "examples": examples, "configuration": task_configuration()}


class Task(seqio.Task):
  """A seqio.Task whose training shuffle buffer holds at most one pass over its split.

  seqio repeats a split before it shuffles it (`Task.get_dataset`), so its buffer of 1,000
  examples over a split of 20 holds 50 copies of each. A buffer of the whole split already draws
  each example from all of it; the copies add repeats, not more of the split, and the first batch
  waits until 1,000 examples per task are preprocessed (about 2.5 s of CPU at the start of every
  training run on the quickstart mixture's six training splits of 15 to 100 examples). Splits of
  1,000 examples or more keep seqio's buffer.
  """

  def get_dataset(self, sequence_length=None, split="train", use_cached=False, shuffle=True,
                  shuffle_buffer_size=None, *args, **kwargs):  # seqio.Task.get_dataset's order
    if shuffle and shuffle_buffer_size is None and self.shuffle_buffer_size and not use_cached:
      examples = self.source.num_input_examples(split)
      if examples:
        shuffle_buffer_size = min(self.shuffle_buffer_size, examples)
    return super().get_dataset(sequence_length, split, use_cached, shuffle, shuffle_buffer_size, *args, **kwargs)


class TfdsSourceWithProvenance(seqio.TfdsDataSource):
  """seqio's TFDS source that records its data provenance: the dataset's name, version and splits,
  and the prepared folder's content (`file_record`), so that a `_tfds` task's evaluation is tied
  to the data it read as a file task's is."""

  def __init__(self, tfds_name: str, splits: Mapping[str, str]):
    super().__init__(tfds_name, splits=dict(splits))
    self._split_names = dict(splits)  # task split -> TFDS split

  def data_provenance(self) -> dict:
    builder = self.tfds_dataset.builder
    record = file_record(builder.info.full_name, "all", os.fspath(builder.data_dir))
    return {"tfds": {"name": builder.info.full_name, "version": str(builder.info.version),
                     "splits": self._split_names},
            "files": [{**record, "quickstart": False}],
            # The splits prepared (a split whose files were not there has none), as a file task's.
            "examples": {split: self.num_input_examples(split) for split in self.splits
                         if self._split_names[split] in builder.info.splits},
            "configuration": task_configuration()}


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


# Metrics that read the likelihood scorer's per-candidate records (`candidate_targets` passes them
# on); runner/evaluate.py refuses, before scoring, a scorer that does not record them.
_LIKELIHOOD_METRICS = (metrics.perplexity_metric_fn,)


def _metric_fns(metric_fn) -> list:
  """The task's metric_fns, each naming the scorer records it reads as `record_fields`."""
  if metric_fn is None:
    return []
  declared = functools.partial(metric_fn)
  declared.record_fields = ("log_likelihoods", "tokens") if metric_fn in _LIKELIHOOD_METRICS else ()
  return [declared]


def register_family(family: families.TaskFamily) -> tuple[str, ...]:
  """Adds each task of `family` to seqio.TaskRegistry, with its `_tfds` twin; returns the names."""
  names = []
  for task in family.tasks():
    _add_quickstart_files(task.quickstart_files)
    datasets = tuple(task.quickstart_files)
    sources = {task.name: (ReaderSource(
        functools.partial(_examples_from_bound_files, task.examples, datasets),
        task.signature, task.splits, datasets, task.name), task.steps)}
    if task.tfds:  # the prepared dataset holds `task.examples`' dicts, in the task's splits
      sources[f"{task.name}_tfds"] = (
          TfdsSourceWithProvenance(task.tfds.name, splits={split: split for split in task.splits}),
          task.steps)
    for name, (source, steps) in sources.items():
      seqio.TaskRegistry.add(
          name,
          task_cls=Task,
          source=source,
          preprocessors=[*steps, *_TOKENIZE],
          output_features=CANDIDATE_FEATURES,
          postprocess_fn=candidate_targets,
          metric_fns=_metric_fns(task.metric_fn))
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
