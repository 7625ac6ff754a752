r"""Prints a run's preflight from the same gin files as scripts.train, without running anything.

  python -m scripts.preflight --gin_file=gin/models/t5_1_1/xxl.gin --gin_file=gin/runs/finetune.gin \
      --gin.MESH_SHAPE='(32,8)' --gin.DEVICE_MEMORY_GIB=16

Processes, devices, the mesh, the batch per host and per device, and the per-device memory plan
(runner/memory_plan.py), from the objects scripts.train's `train.train` receives: gin/runs/finetune.gin
binds the same model, training dataset, training config and partitioner to
`runner.preflight.for_training`, which every run calls first. MODEL_DIR and MIXTURE_OR_TASK_NAME
may stay %gin.REQUIRED: planning reads no data (a gin file that imports t5_tasks still imports
it). A mesh larger than this machine's devices is planned from shapes. `--gin.DEVICE_MEMORY_GIB`
plans for another device's memory (a TPU from a laptop); `--gin.REMAT=True` (the model gin files'
switch) plans and trains with rematerialised layers. Exit 0 when the plan fits,
1 (with the arithmetic and a mesh that would fit) when it does not.
"""
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import preflight
from scripts import console
from scripts import gin_cli  # the shared gin command line


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  gin_cli.parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  gin_cli.check_macro_kinds()
  gin.get_configurable(preflight.for_training)()


if __name__ == "__main__":
  gin_cli.run(main)
