"""TFDS builders: prepare from a manual_dir offline, read back the same records."""
import json
import pathlib
import shutil

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from t5_tasks.sources import asq  # pylint: disable=g-import-not-at-top
from t5_tasks import families
from t5_tasks import heap
from t5_tasks.sources import tfds_builders
from t5_tasks.sources import timedial

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"


def _prepare(name, manual_dir, data_dir):
  builder = tfds.builder(name, data_dir=str(data_dir))
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)))
  return builder


def test_asq_builds_from_quickstart_and_reads_back(tmp_path):
  builder = _prepare(tfds_builders.Asq.name, DATA, tmp_path / "tfds")
  raw = {split: json.loads((DATA / f"asq_{split}.json").read_text())
         for split in ("train", "test", "heldout")}
  assert {s: info.num_examples for s, info in builder.info.splits.items()} == {s: len(r) for s, r in raw.items()}
  examples = list(tfds.as_numpy(builder.as_dataset(split="test")))
  assert len(examples) == len(raw["test"])
  by_id = {e["id"].decode(): e for e in examples}
  first_round = json.loads((DATA / "asq_human_annotation_first.json").read_text())
  expected_types = asq.pair_types_by_id(asq.read_asq_annotations(DATA / "asq_human_annotation_first.json")[0],
                                        asq.read_asq_annotations(DATA / "asq_human_annotation_second.json")[0])
  for r in raw["test"]:
    e = by_id[r["id"]]
    assert list(e["candidate_labels"]) == [int(r["label"] == i) for i in range(2)]
    assert [q.decode() for q in e["candidates"]] == [r["qn1"], r["qn2"]]
    assert e["pair_type"].decode() == expected_types.get(r["id"], "")
  # The first round alone types the items it annotated (a second round never moves an item it left untyped).
  typed_first = {a["id"] for a in first_round if asq.pair_type(int(a["true_qn_type"]), int(a["paired_qn_type"]))}
  assert sum(e["pair_type"] != b"" for e in examples) == len(typed_first & set(by_id)), typed_first


def test_heap_builder_keeps_the_file_tasks_examples_and_splits(tmp_path):
  manual = tmp_path / "manual"
  manual.mkdir()
  shutil.copy(DATA / "tellmewhy_test_caters_sample.csv", manual)
  builder = _prepare(f"{tfds_builders.HeapComparisons.name}/av", manual, tmp_path / "tfds")
  expected = families.heap_examples(
      {"heap/tellmewhy": {"all": str(manual / "tellmewhy_test_caters_sample.csv")}}, "AV")
  for split in ("train", "validation", "test"):
    found = list(tfds.as_numpy(builder.as_dataset(split=split)))
    assert sorted((e["inputs"].decode(), *(c.decode() for c in e["candidates"])) for e in found) == sorted(
        (e["inputs"], *e["candidates"]) for e in expected[split])
    assert found and all(e["candidate_scores"][0] > e["candidate_scores"][1] for e in found)


def test_missing_files_name_the_folder_and_what_to_put_there(tmp_path):
  with pytest.raises(FileNotFoundError, match=rf"timedial: no files in {tmp_path}.*test.json"):
    _prepare(tfds_builders.Timedial.name, tmp_path, tmp_path / "tfds")


def test_timedial_dialog_ending_in_an_empty_turn_builds_without_it(tmp_path):
  item = json.loads((DATA / "timedial_test.json").read_text())[0]
  manual = tmp_path / "manual" / "timedial"
  manual.mkdir(parents=True)
  (manual / "test.json").write_text(json.dumps([{**item, "conversation": item["conversation"] + [""]}]))
  builder = _prepare(tfds_builders.Timedial.name, manual.parent, tmp_path / "tfds")
  [example] = tfds.as_numpy(builder.as_dataset(split="test"))
  assert [turn.decode() for turn in example["conversation"]] == item["conversation"]


def test_timedial_builds_from_the_shared_data_as_is_and_its_task_reads_400_items(shared_data, tmp_path):
  import seqio  # pylint: disable=g-import-not-at-top
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the _tfds tasks

  builder = _prepare(tfds_builders.Timedial.name, shared_data, tmp_path / "tfds")
  assert builder.info.splits["test"].num_examples == 400
  seqio.set_tfds_data_dir_override(str(tmp_path / "tfds"))
  try:
    task = seqio.get_mixture_or_task("timedial_cloze_full_tfds")
    examples = list(task.get_dataset({"inputs": 512, "targets": 32}, split="test", shuffle=False,
                                     use_cached=False).as_numpy_iterator())
  finally:
    seqio.set_tfds_data_dir_override(None)
  items, _ = timedial.read_timedial(shared_data / "timedial" / "test_first400.json")
  assert sorted(e["id"].decode() for e in examples) == sorted(item.id for item in items)
  assert all(len(e["candidates_pretokenized"]) == 4 and sorted(e["candidate_labels"]) == [0, 0, 1, 1]
             for e in examples)


def test_every_builder_finds_its_files_in_the_shared_data_but_those_it_lacks(shared_data):
  missing = [f"{cls.name}/{config.name}" if config else cls.name
             for cls in tfds_builders.manual_builders() for config in cls.BUILDER_CONFIGS or [None]
             if not cls(config=config).found_files(shared_data)]
  # HEAP's HellaSwag and counter-narrative criteria have no file in ../shared/data either.
  assert missing == [f"heap_comparisons/{c}" for c in ("hs", "bcn", "ccn", "cng", "cnsp", "cnsu")] + [
      "reddit_advice2019", "summarize_from_feedback"]
