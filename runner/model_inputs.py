"""What a checkpoint reads: its vocabulary and feature lengths, recorded with the run.

A pretrained T5 fine-tuned on byte ids, or served with 512 input tokens after training at 1,280,
gives wrong numbers without an error. So a training run records, when it starts, the vocabulary
its tasks encode with and its feature lengths in MODEL_DIR/model_inputs.json, and a SentencePiece
model is copied beside it (MODEL_DIR/sentencepiece.model): a run in a bucket carries its own
vocabulary, and the record names the model by content (sha256) and by where it came from. An
imported checkpoint (scripts.convert_checkpoint) records the same, a Hugging Face export writes it
as tokenizer files.

Commands on a checkpoint take what it recorded when nothing is bound (scripts/gin_cli.py
`follow_checkpoint`; scripts.serve), and a bound vocabulary that differs from the record is
refused in one line naming both (`check_vocabulary`). A Hugging Face directory without a record
that holds `spiece.model` records that model.

Pure Python over `storage`: a vocabulary is described from the seqio object's attributes.
"""
import hashlib
import json

import storage
from runner import run_dir

RECORD = run_dir.MODEL_INPUTS
SENTENCEPIECE_MODEL = run_dir.SENTENCEPIECE_MODEL
HF_SENTENCEPIECE_MODEL = "spiece.model"  # what a Hugging Face T5 directory names its model
# The fields that make two vocabularies the same ids: where a model file lies and its size do not.
IDENTITY = ("kind", "sha256", "extra_ids")
T5_EXTRA_IDS = 100  # T5's sentinels, <extra_id_0> ... <extra_id_99> (t5_tasks.vocab's default too)
_ROOT_MARKERS = ("t5_config.json", "config.json")  # a checkpoint's own folder: the record is no higher
_INSIDE_A_RUN = ("params", run_dir.CHECKPOINTS, run_dir.BEST)  # and <step>: folders a record lies above


def sentencepiece_vocabulary(model_path: str, extra_ids: int, size: int | None = None) -> dict:
  """The description of the SentencePiece model at `model_path` (its sha256, where it came from)."""
  return {"kind": "sentencepiece", "sha256": hashlib.sha256(storage.read_bytes(model_path)).hexdigest(),
          "extra_ids": int(extra_ids), "size": size, "source": storage.absolute(model_path)}


def describe_vocabulary(vocabulary) -> dict | None:
  """A seqio vocabulary as the record keeps it: SentencePiece by its model's content, bytes as
  bytes, another class by its name (its ids cannot be compared by content); None for none."""
  if vocabulary is None:
    return None
  vocabulary = getattr(vocabulary, "resolved", vocabulary)  # t5_tasks' gin-configured wrapper
  size, extra_ids = int(vocabulary.vocab_size), int(vocabulary.extra_ids)
  model_file = getattr(vocabulary, "sentencepiece_model_file", None)
  if model_file:
    return sentencepiece_vocabulary(model_file, extra_ids, size)
  kind = "bytes" if type(vocabulary).__name__ == "ByteVocabulary" else type(vocabulary).__name__
  return {"kind": kind, "sha256": None, "extra_ids": extra_ids, "size": size, "source": None}


def tasks_vocabulary(tasks) -> dict | None:
  """The description of the vocabulary seqio `tasks` encode their inputs with (None: no tasks)."""
  return describe_vocabulary(tasks[0].output_features["inputs"].vocabulary) if tasks else None


def shown(vocabulary: dict | None) -> str:
  """A vocabulary in a message: 'bytes (359 ids)', 'SentencePiece 1a2b3c4d5e6f (32100 ids, from X)'."""
  if vocabulary is None:
    return "none recorded"
  ids = f"{vocabulary['size']} ids" if vocabulary.get("size") else f"{vocabulary['extra_ids']} sentinels"
  if vocabulary["kind"] == "sentencepiece":
    return f"SentencePiece sha256 {vocabulary['sha256'][:12]} ({ids}, from {vocabulary['source']})"
  return f"{vocabulary['kind']} ({ids})"


def record_text(vocabulary: dict | None, task_feature_lengths=None, model_file: str = SENTENCEPIECE_MODEL) -> str:
  """The record's JSON for `vocabulary` (a `describe_vocabulary` or `read` dict, None: unknown) and
  the feature lengths, a SentencePiece model named as `model_file` beside it."""
  record = {"vocabulary": None if vocabulary is None else dict(vocabulary),
            "task_feature_lengths": None if task_feature_lengths is None else dict(task_feature_lengths)}
  if vocabulary is not None and vocabulary["kind"] == "sentencepiece":
    record["vocabulary"].pop("model_path", None)
    record["vocabulary"]["model_file"] = model_file
  return json.dumps(record, indent=2, sort_keys=True) + "\n"


def model_bytes(vocabulary: dict) -> bytes:
  """The SentencePiece model a recorded or described vocabulary reads."""
  return storage.read_bytes(vocabulary.get("model_path") or vocabulary["source"])


def write(directory: str, vocabulary: dict | None, task_feature_lengths=None) -> str:
  """Records `vocabulary` and the feature lengths in `directory` (`record_text`), copying a
  SentencePiece model beside the record; returns the record's path."""
  if vocabulary is not None and vocabulary["kind"] == "sentencepiece":
    copy = storage.join(directory, SENTENCEPIECE_MODEL)
    if storage.absolute(vocabulary.get("model_path") or vocabulary["source"]) != storage.absolute(copy):
      storage.write_bytes(copy, model_bytes(vocabulary))
  path = storage.join(directory, RECORD)
  storage.write_text(path, record_text(vocabulary, task_feature_lengths))
  return path


def copy(checkpoint_path: str | None, directory: str) -> None:
  """Records in `directory` (a checkpoint made from `checkpoint_path`'s parameters) what
  `checkpoint_path` recorded; nothing when it recorded nothing."""
  recorded = read(checkpoint_path) if checkpoint_path else None
  if recorded is not None:
    write(directory, recorded["vocabulary"], recorded["task_feature_lengths"])


def _record_directory(checkpoint_path: str) -> str | None:
  """The folder whose record describes `checkpoint_path`: the path itself, or the run folder above
  a step, params, checkpoints/ or best/ folder inside it; the first that holds a record or the
  checkpoint's t5_config.json or config.json. None when there is none."""
  directory = checkpoint_path
  while storage.is_dir(directory):
    names = set(storage.list_names(directory))
    if RECORD in names or names & set(_ROOT_MARKERS):
      return directory
    name = storage.name(directory)
    if not (name.isdigit() or name in _INSIDE_A_RUN):
      return None
    directory = storage.parent(directory)
  return None


def read(checkpoint_path: str) -> dict | None:
  """What `checkpoint_path` recorded: {"path", "vocabulary", "task_feature_lengths"}, the
  vocabulary with "model_path" (the SentencePiece model to read); None when nothing is recorded."""
  directory = _record_directory(checkpoint_path)
  if directory is None:
    return None
  path = storage.join(directory, RECORD)
  if storage.exists(path):
    try:
      record = json.loads(storage.read_text(path))
      vocabulary = record["vocabulary"]
      if vocabulary is not None and vocabulary["kind"] == "sentencepiece":
        vocabulary["model_path"] = storage.join(directory, vocabulary["model_file"])
      return {"path": path, "vocabulary": vocabulary, "task_feature_lengths": record["task_feature_lengths"]}
    except (ValueError, KeyError, TypeError) as error:
      raise ValueError(f"{path}: not a record of the model's inputs ({type(error).__name__}: {error}); "
                       "restore it from the run, or delete it and bind the vocabulary and lengths") from None
  spiece = storage.join(directory, HF_SENTENCEPIECE_MODEL)
  if storage.exists(spiece):  # a Hugging Face T5 directory as published
    vocabulary = {**sentencepiece_vocabulary(spiece, _hf_extra_ids(directory)), "model_path": spiece}
    return {"path": spiece, "vocabulary": vocabulary, "task_feature_lengths": None}
  return None


def _hf_extra_ids(directory: str) -> int:
  """The sentinels a Hugging Face tokenizer_config.json declares (T5's 100 when it says nothing)."""
  config = storage.join(directory, "tokenizer_config.json")
  if storage.exists(config):
    return int(json.loads(storage.read_text(config)).get("extra_ids", T5_EXTRA_IDS))
  return T5_EXTRA_IDS


def same_vocabulary(a: dict, b: dict) -> bool:
  return all(a.get(field) == b.get(field) for field in IDENTITY)


def check_vocabulary(recorded: dict | None, vocabulary: dict | None, what: str) -> None:
  """Refuses, in one line naming both, a vocabulary other than the one `what` recorded."""
  if recorded is None or recorded["vocabulary"] is None or vocabulary is None:
    return
  if not same_vocabulary(recorded["vocabulary"], vocabulary):
    raise ValueError(
        f"the tasks' vocabulary, {shown(vocabulary)}, is not the one {what} was trained with, "
        f"{shown(recorded['vocabulary'])} (recorded in {recorded['path']}): its ids would mean other "
        "text; drop the vocabulary binding (SENTENCEPIECE_MODEL_PATH) to use the recorded one")


def feature_lengths(recorded: dict | None, bound, what: str) -> dict:
  """The bound feature lengths, or `what`'s recorded ones when None is bound (one line when neither)."""
  if bound is not None:
    return dict(bound)
  if recorded is None or not recorded.get("task_feature_lengths"):
    raise ValueError(f"TASK_FEATURE_LENGTHS is None (the checkpoint's own) but {what} records none "
                     f"(no {RECORD}: an imported checkpoint); bind them, e.g. "
                     "--gin.TASK_FEATURE_LENGTHS=\"{'inputs': 512, 'targets': 128}\"")
  return dict(recorded["task_feature_lengths"])
