"""Data identified by content (issue 34, items 3, 4, 7, 9): folders of released files bind and are
hashed by their files' names and contents; a task evaluates with only the split it is asked for;
a run directory copied elsewhere with its data resumes and its evaluation is reused, while other
data is refused naming the field with both values; TFDS tasks record their data too."""
import hashlib
import json
import os
import pathlib
import shutil

import gin
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
import storage
from models import scoring
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import data
from runner import evaluate
from runner import outputs
from runner import partitioning
from runner import run_dir
from runner import train
from scripts import build_tfds
from t5_tasks import tasks
from tests.models.t5x_fixtures import random_params

TINY = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 64, "targets": 16}
FILES = "t5_tasks.tasks.data_files.files"


@pytest.fixture
def gin_config():
  gin.clear_config()
  yield
  gin.clear_config()


def _bind(files):
  with gin.unlock_config():
    gin.bind_parameter(FILES, files)


def _train(task, model_dir, steps, log_every=1000):
  return train.train(model_config=TINY, train_dataset=configs.DatasetConfig(task, LENGTHS, "train", 2),
                     training=configs.TrainingConfig(steps, log_every=log_every),
                     checkpoint=configs.CheckpointConfig(), partitioner=partitioning.Partitioner(),
                     model_dir=str(model_dir))


def _sha256(path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _folder_sha256(folder) -> str:
  """Computed here from os.walk: each file's path relative to the folder, NUL, its sha256, newline."""
  names = sorted(os.path.relpath(os.path.join(root, name), folder)
                 for root, _, files in os.walk(folder) for name in files)
  return hashlib.sha256("".join(f"{name}\0{_sha256(os.path.join(folder, name))}\n"
                                for name in names).encode()).hexdigest()


def test_a_folder_is_identified_by_its_files_names_and_contents(tmp_path):
  folder = tmp_path / "commongen"
  (folder / "more").mkdir(parents=True)
  for name, text in (("sheet1.csv", "a,b\n"), ("sheet2.csv", "c,d\n"), ("more/notes.txt", "e\n")):
    (folder / name).write_text(text)
  record = tasks.file_record("heap/commongen", "all", str(folder))
  assert record == {"dataset": "heap/commongen", "split": "all", "path": str(folder), "bytes": 10,
                    "sha256": _folder_sha256(folder), "quickstart": False, "files": 3}
  copy = tmp_path / "elsewhere" / "commongen"
  shutil.copytree(folder, copy)
  assert tasks.file_record("heap/commongen", "all", str(copy))["sha256"] == record["sha256"]
  (copy / "sheet2.csv").rename(copy / "sheet3.csv")  # same contents, another name
  renamed = tasks.file_record("heap/commongen", "all", str(copy))["sha256"]
  (copy / "sheet3.csv").write_text("c,D\n")
  changed = tasks.file_record("heap/commongen", "all", str(copy))["sha256"]
  assert len({record["sha256"], renamed, changed}) == 3


def test_a_bucket_folder_is_identified_as_its_local_copy(bucket, tmp_path):
  folder = tmp_path / "chasm"
  folder.mkdir()
  for name, text in (("counter_conan.json", "{}"), ("counter_sbic.json", '{"1": 2}')):
    (folder / name).write_text(text)
    storage.write_bytes(storage.join(bucket, "chasm", name), text.encode())
  remote = tasks.file_record("heap/chasm", "all", storage.join(bucket, "chasm"))
  local = tasks.file_record("heap/chasm", "all", str(folder))
  assert remote["path"] == storage.join(bucket, "chasm") and not remote["quickstart"]
  assert {k: remote[k] for k in ("sha256", "bytes", "files")} == {k: local[k] for k in ("sha256", "bytes", "files")}
  assert local["sha256"] == _folder_sha256(folder)


def test_heap_cr_trains_on_the_released_commongen_folder(shared_data, gin_config, tmp_path):
  folder = shared_data / "heap" / "commongen"
  _bind({"heap/commongen": {"all": str(folder)}})
  result = _train("heap_cr", tmp_path / "run", 2)
  assert result.step == 2
  [record] = json.loads((tmp_path / "run" / run_dir.DATA_FILES).read_text())["tasks"]["heap_cr"]["files"]
  sheets = sorted(folder.glob("*.csv"))
  assert record["sha256"] == _folder_sha256(folder) and record["files"] == len(sheets) == 4
  assert record["bytes"] == sum(sheet.stat().st_size for sheet in sheets)


def test_asq_evaluates_with_its_test_file_alone(shared_data, gin_config, tmp_path):
  test_file = shared_data / "asq" / "asq_test_first1000.json"
  _bind({"asq": {"test": str(test_file)}})  # ASQ's training file is not public
  with pytest.raises(ValueError, match=r"^asq_intent_cloze: no 'train' split in the files bound \(\{'asq': "
                                       r"\{'test': '.*asq_test_first1000.json'\}.*: splits test\); bind a "
                                       r"'train' file in t5_tasks.tasks.data_files.files$"):
    _train("asq_intent_cloze", tmp_path / "run", 2, log_every=50)
  assert not (tmp_path / "run").exists()

  checkpoint = tmp_path / "ckpt"
  checkpoints.save_params(str(checkpoint / "params"), random_params(TINY, 0))
  checkpoints.write_model_config(str(checkpoint), TINY)
  metrics = evaluate.evaluate(dataset=configs.DatasetConfig("asq_intent_cloze", LENGTHS, "test", 64),
                              checkpoint_path=str(checkpoint), output_dir=str(tmp_path / "eval"))
  items = json.loads(test_file.read_text())
  records = outputs.read_predictions(str(tmp_path / "eval" / outputs.PREDICTIONS_FILE))
  assert len(records) == len(items) == 1000
  # Two questions cut to the same 16 bytes tie: half credit (the metric breaks ties at random).
  right = sum(1.0 if r["scores"][r["gold"].index(1)] > r["scores"][r["gold"].index(0)] else
              0.5 if r["scores"][0] == r["scores"][1] else 0.0 for r in records) / len(records)
  assert metrics["asq_intent_cloze"]["accuracy"]["value"] == pytest.approx(right)
  recorded = outputs.read_provenance(str(tmp_path / "eval"))["data"]["asq_intent_cloze"]
  assert recorded["examples"] == {"test": 1000}
  assert recorded["files"][0]["sha256"] == _sha256(test_file)


def test_a_copied_run_resumes_and_keeps_its_evaluation_but_other_data_is_refused(gin_config, tmp_path, monkeypatch,
                                                                                  capsys):
  first = tmp_path / "first"
  (first / "data").mkdir(parents=True)
  shutil.copy(tasks.QUICKSTART_DIR / "turingadvice_eval.jsonl", first / "data" / "advice.jsonl")

  def bind(root):
    _bind({"heap/turingadvice": {"all": str(root / "data" / "advice.jsonl")}})

  def run_train(root, steps):
    return _train("heap_ah", root / "run", steps)

  def run_evaluate(root):
    return evaluate.evaluate(dataset=configs.DatasetConfig("heap_ah", LENGTHS, "test", 4),
                             checkpoint_path=str(root / "run" / "checkpoints" / "2"),
                             output_dir=str(root / "run" / "eval"))

  bind(first)
  run_train(first, 2)
  metrics = run_evaluate(first)
  second = tmp_path / "copied" / "second"
  shutil.copytree(first, second)
  bind(second)
  with monkeypatch.context() as patched:
    patched.setattr(scoring, "score_packed", None)  # the copied evaluation is reused, not scored again
    assert run_evaluate(second) == metrics
  assert outputs.read_provenance(str(second / "run" / "eval"))["data"]["heap_ah"]["files"][0]["path"] == str(
      second / "data" / "advice.jsonl")
  capsys.readouterr()
  assert run_train(second, 4).step == 4
  assert f"resuming from the checkpoint of step 2 in {second / 'run'}" in capsys.readouterr().out

  advice = second / "data" / "advice.jsonl"
  recorded_sha256 = _sha256(advice)
  advice.write_text("".join(advice.read_text().splitlines(keepends=True)[:-1]))  # one situation fewer
  sha256 = f"files[0].sha256: recorded '{recorded_sha256}', now '{_sha256(advice)}'"
  before = {p.name: p.read_bytes() for p in (second / "run").iterdir() if p.is_file()}
  with pytest.raises(ValueError) as refused:
    run_train(second, 6)
  assert str(refused.value).startswith(f"MODEL_DIR {second / 'run'} holds a run trained on other data; "
                                       f"fields that differ from {second / 'run' / run_dir.DATA_FILES}: ")
  assert f"tasks.heap_ah.{sha256}" in str(refused.value)
  assert {p.name: p.read_bytes() for p in (second / "run").iterdir() if p.is_file()} == before
  with pytest.raises(ValueError, match="holds predictions of another evaluation; settings that differ") as refused:
    run_evaluate(second)
  assert f"data.heap_ah.{sha256}" in str(refused.value)


def test_a_tfds_task_records_its_dataset_and_the_prepared_files(tmp_path):
  data_dir = tmp_path / "tfds"
  build_tfds.build(str(tasks.QUICKSTART_DIR), str(data_dir), ["asq"])
  task = seqio.get_mixture_or_task("asq_intent_cloze_tfds")
  task.source.tfds_dataset.override_data_dir(str(data_dir))
  try:
    recorded = data.source_provenance(task)
  finally:
    task.source.tfds_dataset.override_data_dir(None)
  [version_dir] = [p for p in (data_dir / "asq").iterdir() if p.is_dir()]
  assert recorded["tfds"] == {"name": "asq/3.0.0", "version": "3.0.0",
                              "splits": {split: split for split in ("train", "test", "annotation", "heldout")}}
  [files] = recorded["files"]
  assert files["sha256"] == _folder_sha256(version_dir) and files["path"] == str(version_dir)
  file_task = seqio.get_mixture_or_task("asq_intent_cloze")
  # The quickstart has no annotation file: the split is not prepared, and not recorded.
  assert recorded["examples"] == {split: file_task.num_input_examples(split) for split in ("train", "test", "heldout")}
  assert recorded["configuration"]["t5_tasks.preprocessors.timedial_target_format"] == {
      "target_format": "span_corruption"}
