r"""Trains a policy with PPO against a reward model (runner/ppo.py), on the command line t5x uses.

  python -m scripts.ppo --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/ppo.gin \
      --gin_file=gin/recipes/summarize_from_feedback/ppo.gin --gin.MODEL_DIR="'runs/tldr_ppo'" \
      --gin.POLICY_CHECKPOINT_PATH="'runs/tldr_sft'" --gin.REWARD_CHECKPOINT_PATH="'runs/tldr_rm/normalized'"

The command line is scripts/gin_cli.py's. Rerunning the same command resumes from the latest
checkpoint in MODEL_DIR. Exit codes as scripts.train's: 0 when TRAIN_STEPS are done; 1 for a
setting or input the run cannot use; 130 after Ctrl-C and 143 after SIGTERM, both having saved a
checkpoint at the step reached.
"""
from typing import Sequence

import gin

from runner import ppo as ppo_lib
from scripts import gin_cli
from scripts import train as train_script


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  train_script.follow_recorded_inputs("POLICY_CHECKPOINT_PATH")
  train_script.finish(gin.get_configurable(ppo_lib.train)(run_config=gin.config_str()))


if __name__ == "__main__":
  gin_cli.run(main)
