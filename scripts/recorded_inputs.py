"""A checkpoint's recorded vocabulary and feature lengths, bound where the gin configuration leaves
them open (`runner.model_inputs` records them with every run and imported checkpoint).

Called by each gin script after its configuration is parsed: the vocabulary when nothing binds
`t5_tasks.vocab.get_vocabulary.sentencepiece_model_path` (SENTENCEPIECE_MODEL_PATH in a recipe),
TASK_FEATURE_LENGTHS when it is None (gin/runs/eval.gin and infer.gin: the checkpoint's own). Each
is bound through gin, so the run's config.gin says what was used, and one line says which. A
binding that differs from the record is the runner's to refuse (`model_inputs.check_vocabulary`).
"""
import gin

from runner import model_inputs

VOCABULARY_PARAMETER = "t5_tasks.vocab.get_vocabulary.sentencepiece_model_path"
LENGTHS_MACRO = "TASK_FEATURE_LENGTHS"


def _bound(parameter: str) -> bool:
  try:
    gin.query_parameter(parameter)
  except ValueError:  # gin's word for a parameter nothing binds
    return False
  return True


def macro_value(name: str):
  """The value of gin macro `name`, following references (%CHECKPOINT_PATH = %MODEL_DIR, @fn())."""
  try:
    value = gin.query_parameter(f"%{name}")
  except ValueError:
    return None
  while isinstance(value, gin.config.ConfigurableReference):
    value = value.scoped_configurable_fn()
  return value


def _bind(binding: str) -> None:
  with gin.unlock_config():
    gin.parse_config(binding)


def follow(checkpoint_path: str | None, what: str, default_lengths: dict | None = None) -> dict | None:
  """Binds the vocabulary and feature lengths `checkpoint_path` recorded where none are bound,
  printing a line for each it takes; returns the record (None: nothing recorded). Lengths left
  None that the checkpoint does not record (an imported one) are `default_lengths`, said in a line."""
  open_vocabulary = not _bound(VOCABULARY_PARAMETER)
  open_lengths = _bound(f"%{LENGTHS_MACRO}") and macro_value(LENGTHS_MACRO) is None
  # Read only when something is open: a bucket's record costs requests (and a host without its
  # network, timeouts).
  recorded = model_inputs.read(checkpoint_path) if checkpoint_path and (open_vocabulary or open_lengths) else None
  vocabulary = recorded and recorded["vocabulary"]
  if vocabulary and vocabulary["kind"] in ("sentencepiece", "bytes") and open_vocabulary:
    model_path = vocabulary.get("model_path")
    _bind(f"{VOCABULARY_PARAMETER} = {model_path!r}")
    print(f"vocabulary: {model_inputs.shown(vocabulary)}, as {what} recorded ({recorded['path']})", flush=True)
  if open_lengths:
    lengths = recorded and recorded["task_feature_lengths"]
    if lengths:
      said = f"as {what} recorded ({recorded['path']})"
    elif default_lengths:
      lengths, said = default_lengths, f"the defaults: {what} records none; bind {LENGTHS_MACRO} to choose"
    if lengths:
      _bind(f"{LENGTHS_MACRO} = {dict(lengths)!r}")
      print(f"feature lengths: {dict(lengths)}, {said}", flush=True)
  return recorded
