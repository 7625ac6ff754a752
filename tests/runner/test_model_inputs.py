"""runner.model_inputs: where a checkpoint's record is found, what a refusal says, and the Hugging
Face tokenizer files the export writes for each vocabulary (their ids against seqio's)."""
import json

import pytest
import seqio

from models import checkpoint_export
from runner import model_inputs
from t5_tasks import vocab

SPM = seqio.__file__.rsplit("/", 1)[0] + "/test_data/sentencepiece/sentencepiece.model"
BYTES = {"kind": "bytes", "sha256": None, "extra_ids": 100, "size": 359, "source": None}


def test_a_record_is_found_from_inside_its_run_and_never_above_another_folder(tmp_path):
  run = tmp_path / "run"
  (run / "checkpoints" / "40" / "params").mkdir(parents=True)
  (run / "best" / "20").mkdir(parents=True)
  (run / "t5_config.json").write_text("{}")
  model_inputs.write(str(run), BYTES, {"inputs": 256, "targets": 64})
  for inside in ("", "checkpoints", "checkpoints/40", "checkpoints/40/params", "best", "best/20"):
    recorded = model_inputs.read(str(run / inside))
    assert recorded["path"] == str(run / "model_inputs.json") and recorded["task_feature_lengths"]["inputs"] == 256
  (run / "elsewhere").mkdir()
  assert model_inputs.read(str(run / "elsewhere")) is None  # a folder of its own: not the run's checkpoint
  assert model_inputs.read(str(run / "not_yet")) is None  # a fresh MODEL_DIR


def test_a_hugging_face_folder_records_its_spiece_model(tmp_path):
  (tmp_path / "config.json").write_text("{}")
  (tmp_path / "spiece.model").write_bytes(open(SPM, "rb").read())
  recorded = model_inputs.read(str(tmp_path))
  described = model_inputs.describe_vocabulary(seqio.SentencePieceVocabulary(SPM, extra_ids=100))
  assert model_inputs.same_vocabulary(recorded["vocabulary"], described)
  assert recorded["vocabulary"]["model_path"] == str(tmp_path / "spiece.model")
  assert recorded["task_feature_lengths"] is None


def test_another_vocabulary_is_refused_naming_both_and_the_record(tmp_path):
  spm = model_inputs.describe_vocabulary(seqio.SentencePieceVocabulary(SPM, extra_ids=100))
  model_inputs.write(str(tmp_path), spm, None)
  recorded = model_inputs.read(str(tmp_path))
  model_inputs.check_vocabulary(recorded, dict(spm, source="/elsewhere/copy.model"), "run")  # same content
  with pytest.raises(ValueError) as refused:
    model_inputs.check_vocabulary(recorded, BYTES, "CHECKPOINT_PATH x")
  assert str(refused.value) == (
      f"the tasks' vocabulary, bytes (359 ids), is not the one CHECKPOINT_PATH x was trained with, SentencePiece "
      f"sha256 {spm['sha256'][:12]} (126 ids, from {SPM}) (recorded in {tmp_path}/model_inputs.json): its ids "
      "would mean other text; drop the vocabulary binding (SENTENCEPIECE_MODEL_PATH) to use the recorded one")
  with pytest.raises(ValueError, match="TASK_FEATURE_LENGTHS is None .* but CHECKPOINT_PATH x records none"):
    model_inputs.feature_lengths(recorded, None, "CHECKPOINT_PATH x")
  assert model_inputs.feature_lengths(recorded, {"inputs": 8, "targets": 4}, "x") == {"inputs": 8, "targets": 4}


@pytest.mark.parametrize("kind", ["bytes", "sentencepiece"])
def test_the_exported_tokenizer_gives_the_tasks_own_ids_sentinels_included(tmp_path, kind):
  transformers = pytest.importorskip("transformers")
  vocabulary = vocab.get_vocabulary(sentencepiece_model_path=SPM if kind == "sentencepiece" else None)
  described = model_inputs.describe_vocabulary(vocabulary)
  model = open(SPM, "rb").read() if kind == "sentencepiece" else None
  for name, content in checkpoint_export.hf_tokenizer_files(described, model).items():
    (tmp_path / name).write_bytes(content)
  tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
  text = "the situation is hard"
  assert tokenizer(text)["input_ids"] == vocab.encode_with_sentinels(vocabulary, text) + [vocabulary.eos_id]
  sentinels = [f"<extra_id_{n}>" for n in (0, 1, 99)]
  assert tokenizer.convert_tokens_to_ids(sentinels) == [vocabulary.vocab_size - 1 - n for n in (0, 1, 99)]
  assert len(tokenizer) == vocabulary.vocab_size
  assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == (
      "ByT5Tokenizer" if kind == "bytes" else "T5Tokenizer")
