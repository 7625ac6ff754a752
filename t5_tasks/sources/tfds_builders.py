"""TFDS builders over the readers: `python -m scripts.build_tfds --manual_dir=DIR` prepares them offline.

Each builder finds its released files under `manual_dir` (searched recursively,
so both `../shared/data`, which lacks RedditAdvice2019 and summarize-from-feedback,
and the flat `t5_tasks/data` work). A family that declares a `TfdsSource` gets a builder
here that stores the example dicts of the family's own `examples` function, so that its
`<task>_tfds` tasks have the file tasks' items (one conversion, in Python). Importing this
module registers the builders with TFDS and imports TensorFlow, so the readers themselves
do not.
"""
import contextlib
import glob
import io
import os

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from t5_tasks import families
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


def _feature(spec: tf.TensorSpec):
  """The TFDS feature that stores one field of a family's signature."""
  scalar = tfds.features.Text() if spec.dtype == tf.string else spec.dtype.as_numpy_dtype
  if spec.shape.rank == 0:
    return scalar
  if spec.shape.rank == 1:
    return tfds.features.Sequence(scalar)
  raise ValueError(f"no TFDS feature for a field of shape {spec.shape}")


class _FamilyBuilder(_ManualBuilder):
  """Stores a family's example dicts: TASKS maps a config name (None without configs) to the task
  declaration whose `examples` makes them. Each file found of the declaration's first dataset is
  read with every file found of its others; the splits are those `examples` returns, empty ones
  left out (TFDS rejects them)."""
  TASKS: dict = {}

  @property
  def _task(self) -> families.TaskFamily:
    return self.TASKS[self.builder_config.name if self.builder_config else None]

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, description=self.DESCRIPTION, features=tfds.features.FeaturesDict(
        {field: _feature(spec) for field, spec in self._task.signature.items()}))

  def _patterns(self) -> dict:
    return dict(self._task.tfds.files)

  def found_files(self, manual_dir) -> dict[str, list[str]]:
    """{key: paths} of the first dataset's files under manual_dir; keys without files left out."""
    first = next(iter(self._patterns().values()))
    files = {key: find_files(manual_dir, patterns) for key, patterns in first.items()}
    return {key: paths for key, paths in files.items() if paths}

  def _files(self, dl_manager) -> dict[str, list[str]]:
    files = self.found_files(dl_manager.manual_dir)
    if not files:
      name = f"{self.name}/{self.builder_config.name}" if self.builder_config else self.name
      raise FileNotFoundError(f"{name}: no files in {dl_manager.manual_dir}. {self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
    return files

  def _split_generators(self, dl_manager):
    first, *others = self._patterns()
    other_files = {}  # dataset -> {key (numbered where a pattern found several): path}
    for dataset in others:
      found = {key: find_files(dl_manager.manual_dir, patterns)
               for key, patterns in self._patterns()[dataset].items()}
      other_files[dataset] = {key if len(paths) == 1 else f"{key}{i}": path
                              for key, paths in found.items() for i, path in enumerate(paths)}
    by_split = {}
    for key, paths in self._files(dl_manager).items():
      for path in paths:
        # The family's console lines (counts per file) would interleave with scripts.build_tfds' one line
        # per dataset; the built splits' sizes are what it prints.
        with contextlib.redirect_stdout(io.StringIO()):
          built = self._task.examples({first: {key: path}, **other_files})
        for split, examples in built.items():
          by_split.setdefault(split, []).extend((path, example) for example in examples)
    return {split: self._generate_examples(rows) for split, rows in by_split.items() if rows}

  def _generate_examples(self, rows):
    for path, example in rows:
      yield f"{path}:{example['id']}", example


def _family_builders() -> None:
  """One `_FamilyBuilder` subclass per TFDS builder name the families declare (HEAP's criteria
  are configs of one builder; TimeDial's scopes share one dataset), named in this module by the
  builder's name in CamelCase (`Timedial`, `HeapComparisons`)."""
  tasks_by_builder = {}
  for family in families.FAMILIES:
    for task in family.tasks():
      if task.tfds:
        name, version = task.tfds.name.split(":")
        builder, _, config = name.partition("/")
        tasks_by_builder.setdefault((builder, version), {}).setdefault(config or None, task)
  for (builder, version), tasks in tasks_by_builder.items():
    first = next(iter(tasks.values()))
    configs = [tfds.core.BuilderConfig(name=config, description=task.name)
               for config, task in tasks.items() if config]
    class_name = "".join(word.capitalize() for word in builder.split("_"))  # timedial -> Timedial
    globals()[class_name] = type(class_name, (_FamilyBuilder,), {
        "__module__": __name__, "name": builder, "VERSION": tfds.core.Version(version),
        "RELEASE_NOTES": dict(first.tfds.release_notes), "BUILDER_CONFIGS": configs, "TASKS": tasks,
        "MANUAL_DOWNLOAD_INSTRUCTIONS": first.tfds.instructions,
        "DESCRIPTION": f"The example dicts of the {builder} tasks, as their family's `examples` makes them."})


_family_builders()
