"""Provenance of an evaluation: what produced its numbers, recorded in `evaluation.json` and
metrics.json's "provenance", and compared when an output directory is resumed.

It holds the checkpoint's step and a fingerprint of its parameters, the model config, each data
file or folder read (path, size, sha256, records read and skipped; a TFDS dataset's name, version,
splits and prepared files) and the examples per split, every setting of t5_tasks' configurables
(`t5_tasks.tasks.task_configuration`: TimeDial's target_format, HEAP's split, ...), the vocabulary,
feature lengths, scorer and normalisation, and the project's git commit. An output directory
holding predictions (finished or not) of a provenance that differs in anything but where the
checkpoint and the data are and the commit (`score_identity`) is refused, before anything is
scored or written, naming each differing setting with both values.
"""
import dataclasses
import hashlib
import json
import os
import subprocess
from typing import Mapping

import jax

from models.config import T5Config
from runner import checkpoints
from runner import data
from runner import outputs
from runner import run_dir
from runner import scorers
import storage

SETTINGS_FILE = run_dir.SETTINGS  # what an output directory holds, checked on resuming
# Provenance fields that do not change scores: a moved checkpoint or a new commit may resume.
NOT_SCORE_FIELDS = ("checkpoint_path", "vocabulary.model_file", "version")
MAX_CHANGES_SHOWN = 4  # settings named with both values in a refusal; the rest are counted
# Elements hashed per parameter: all of a smaller one, an evenly strided sample of a larger one
# (with its shape), so that fingerprinting an XXL model costs a few MB of transfers, not 40 GB.
FINGERPRINT_SAMPLE = 1 << 16
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkpoint_step(checkpoint_path: str) -> int | None:
  """The training step of the checkpoint evaluation reads (`<step>/params`), None when it has none."""
  try:
    location = checkpoints.params_location(checkpoint_path)
  except (FileNotFoundError, NotADirectoryError):  # Hugging Face or t5x: no orbax step directory
    return None
  name = storage.name(storage.parent(location))
  return int(name) if name.isdigit() else None


def params_fingerprint(params) -> str:
  """sha256 over every parameter's path, shape, dtype and values (a strided sample of a big one)."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    stride = max(1, leaf.size // FINGERPRINT_SAMPLE)
    sample = scorers.on_every_host(leaf.reshape(-1)[::stride])  # a leaf split over hosts is whole on none
    digest.update(f"{jax.tree_util.keystr(path)} {leaf.shape} {leaf.dtype} {stride}\n".encode())
    digest.update(sample.tobytes())
  return "sha256:" + digest.hexdigest()


def project_version() -> str:
  """The project's git commit ("+modified" when tracked files differ from it), or "unknown"."""
  def git(*args):
    return subprocess.run(["git", "-C", PROJECT_ROOT, *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()
  try:
    commit = git("rev-parse", "HEAD")
    return commit + ("+modified" if git("status", "--porcelain", "--untracked-files=no") else "")
  except (OSError, subprocess.SubprocessError):  # no git, or not a checkout (an installed copy)
    return "unknown"


def _vocabulary(tasks) -> dict:
  vocabulary = tasks[0].output_features["inputs"].vocabulary
  vocabulary = getattr(vocabulary, "resolved", vocabulary)  # t5_tasks' gin-configured wrapper
  model_file = getattr(vocabulary, "sentencepiece_model_file", None)
  return {"class": type(vocabulary).__name__, "size": int(vocabulary.vocab_size), "model_file": model_file,
          "model_sha256": model_file and hashlib.sha256(storage.read_bytes(model_file)).hexdigest()}


def provenance(*, mixture_or_task_name, split, checkpoint_path, config: T5Config, params, tasks,
               task_feature_lengths, scorer, normalization) -> dict:
  """What produced an evaluation's numbers (the module docstring lists it), as JSON reads it back
  (tuples as lists), so that it compares equal to a recorded one."""
  described, configuration = data.tasks_provenance(tasks)
  record = {"mixture_or_task_name": mixture_or_task_name, "split": split, "scorer": scorer,
            "normalization": normalization if scorer == "likelihood" else None,
            "checkpoint_path": storage.absolute(checkpoint_path),
            "checkpoint_step": checkpoint_step(checkpoint_path),
            "params_fingerprint": params_fingerprint(params), "model_config": dataclasses.asdict(config),
            "task_feature_lengths": dict(task_feature_lengths), "vocabulary": _vocabulary(tasks),
            "data": described, "task_configuration": configuration, "version": project_version()}
  return json.loads(json.dumps(record))


def score_identity(settings: Mapping) -> dict:
  """`settings` as compared on resuming (`data.content_identity`): all but where the checkpoint,
  the vocabulary's file and the data are (their fingerprints and sha256 identify them) and the
  project's version (NOT_SCORE_FIELDS)."""
  return data.content_identity(json.loads(json.dumps(settings)), NOT_SCORE_FIELDS)


def check_settings(output_dir: str, settings: dict) -> None:
  """Refuses predictions of another provenance in `output_dir` (finished or not), naming each
  setting that differs with both values (`score_identity` compares them), and predictions whose
  provenance is unknown; `record_settings` records it."""
  layout = run_dir.EvalDir(output_dir)
  path = layout.settings
  if not (outputs.read_written_ids(layout.predictions) or storage.list_names(layout.prediction_parts)):
    return
  if not storage.exists(path):
    raise ValueError(f"{output_dir} holds predictions but no {run_dir.SETTINGS}: what produced them is "
                     "unknown, and resuming could mix their scores with these. Use a new EVAL_OUTPUT_DIR, "
                     "or delete this one to start over")
  changed = data.identity_differences(score_identity(json.loads(storage.read_text(path))), score_identity(settings))
  if changed:
    shown = "; ".join(changed[:MAX_CHANGES_SHOWN])
    more = f"; and {len(changed) - MAX_CHANGES_SHOWN} more" if len(changed) > MAX_CHANGES_SHOWN else ""
    raise ValueError(f"{output_dir} holds predictions of another evaluation; settings that differ from "
                     f"{path}: {shown}{more}; resuming or reusing them would mix their scores. Use a new "
                     "EVAL_OUTPUT_DIR, or delete this one to start over")


def record_settings(output_dir: str, settings: dict) -> None:
  storage.write_text(run_dir.EvalDir(output_dir).settings,
                            json.dumps(settings, indent=2, sort_keys=True) + "\n")


def _records(file: dict) -> str:
  if file.get("records_read") is None:
    return ""
  normalised = file.get("records_normalised") or {}
  return (f", {file['records_read']} records read, {file['records_skipped']} skipped"
          + "".join(f", {count} {what}" for what, count in normalised.items()))


def notes(settings: dict) -> list[str]:
  """The provenance lines of the report header and the console."""
  step = settings["checkpoint_step"]
  files = [f for task_data in settings["data"].values() for f in task_data.get("files", [])]
  unique = {f["path"]: f for f in files}
  lines = [f"checkpoint {settings['checkpoint_path']}" + (f" at step {step}" if step is not None else "")
           + f", parameters {settings['params_fingerprint'][:23]}…",
           f"vocabulary {settings['vocabulary']['class']} ({settings['vocabulary']['size']} ids), "
           f"feature lengths {settings['task_feature_lengths']}, project version {settings['version']}",
           "data: " + ("; ".join(f"{f['path']} ({f['bytes']} bytes, sha256 {f['sha256'][:12]}"
                                 + _records(f) + ")"
                                 for f in unique.values()) or "no files (TFDS or other sources)")]
  quickstart = sorted({f["dataset"] for f in unique.values() if f["quickstart"]})
  if quickstart:
    lines.append(f"QUICKSTART DATA (a few hand-written examples, not the datasets): {', '.join(quickstart)}")
  return lines
