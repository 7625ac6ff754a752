"""The layout of a run's directories: the one place that names what a run keeps where.

MODEL_DIR (a training run) and EVAL_OUTPUT_DIR (an evaluation) are local folders or bucket
prefixes (`gs://...`); each path below is built with `storage.join`, so a bucket path stays one.

  MODEL_DIR/                         EVAL_OUTPUT_DIR/
    checkpoints/<step>/{params,opt_state,data}   predictions.jsonl     (whole, in the tasks' order)
    best/<step>/params               predictions.parts/<n>.jsonl (a bucket's items as they finish)
    normalized/                      metrics.json
    train/ (TensorBoard)             evaluation.json       (provenance, checked on resume)
    t5_config.json  config.gin       report.html  plot_*.png
    data_files.json                  config.gin
    eval_metrics.jsonl
"""
import dataclasses

import storage

CONFIG_GIN = "config.gin"  # the gin configuration a run was started with, as t5x keeps it


@dataclasses.dataclass(frozen=True)
class RunDir:
  """A training run's MODEL_DIR."""
  path: str

  def _at(self, name: str) -> str:
    return storage.join(self.path, name)

  checkpoints = property(lambda self: self._at("checkpoints"))
  best = property(lambda self: self._at("best"))  # the best evaluation's checkpoint (BEST_METRIC)
  normalized = property(lambda self: self._at("normalized"))  # the reward model, normalised
  tensorboard = property(lambda self: self._at("train"))
  model_config = property(lambda self: self._at("t5_config.json"))
  config_gin = property(lambda self: self._at(CONFIG_GIN))
  data_files = property(lambda self: self._at("data_files.json"))  # what each training task read
  eval_metrics = property(lambda self: self._at("eval_metrics.jsonl"))  # one line per evaluation


@dataclasses.dataclass(frozen=True)
class EvalDir:
  """An evaluation's EVAL_OUTPUT_DIR."""
  path: str

  def _at(self, name: str) -> str:
    return storage.join(self.path, name)

  predictions = property(lambda self: self._at("predictions.jsonl"))
  # In a bucket (no append), the items scored so far: whole numbered objects, one per batch.
  prediction_parts = property(lambda self: self._at("predictions.parts"))
  metrics = property(lambda self: self._at("metrics.json"))
  settings = property(lambda self: self._at("evaluation.json"))
  report = property(lambda self: self._at("report.html"))
  config_gin = property(lambda self: self._at(CONFIG_GIN))
