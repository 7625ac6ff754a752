"""Reward normalisation: a reward model shifted so that reference summaries score 0 on average.

Stiennon et al. (2020, §3.4) normalise their reward models at the end of training so that the
dataset's reference summaries have mean reward 0. Here the offset goes into the head's bias
(`models.reward.shift_to_zero_mean`), so the normalised model is an ordinary params-only orbax
checkpoint that `checkpoints.load_params` reads (REWARD_CHECKPOINT_PATH) with no extra file.
It is written to its own directory, never over the checkpoint it came from;
`normalization.json` beside it records the offset and the references it was computed on.
"""
import json

import jax
import numpy as np

from models import reward as reward_lib
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import data
from runner import host_memory
from runner import model_inputs
from runner import partitioning
from runner import run_dir
import storage

NORMALIZATION_FILE = "normalization.json"
NORMALIZED_SUBDIR = run_dir.NORMALIZED  # train's output: MODEL_DIR/normalized


def reference_mean_reward(config: T5Config, params, task_name: str, split: str, feature_lengths,
                          batch_size: int) -> tuple[float, int]:
  """(mean reward, number of references) over every (input, target) of a generation task's split.

  Each example's one candidate is its reference (`summarize_feedback_sft`); the reward reads it
  with EOS, as it reads training candidates and best-of-N samples.
  """
  total, count = 0.0, 0
  for _, batch in data.candidate_batches(task_name, split, feature_lengths, batch_size, num_candidates=1):
    input_ids, candidate_ids = data.trim_padding(batch["input_ids"], batch["candidate_ids"])
    rewards = np.asarray(jax.device_get(reward_lib.reward(config, params, input_ids, candidate_ids[:, 0])),
                         np.float64)
    total += float(rewards[batch["example_mask"]].sum())
    count += int(batch["example_mask"].sum())
  if not count:
    raise ValueError(f"reward normalisation: task {task_name} split {split!r} has no references")
  return total / count, count


def _check_output_dir(output_dir: str, source: str) -> None:
  """Refuses to write over anything but an earlier normalisation (its normalization.json)."""
  output_dir, source = storage.absolute(output_dir).rstrip("/"), storage.absolute(source).rstrip("/")
  if output_dir == source or source.startswith(output_dir + "/"):
    raise ValueError(f"the normalised checkpoint's directory {output_dir} holds its source {source}; "
                     "name another directory")
  if storage.exists(output_dir):
    if not storage.is_file(storage.join(output_dir, NORMALIZATION_FILE)):
      raise ValueError(f"{output_dir} exists and is no earlier normalisation (it has no "
                       f"{NORMALIZATION_FILE}); name a new directory")
    storage.remove_tree(output_dir)


def normalize(config: T5Config, params, *, source: str, output_dir: str, task_name: str, split: str,
              feature_lengths, batch_size: int) -> dict:
  """Writes `params` normalised on the task's references to `output_dir`; returns the record.

  The record (also `output_dir/normalization.json`): `offset` (subtracted from the head's bias),
  the bias before and after, the references (task, split, count, feature lengths, files) and
  the source checkpoint.
  """
  if reward_lib.HEAD not in params:
    raise ValueError(f"{source} has no '{reward_lib.HEAD}': only a reward model (OBJECTIVE='pairwise' "
                     "or 'listwise') can be normalised")
  if jax.process_count() > 1:
    raise ValueError("reward normalisation runs in one process; run scripts.normalize_reward after training")
  _check_output_dir(output_dir, source)
  mean, count = reference_mean_reward(config, params, task_name, split, feature_lengths, batch_size)
  shifted = reward_lib.shift_to_zero_mean(params, mean)
  checkpoints.save_params(output_dir, shifted)
  checkpoints.write_model_config(output_dir, config)
  model_inputs.copy(source, output_dir)
  task = data.get_provider(task_name)
  record = {"offset": mean, "bias_before": float(np.asarray(params[reward_lib.HEAD]["bias"])[0]),
            "bias_after": float(np.asarray(shifted[reward_lib.HEAD]["bias"])[0]),
            "references": {"task": task_name, "split": split, "count": count,
                           "feature_lengths": dict(feature_lengths),
                           "files": data.source_provenance(task).get("files", [])},
            "source_checkpoint": storage.absolute(source)}
  storage.write_text(storage.join(output_dir, NORMALIZATION_FILE), json.dumps(record, indent=2) + "\n")
  print(f"reward normalised: {count} references of {task_name} ({split}) scored {mean:+.6f} on average; "
        f"the head's bias is lowered by that, written to {output_dir}", flush=True)
  return record


def normalize_checkpoint(*, model_config: T5Config | None = None, checkpoint_path: str, output_dir: str,
                         dataset: configs.DatasetConfig, partitioner: partitioning.Partitioner | None = None) -> dict:
  """Loads a reward checkpoint (any `checkpoints.load_params` reads), normalises it on the
  references of `dataset`'s task and split (its feature lengths and batch size) and writes it to
  `output_dir` (`normalize`). scripts/normalize_reward.py calls it through gin, in one process:
  `partitioner` (default: every device of this host, joining no other) should not join hosts."""
  partitioner = partitioning.Partitioner(multi_host=False) if partitioner is None else partitioner
  task_name, split = dataset.mixture_or_task_name, dataset.split
  host_memory.reuse_freed_memory()  # before anything touches a device
  data.require_examples(data.tasks_with_split(task_name, split), split)  # before the checkpoint loads
  config, params = checkpoints.load_params(checkpoint_path, model_config, partitioner)
  with partitioner.activate():
    return normalize(config, params, source=checkpoint_path, output_dir=output_dir, task_name=task_name,
                     split=split, feature_lengths=dataset.task_feature_lengths, batch_size=dataset.batch_size)
