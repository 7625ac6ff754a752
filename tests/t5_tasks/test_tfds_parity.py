"""Every `<task>_tfds` task has its file task's splits and items (issue 10: leak-free TFDS variants).

The TFDS datasets are prepared from the quickstart files, as `scripts.build_tfds` prepares them,
once for the module; each split of each `_tfds` task is then compared with the file task's after
preprocessing, item by item: the builders store the family's own example dicts, so nothing differs.
"""
import gin
import numpy as np
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from scripts import build_tfds
from t5_tasks import families
from t5_tasks import tasks

LENGTHS = {"inputs": 512, "targets": 64}


def _compared_tasks() -> list[str]:
  """The first task of each family with a TFDS source, and of each HEAP source with quickstart files.

  A TimeDial scope only changes the steps both sides share; HEAP's criteria of one source differ
  in their comparisons, not in how they are split. Each task costs ~1 s of tracing per split and
  side, so one task each keeps the module near a minute.
  """
  names, heap_sources = [], set()
  for family in families.FAMILIES:
    with_tfds = [t for t in family.tasks() if t.tfds]
    if family is families.HEAP:
      for task in with_tfds:
        [(source, files)] = task.quickstart_files.items()
        if files and source not in heap_sources:
          heap_sources.add(source)
          names.append(task.name)
    elif with_tfds:
      names.append(with_tfds[0].name)
  return names


COMPARED = _compared_tasks()


def _plain(value):
  """Python values, so that items compare with ==; ragged candidates are arrays of arrays."""
  if isinstance(value, np.ndarray):
    return [_plain(v) for v in value] if value.dtype == object else value.tolist()
  return value.item() if isinstance(value, np.generic) else value


def _items(task_name: str, split: str) -> list[dict]:
  dataset = seqio.get_mixture_or_task(task_name).get_dataset(
      LENGTHS, split=split, shuffle=False, use_cached=False, num_epochs=1)
  return [{k: _plain(v) for k, v in example.items()} for example in dataset.as_numpy_iterator()]


def _quickstart_splits(task) -> set[str]:
  """The splits the quickstart files build for a file task."""
  return set(task.source._built())  # pylint: disable=protected-access


def _by_id(items: list[dict]) -> list[dict]:
  return sorted(items, key=lambda e: (e["id"], repr(e)))


def _point_tfds_tasks_at(data_dir):
  """Each `_tfds` task's loader reads `data_dir`.

  seqio's loader keeps the first data dir override it sees, so a global override set by another
  test of this process would win over `seqio.set_tfds_data_dir_override`: each is set here.
  """
  for name in seqio.TaskRegistry.names():
    source = seqio.get_mixture_or_task(name).source
    if name.endswith("_tfds") and isinstance(source, seqio.TfdsDataSource):
      source.tfds_dataset.override_data_dir(data_dir)


@pytest.fixture(scope="module")
def quickstart_tfds(tmp_path_factory):
  """Every TFDS dataset with quickstart files, prepared once into a module-wide data dir."""
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  prepared = build_tfds.build(str(tasks.QUICKSTART_DIR), data_dir)
  _point_tfds_tasks_at(data_dir)
  yield prepared
  _point_tfds_tasks_at(None)


@pytest.mark.parametrize("name", COMPARED)
def test_tfds_task_has_the_file_tasks_splits_and_items(quickstart_tfds, name):
  del quickstart_tfds
  file_task, tfds_task = seqio.get_mixture_or_task(name), seqio.get_mixture_or_task(f"{name}_tfds")
  assert tfds_task.splits == file_task.splits
  # The splits the quickstart files give (ASQ's annotation split is the release's file alone).
  for split in [s for s in file_task.splits if s in _quickstart_splits(seqio.get_mixture_or_task(name))]:
    expected, got = _items(name, split), _items(f"{name}_tfds", split)
    assert len(got) == len(expected) > 0, split
    assert _by_id(got) == _by_id(expected), split


def test_every_family_with_a_tfds_source_is_compared():
  families_with_tfds = {f.name for f in families.FAMILIES if any(t.tfds for t in f.tasks())}
  compared = {f.name for f in families.FAMILIES for t in f.tasks() if t.name in COMPARED}
  assert compared == families_with_tfds
  heap_sources_with_quickstart = {dataset for t in families.HEAP.tasks()
                                  for dataset, files in t.quickstart_files.items() if files}
  assert heap_sources_with_quickstart == {"heap/turingadvice", "heap/tellmewhy", "heap/hellaswag",
                                          "heap/counter_narratives", "heap/chasm"}
  assert {d for t in families.HEAP.tasks() if t.name in COMPARED for d in t.quickstart_files} == (
      heap_sources_with_quickstart)


def test_heap_dia_tfds_has_the_file_tasks_splits_on_the_real_data(shared_data, tmp_path):
  """The leak this once fixed: all the real comparisons used to be the `_tfds` task's test split."""
  path = shared_data / "heap" / "defeasible_inference" / "def_inf_eval_results.jsonl"
  name = "heap_dia"
  data_dir = str(tmp_path / "tfds")
  build_tfds.build(str(shared_data), data_dir, [f"heap_comparisons/{name[len('heap_'):]}"])
  tfds_source = seqio.get_mixture_or_task(f"{name}_tfds").source
  tfds_source.tfds_dataset.override_data_dir(data_dir)
  gin.clear_config()
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", {"heap/defeasible": {"all": str(path)}})
  try:
    file_source = seqio.get_mixture_or_task(name).source
    sizes = {}
    for split in families.SPLITS:
      expected = [e["id"] for e in file_source.get_dataset(split, shuffle=False).as_numpy_iterator()]
      got = [e["id"] for e in tfds_source.get_dataset(split, shuffle=False).as_numpy_iterator()]
      assert sorted(got) == sorted(expected), split
      sizes[split] = len(got)
    assert sizes == {"train": 7176 - 2 * 718, "validation": 718, "test": 718}  # §3's 80/10/10 of 7,176
  finally:
    gin.clear_config()
    tfds_source.tfds_dataset.override_data_dir(None)
