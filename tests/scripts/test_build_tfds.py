"""scripts/build_tfds.py: builds what manual_dir holds, skips the rest, refuses a named dataset it lacks."""
import json
import shutil

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from absl import app  # pylint: disable=g-import-not-at-top
from scripts import build_tfds
from t5_tasks import families
from tests.conftest import PROJECT_ROOT

DATA = PROJECT_ROOT / "t5_tasks" / "data"


@pytest.fixture
def manual_dir(tmp_path):
  """The quickstart's TimeDial and TellMeWhy files in nested folders, as a release unpacks."""
  manual = tmp_path / "manual"
  (manual / "timedial").mkdir(parents=True)
  (manual / "heap").mkdir()
  shutil.copy(DATA / "timedial_test.json", manual / "timedial" / "test.json")
  shutil.copy(DATA / "tellmewhy_test_caters_sample.csv", manual / "heap")
  return manual


def test_builds_the_datasets_found_and_skips_the_others(manual_dir, tmp_path, capsys):
  prepared = build_tfds.build(str(manual_dir), str(tmp_path / "tfds"))
  tellmewhy = ["heap_comparisons/ag", "heap_comparisons/av",
               "heap_comparisons/qa"]
  assert sorted(prepared) == tellmewhy + ["timedial"]
  assert prepared["timedial"] == {"test": len(json.loads((DATA / "timedial_test.json").read_text()))}
  for name in tellmewhy:  # HEAP's comparisons split by context, as its file tasks split them
    criterion = name.split("/")[1]
    examples = families.heap_examples({"heap/tellmewhy": {"all": str(DATA / "tellmewhy_test_caters_sample.csv")}},
                                      criterion)
    assert prepared[name] == {split: len(items) for split, items in examples.items() if items}, name
  skipped = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if "skipped" in line]
  assert set(skipped) == set(build_tfds.dataset_names()) - set(prepared)
  assert len(list(tfds.as_numpy(tfds.builder("timedial", data_dir=str(tmp_path / "tfds")).as_dataset(
      split="test")))) == prepared["timedial"]["test"]


def test_named_datasets_only_and_each_must_have_its_files(manual_dir, tmp_path):
  prepared = build_tfds.build(str(manual_dir), str(tmp_path / "tfds"), ["heap_comparisons/av"])
  assert list(prepared) == ["heap_comparisons/av"]
  with pytest.raises(FileNotFoundError, match=r"asq: no files under .*asq_train\*\.json"):
    build_tfds.build(str(manual_dir), str(tmp_path / "tfds"), ["timedial", "asq"])
  with pytest.raises(app.UsageError, match="unknown dataset 'timedail'"):
    build_tfds.build(str(manual_dir), str(tmp_path / "tfds"), ["timedail"])
