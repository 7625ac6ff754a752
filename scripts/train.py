r"""Trains a model with gin, on the command line t5x uses.

  python -m scripts.train --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/quickstart.gin --gin.MODEL_DIR="'/tmp/run'" --gin.TRAIN_STEPS=200

`--gin.NAME=value` is shorthand for `--gin_bindings='NAME = value'`. Importing t5_tasks registers
every task and mixture. Rerunning the same command resumes from the latest checkpoint in MODEL_DIR.
"""
import pathlib
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import train as train_lib
from scripts import console

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  flags.DEFINE_multi_string("gin_file", [], "Gin files, parsed in order (model, run, mixture).", flag_values=fv)
  flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings applied after the files, e.g. 'TRAIN_STEPS = 10'.",
                            flag_values=fv)
  flags.DEFINE_multi_string("gin_search_paths", [str(PROJECT_ROOT)], "Folders gin file names are relative to.",
                            flag_values=fv)


def rewrite_gin_args(argv: Sequence[str]) -> list[str]:
  """t5x's `--gin.NAME=value` -> `--gin_bindings=NAME = value`; other arguments unchanged."""
  rewritten = []
  for arg in argv:
    if arg.startswith("--gin.") and "=" in arg:
      name, value = arg[len("--gin."):].split("=", 1)
      arg = f"--gin_bindings={name} = {value}"
    rewritten.append(arg)
  return rewritten


def parse_gin(gin_files, gin_bindings, search_paths) -> None:
  for path in search_paths:
    gin.add_config_file_search_path(path)
  gin.parse_config_files_and_bindings(gin_files, gin_bindings, finalize_config=False)


def start(argv: Sequence[str]) -> None:
  """What every gin script does first: check the arguments, quiet the libraries, register the
  tasks, parse the gin files and bindings."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)


def main(argv: Sequence[str]) -> None:
  start(argv)
  result = gin.get_configurable(train_lib.train)(run_config=gin.config_str())
  print(f"stopped at step {result.step}" + (" (preempted; rerun to resume)" if result.preempted else ""))


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=lambda argv: flags.FLAGS(rewrite_gin_args(argv)))
