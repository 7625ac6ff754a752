r"""Normalises a reward model so that reference summaries score 0 on average, with gin.

  python -m scripts.normalize_reward --gin_file=gin/models/t5_1_1/tiny.gin \
      --gin_file=gin/recipes/summarize_from_feedback/normalize_reward.gin \
      --gin.REWARD_CHECKPOINT_PATH="'/tmp/rm'" --gin.NORMALIZED_CHECKPOINT_PATH="'/tmp/rm_normalized'"

Scores every reference of MIXTURE_OR_TASK_NAME's SPLIT (by default the TL;DR references of
`summarize_feedback_sft`), lowers the reward head's bias by their mean (Stiennon et al. 2020,
§3.4) and writes the result as a params-only checkpoint to NORMALIZED_CHECKPOINT_PATH, with
normalization.json (the offset, the references). The source checkpoint is left as it was; a
directory that is not an earlier normalisation is refused. Use the new directory as
REWARD_CHECKPOINT_PATH. Training can do the same at its end: configs.TrainingConfig.normalize_reward_task.
"""
from typing import Sequence

import gin

from runner import reward_normalization
from scripts import gin_cli  # the shared gin command line


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  record = gin.get_configurable(reward_normalization.normalize_checkpoint)()
  print(f"offset {record['offset']:+.6f} over {record['references']['count']} references; "
        f"REWARD_CHECKPOINT_PATH={gin.query_parameter('%NORMALIZED_CHECKPOINT_PATH')}", flush=True)


if __name__ == "__main__":
  gin_cli.run(main)
