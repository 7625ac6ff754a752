"""The layout of a run's directories: the one place that names what a run keeps where.

MODEL_DIR (a training run) and EVAL_OUTPUT_DIR (an evaluation) are local folders or bucket
prefixes (`gs://...`); each path below is built with `storage.join`, so a bucket path stays one.

  MODEL_DIR/                         EVAL_OUTPUT_DIR/
    checkpoints/<step>/{params,opt_state,data}   predictions.jsonl     (whole, in the tasks' order)
    best/<step>/params               predictions.parts/<n>.jsonl (a bucket's items as they finish)
    normalized/                      metrics.json
    train/ (TensorBoard)             evaluation.json       (provenance, checked on resume)
    t5_config.json  config.gin       report.html  plot_*.png
    model_inputs.json                config.gin
    sentencepiece.model (when the run's vocabulary is one)
    data_files.json
    eval_metrics.jsonl
    lease.json (while a training runs: runner/lease.py)
"""
import dataclasses

import storage

# MODEL_DIR's names.
CHECKPOINTS = "checkpoints"
BEST = "best"  # the best evaluation's checkpoint (BEST_METRIC)
NORMALIZED = "normalized"  # the reward model, normalised
TENSORBOARD = "train"
MODEL_CONFIG = "t5_config.json"
CONFIG_GIN = "config.gin"  # the gin configuration a run was started with, as t5x keeps it
DATA_FILES = "data_files.json"  # what each training task read
MODEL_INPUTS = "model_inputs.json"  # the vocabulary and feature lengths (runner/model_inputs.py)
SENTENCEPIECE_MODEL = "sentencepiece.model"  # the run's own copy of its SentencePiece model
EVAL_METRICS = "eval_metrics.jsonl"  # one line per evaluation during training
LEASE = "lease.json"  # the training that writes the run now (runner/lease.py)
EVAL = "eval"  # an evaluation's folder inside what it evaluates (eval_dir)
# EVAL_OUTPUT_DIR's names.
PREDICTIONS = "predictions.jsonl"
PREDICTION_PARTS = "predictions.parts"  # in a bucket (no append): whole numbered objects, one per batch
METRICS = "metrics.json"
SETTINGS = "evaluation.json"  # provenance, checked on resuming
REPORT = "report.html"


@dataclasses.dataclass(frozen=True)
class _Directory:
  path: str

  def at(self, name: str) -> str:
    return storage.join(self.path, name)


class RunDir(_Directory):
  """A training run's MODEL_DIR."""
  checkpoints = property(lambda self: self.at(CHECKPOINTS))
  best = property(lambda self: self.at(BEST))
  normalized = property(lambda self: self.at(NORMALIZED))
  tensorboard = property(lambda self: self.at(TENSORBOARD))
  model_config = property(lambda self: self.at(MODEL_CONFIG))
  config_gin = property(lambda self: self.at(CONFIG_GIN))
  data_files = property(lambda self: self.at(DATA_FILES))
  model_inputs = property(lambda self: self.at(MODEL_INPUTS))
  eval_metrics = property(lambda self: self.at(EVAL_METRICS))
  lease = property(lambda self: self.at(LEASE))


def eval_dir(checkpoint_path: str) -> str:
  """CHECKPOINT_PATH/eval, for gin (gin/quickstart.gin): each checkpoint's evaluation in its own
  folder, so that evaluating another run never writes into (or is refused by) the demo's."""
  return storage.join(checkpoint_path, EVAL)


class EvalDir(_Directory):
  """An evaluation's EVAL_OUTPUT_DIR."""
  predictions = property(lambda self: self.at(PREDICTIONS))
  prediction_parts = property(lambda self: self.at(PREDICTION_PARTS))
  metrics = property(lambda self: self.at(METRICS))
  settings = property(lambda self: self.at(SETTINGS))
  report = property(lambda self: self.at(REPORT))
  config_gin = property(lambda self: self.at(CONFIG_GIN))
