"""A SentencePiece model that cannot be read stops the run in one line naming the file and how to
point at a local copy (issue 34 item 10: offline, a recipe's gs:// model was a 60-line traceback)."""
import os
import subprocess
import sys

import pytest

import storage
from t5_tasks import vocab
from tests.conftest import PROJECT_ROOT

# No such bucket: offline its host does not resolve, online the bucket is missing; unreadable either way.
UNREACHABLE = "gs://t5-scoring-tests-no-such-bucket/vocabs/sentencepiece.model"


def test_a_missing_local_model_is_one_storage_error_naming_it(tmp_path):
  missing = tmp_path / "spiece.model"
  with pytest.raises(storage.StorageError) as raised:
    vocab.get_vocabulary(sentencepiece_model_path=str(missing))
  message = str(raised.value).split("\n  In call to configurable")[0]  # gin's note, which scripts drop
  assert message.startswith(f"{missing}: the SentencePiece model cannot be read (") and "\n" not in message
  assert "bind the path of a model that exists: --gin.SENTENCEPIECE_MODEL_PATH=" in message


def test_an_unreachable_bucket_model_stops_training_in_one_line_before_the_model_dir_exists(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", storage.EMULATOR_VARIABLE)}
  result = subprocess.run(
      [sys.executable, "-m", "scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
       f"--gin.MODEL_DIR='{tmp_path / 'run'}'",
       f"--gin.t5_tasks.vocab.get_vocabulary.sentencepiece_model_path='{UNREACHABLE}'"],
      cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
  lines = result.stderr.splitlines()
  assert result.returncode == 1 and len(lines) == 1, result.stderr[-3000:]
  assert lines[0].startswith(f"error: {UNREACHABLE}: the SentencePiece model cannot be read ("), lines
  assert lines[0].endswith("; copy it to a local file and bind that path: --gin.SENTENCEPIECE_MODEL_PATH="
                           "\"'spiece.model'\" with a recipe of gin/recipes/, else "
                           "--gin.t5_tasks.vocab.get_vocabulary.sentencepiece_model_path=..."), lines
  assert not (tmp_path / "run").exists()
