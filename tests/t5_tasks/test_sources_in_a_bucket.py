"""The readers of t5_tasks.sources on data in a bucket (a local emulator, the `bucket` fixture): the
quickstart files copied there give the records the local files give; folder-shaped sources (CHASM's
folder of JSON files, CommonGen's folder of sheets) and HEAP's recursive file search work on a
prefix; a broken record is rejected naming the gs:// file and line; a task bound to a gs:// file
reads the same examples and records the same provenance sha256 as from the local file."""
import csv
import io
import json
import os

import gin
import pytest
import seqio

import storage
import t5_tasks  # pylint: disable=unused-import  (registers the tasks)
from t5_tasks import tasks
from t5_tasks.sources import asq
from t5_tasks import heap
from t5_tasks.sources import records
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice

DATA = tasks.QUICKSTART_DIR

# One reader of each file shape: JSON array, JSON lines, CSV, JSON object (records.py's and
# heap.py's row readers).
READERS = {
    "timedial_test.json": timedial.read_timedial,
    "asq_test.json": asq.read_asq,
    "reddit_advice_2019.jsonl": reddit_advice.read_reddit_advice,
    "turingadvice_eval.jsonl": turingadvice.read_turingadvice_eval,
    "summarize_comparisons.jsonl": summarize_feedback.read_comparisons,
    "tellmewhy_test_caters_sample.csv": heap.read_tellmewhy,
    "heap_counter_narratives.csv": heap.read_counter_narratives,
    "heap_hellaswag.jsonl": heap.read_hellaswag,
    "heap_chasm.json": heap.read_chasm,
}


def _copy(local, target: str) -> str:
  storage.write_bytes(target, open(local, "rb").read())
  return target


def _same_report(bucket_report: records.ReadReport, local_report: records.ReadReport, path: str):
  assert bucket_report.path == path
  assert (bucket_report.read, bucket_report.skipped, bucket_report.normalised) == (
      local_report.read, local_report.skipped, local_report.normalised)


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_quickstart_file_in_a_bucket_gives_the_local_records(bucket, name):
  read = READERS[name]
  path = _copy(DATA / name, f"{bucket}/data/{name}")
  local, local_report = read(DATA / name)
  found, report = read(path)
  assert found == local and len(found) > 0
  _same_report(report, local_report, path)


def test_heap_comparisons_and_instructions_from_a_bucket(bucket, tmp_path):
  path = _copy(DATA / "tellmewhy_test_caters_sample.csv", f"{bucket}/tellmewhy.csv")
  comparisons, report = heap.read_heap_comparisons("AG", path)
  local, local_report = heap.read_heap_comparisons("AG", DATA / "tellmewhy_test_caters_sample.csv")
  assert comparisons == local and comparisons
  _same_report(report, local_report, path)
  criteria = {a: {"templates": [f"Judge {a}."], "paper_table5": 0} for a in heap.HEAP_CRITERIA}
  local = tmp_path / "instructions.json"
  local.write_text(json.dumps({"criteria": criteria}, indent=2))
  path = _copy(local, f"{bucket}/instructions.json")
  assert heap.read_instruction_templates(path)[0] == heap.read_instruction_templates(local)[0]
  storage.write_text(path, '{"criteria":\n  {,}}')
  with pytest.raises(records.RecordError, match=rf"^{path}:2: not valid JSON"):
    heap.read_instruction_templates(path)


def test_a_chasm_folder_in_a_bucket_reads_its_json_files_in_order(bucket, tmp_path):
  folder = f"{bucket}/heap/chasm"
  items = json.loads((DATA / "heap_chasm.json").read_text(encoding="utf-8"))
  items["quick_1"]["post"]["text"] += " "  # normalised, and counted in the one report
  for where in (str(tmp_path), folder):
    storage.write_text(storage.join(where, "b.json"), json.dumps(items))
    storage.write_bytes(storage.join(where, "a.json"), (DATA / "heap_chasm.json").read_bytes())
    storage.write_text(storage.join(where, "notes.txt"), "not read")
  local, local_report = heap.read_chasm(tmp_path)
  posts, report = heap.read_chasm(folder)
  assert heap.chasm_files(folder) == [f"{folder}/a.json", f"{folder}/b.json"]
  assert posts == local and [p.id for p in posts][:2] == ["a/quick_1", "a/quick_2"]
  _same_report(report, local_report, folder)
  assert report.normalised == {heap.TEXTS_STRIPPED: 1}
  assert heap.read_heap_comparisons("CNO", folder)[0] == heap.read_heap_comparisons("CNO", tmp_path)[0]


def _commongen_sheet(concepts: str) -> str:
  out = io.StringIO()
  writer = csv.writer(out)
  writer.writerow(["Compare the two sentences.", "", ""])
  writer.writerow([f"Concept set: {concepts}", "", ""])
  writer.writerow([f"Reference: A sentence about {concepts}.", "", ""])
  writer.writerow([f"A plausible {concepts} scene.", f"An odd {concepts} scene.", "1"])
  writer.writerow([f"An odd {concepts} scene.", f"A strange {concepts} scene.", "-0.5"])
  return out.getvalue()


def test_a_commongen_folder_in_a_bucket_reads_its_sheets_in_number_order(bucket, tmp_path):
  folder = f"{bucket}/heap/commongen"
  for where in (str(tmp_path), folder):
    storage.write_text(storage.join(where, "sheet10.csv"), _commongen_sheet("river boat row"))
    storage.write_text(storage.join(where, "sheet2.csv"), _commongen_sheet("dog ball throw"))
  assert heap.commongen_sheets(folder) == [f"{folder}/sheet2.csv", f"{folder}/sheet10.csv"]
  comparisons, report = heap.read_heap_comparisons("CR", folder)
  local, local_report = heap.read_heap_comparisons("CR", tmp_path)
  assert comparisons == local and comparisons
  _same_report(report, local_report, folder)


def test_heap_finds_its_source_files_under_a_bucket_prefix_as_under_a_folder(bucket, tmp_path):
  layout = {"turingadvice_eval.jsonl": "turingadvice_eval.jsonl",
            "tellmewhy/tellmewhy_test_caters_sample.csv": "tellmewhy_test_caters_sample.csv",
            "more/heap_hellaswag.jsonl": "heap_hellaswag.jsonl",
            "released/chasm/heap_chasm.json": "heap_chasm.json"}
  for target, name in layout.items():
    _copy(DATA / name, f"{bucket}/heap/{target}")
    _copy(DATA / name, os.path.join(tmp_path, target))
  for source in ("turingadvice", "tellmewhy", "hellaswag", "chasm", "commongen"):
    local = [os.path.relpath(p, tmp_path) for p in heap.find_source_files(tmp_path, source)]
    found = heap.find_source_files(f"{bucket}/heap", source)
    assert found == [f"{bucket}/heap/{p}" for p in local], source
  assert "released/chasm" in [os.path.relpath(p, tmp_path) for p in heap.find_source_files(tmp_path, "chasm")]


def test_a_broken_record_in_a_bucket_file_is_rejected_naming_the_file_and_line(bucket):
  lines = (DATA / "reddit_advice_2019.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
  broken = json.loads(lines[2])
  del broken["title"]
  path = f"{bucket}/reddit_advice.jsonl"
  storage.write_text(path, "".join(lines[:2] + [json.dumps(broken) + "\n"] + lines[3:]))
  with pytest.raises(records.RecordError, match=rf"^{path}:3: field 'title': missing$"):
    reddit_advice.read_reddit_advice(path)
  kept, report = reddit_advice.read_reddit_advice(path, skip_invalid=True)
  assert (len(kept), report.skipped) == (len(lines) - 1, 1) and report.errors[0].path == path
  storage.write_text(path, "".join(lines[:1] + ["{not json\n"] + lines[1:]))
  with pytest.raises(records.RecordError, match=rf"^{path}:2: not valid JSON"):
    reddit_advice.read_reddit_advice(path)

  folder = f"{bucket}/chasm"
  items = json.loads((DATA / "heap_chasm.json").read_text(encoding="utf-8"))
  items["quick_2"]["GPT-Neo"]["score"]["stance"][1] = "x"
  text = json.dumps(items, indent=4)
  storage.write_text(f"{folder}/broken.json", text)
  line = text.splitlines().index('    "quick_2": {') + 1
  with pytest.raises(records.RecordError) as raised:
    heap.read_chasm(folder)
  assert str(raised.value) == (
      f"{folder}/broken.json:{line}: field 'quick_2.GPT-Neo.score.stance[1]': expected an integer, got 'x'")


def test_a_missing_bucket_file_is_one_line_naming_it(bucket):
  with pytest.raises(storage.StorageError, match=rf"^{bucket}/absent.jsonl: no such file or bucket$"):
    reddit_advice.read_reddit_advice(f"{bucket}/absent.jsonl")


@pytest.fixture
def bound_files():
  def bind(files):
    with gin.unlock_config():
      gin.bind_parameter("t5_tasks.tasks.data_files.files", files)
  yield bind
  gin.clear_config()


def test_a_task_bound_to_a_bucket_file_reads_it_and_records_the_local_sha256(bucket, bound_files):
  task = seqio.get_mixture_or_task("timedial_cloze_full")
  local_path = str(DATA / "timedial_test.json")
  path = _copy(local_path, f"{bucket}/timedial/test.json")
  bound_files({"timedial": {"test": local_path}})
  local_examples, local_provenance = task.source.examples("test"), task.source.data_provenance()
  bound_files({"timedial": {"test": path}})
  examples, provenance = task.source.examples("test"), task.source.data_provenance()
  assert examples == local_examples and examples
  [local_file], [found] = local_provenance["files"], provenance["files"]
  assert found["path"] == path and not found["quickstart"]
  assert found["sha256"] == local_file["sha256"] == tasks.file_record("timedial", "test", path)["sha256"]
  assert found["bytes"] == local_file["bytes"] == os.path.getsize(local_path)
  assert found["records_read"] == local_file["records_read"] > 0
  assert provenance["examples"] == local_provenance["examples"]
  # Each object is hashed once while it is unchanged; a replaced one is hashed again.
  storage.write_bytes(path, open(local_path, "rb").read() + b"\n")
  assert tasks.file_record("timedial", "test", path)["sha256"] != found["sha256"]
