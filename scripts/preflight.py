r"""Prints a run's preflight from the same gin files as scripts.train, without running anything.

  python -m scripts.preflight --gin_file=gin/models/t5_1_1/xxl.gin --gin_file=gin/runs/finetune.gin \
      --gin.MESH_SHAPE='(32,8)' --gin.DEVICE_MEMORY_GIB=16

Processes, devices, the mesh, the batch per host and per device, and the per-device memory plan
(runner/memory_plan.py). MODEL_DIR and MIXTURE_OR_TASK_NAME may stay %gin.REQUIRED: planning reads
no data (a gin file that imports t5_tasks still imports it). A mesh larger than this machine's
devices is planned from shapes. `--gin.DEVICE_MEMORY_GIB` plans for another device's memory (a TPU
from a laptop); `--gin.REMAT=True` (the model gin files' switch) plans and trains with
rematerialised layers. Exit 0 when the plan fits,
1 (with the arithmetic and a mesh that would fit) when it does not.
"""
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import partitioning
from runner import preflight
from scripts import console
from scripts import gin_cli  # the shared gin command line


def _evaluated(value):
  """A gin value with its references resolved: `%MACRO` to its value, `@fn()` called."""
  if isinstance(value, gin.config.ConfigurableReference):
    if value.selector == "gin.macro":
      return _evaluated(gin.query_parameter(f"%{value.scoped_selector.rsplit('/', 1)[0]}"))
    return value.scoped_configurable_fn() if value.evaluate else value.scoped_configurable_fn
  if isinstance(value, dict):
    return {key: _evaluated(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return type(value)(_evaluated(item) for item in value)
  return value


def _bound(name: str, default=None):
  """`train.train.<name>` (or a `%MACRO` when `name` starts with %) as the gin files bind it."""
  try:
    return _evaluated(gin.query_parameter(name if name.startswith("%") else f"train.train.{name}"))
  except ValueError:  # not bound
    return default


def run_arguments() -> dict:
  """preflight.describe_run's arguments, read from the parsed gin configuration."""
  return dict(config=_bound("model_config"), mesh_shape=tuple(_bound("mesh_shape", (-1, 1))),
              batch_size=_bound("batch_size"), feature_lengths=_bound("task_feature_lengths"),
              optimizer=_bound("%OPTIMIZER", "adafactor"), accumulation_steps=_bound("accumulation_steps", 1),
              remat=_bound("model_config").remat, objective=_bound("objective", "cross_entropy"),
              rules=_bound("logical_axis_rules", partitioning.STANDARD_LOGICAL_AXIS_RULES),
              device_memory_gib=_bound("device_memory_gib"))


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  gin_cli.parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  gin_cli.check_macro_kinds()
  partitioning.initialize_distributed(_bound("multi_host"))
  arguments = run_arguments()
  print("\n".join(preflight.describe_run(**arguments)), flush=True)
  preflight.check(**arguments)


if __name__ == "__main__":
  gin_cli.run(main)
