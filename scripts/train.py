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


def follow_recorded_inputs(start_macro: str) -> None:
  """A resumed run keeps its own vocabulary; a new one takes that of the checkpoint it starts from
  (the gin macro `start_macro`)."""
  model_dir = recorded_inputs.macro_value("MODEL_DIR")
  if recorded_inputs.follow(model_dir, f"MODEL_DIR {model_dir}") is None:
    start = recorded_inputs.macro_value(start_macro)
    recorded_inputs.follow(start, f"{start_macro} {start}")


def finish(result) -> None:
  """`stopped at step N`; or, for a run a signal stopped, the line saying where its checkpoint is
  and the exit code 130 (SIGINT) or 143 (SIGTERM)."""
  if result.signal_number is None:
    print(f"stopped at step {result.step}", flush=True)
    return
  name = signal.Signals(result.signal_number).name
  print(f"{name}: saved the checkpoint of step {result.step} in {gin.query_parameter('%MODEL_DIR')}; "
        "rerun the same command to resume", flush=True)
  sys.exit(gin_cli.EXIT_SIGINT if result.signal_number == signal.SIGINT else gin_cli.EXIT_SIGTERM)


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  follow_recorded_inputs("INITIAL_CHECKPOINT_PATH")
  finish(gin.get_configurable(train_lib.train)(run_config=gin.config_str()))


if __name__ == "__main__":
  gin_cli.run(main)
