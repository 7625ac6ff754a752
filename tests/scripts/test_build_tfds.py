"""scripts/build_tfds.py: builds what manual_dir holds, skips the rest, refuses a named dataset it lacks."""
import json
import shutil

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

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
  with pytest.raises(ValueError, match="unknown dataset 'timedail'"):
    build_tfds.build(str(manual_dir), str(tmp_path / "tfds"), ["timedail"])


def test_the_command_prints_one_line_per_dataset_and_nothing_of_the_libraries(manual_dir, tmp_path):
  """No absl INFO line of TFDS's, no "Downloading and preparing dataset" (nothing is downloaded),
  no `failed call to cuInit` on a CPU machine: the user's environment as is."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  data_dir = tmp_path / "tfds"
  result = subprocess.run([sys.executable, "-m", "scripts.build_tfds", f"--manual_dir={manual_dir}",
                           f"--data_dir={data_dir}", "--datasets=timedial,heap_comparisons/av"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
  timedial_items = len(json.loads((DATA / "timedial_test.json").read_text()))
  lines = result.stdout.splitlines()
  assert lines[0] == f"timedial: test {timedial_items} -> {data_dir / 'timedial' / '2.0.0'}", lines
  assert len(lines) == 2 and lines[1].startswith("heap_comparisons/av: train "), lines
