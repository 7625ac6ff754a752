r"""Trains a model with gin, on the command line t5x uses.

  python -m scripts.train --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/quickstart.gin --gin.MODEL_DIR="'/tmp/run'" --gin.TRAIN_STEPS=200

The command line (the --gin.NAME shorthand, its checks, exit codes) is scripts/gin_cli.py's.
Importing t5_tasks registers every task and mixture. Rerunning the same command resumes from the
latest checkpoint in MODEL_DIR.

Exit codes: 0 when TRAIN_STEPS are done; 1 for a setting or input the run cannot use (one
paragraph, usually a line, says which); 130 after Ctrl-C (SIGINT) and 143 after SIGTERM (a
preemption, `kill`), both having saved a checkpoint at the step reached, so that the same command
resumes.
"""
import signal
import sys
from typing import Sequence

import gin

from runner import train as train_lib
from scripts import gin_cli
from scripts import recorded_inputs


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  # A resumed run keeps its own vocabulary; a new one takes its initial checkpoint's.
  model_dir = recorded_inputs.macro_value("MODEL_DIR")
  if recorded_inputs.follow(model_dir, f"MODEL_DIR {model_dir}") is None:
    initial = recorded_inputs.macro_value("INITIAL_CHECKPOINT_PATH")
    recorded_inputs.follow(initial, f"INITIAL_CHECKPOINT_PATH {initial}")
  result = gin.get_configurable(train_lib.train)(run_config=gin.config_str())
  if result.signal_number is None:
    print(f"stopped at step {result.step}", flush=True)
    return
  name = signal.Signals(result.signal_number).name
  print(f"{name}: saved the checkpoint of step {result.step} in {gin.query_parameter('%MODEL_DIR')}; "
        "rerun the same command to resume", flush=True)
  sys.exit(gin_cli.EXIT_SIGINT if result.signal_number == signal.SIGINT else gin_cli.EXIT_SIGTERM)


if __name__ == "__main__":
  gin_cli.run(main)
