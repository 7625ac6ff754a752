"""Mixtures of the registered tasks, and a gin-configurable way to define new ones.

Rates are seqio's `mixing_rate_num_examples`: each task's number of training examples,
capped at `size_rate.cap` (gin macro `MIXTURE_RATE_CAP` in gin/mixtures/*.gin), computed when
the mixture's dataset is built, so the cap and the data files can both come from gin.

A mixture keeps the output features of its first task: a mixture that starts with a
generation task yields `inputs`/`targets` only (token cross-entropy on every task);
mixtures of cloze and preference tasks keep `candidates` and `candidate_labels`.
"""
from typing import Sequence

import gin
import seqio

from t5_tasks import tasks
from t5_tasks.heap import mixtures as heap_mixtures

DEFAULT_RATE_CAP = 2**16


@gin.configurable
def size_rate(task: seqio.Task, cap: int = DEFAULT_RATE_CAP) -> float:
  """Training examples of `task`, at most `cap`.

  An evaluation-only task (TimeDial's cloze: a test set only) counts its first split instead,
  so that a mixture holding it still samples it, in proportion to its size.
  """
  split = "train" if "train" in task.splits else task.splits[0]
  return float(seqio.mixing_rate_num_examples(task, maximum=cap, split=split))


@gin.configurable
def register_mixture(name: str = gin.REQUIRED, task_names: Sequence[str] = gin.REQUIRED,
                     rate=size_rate) -> str:
  """(Re)registers mixture `name` of `task_names`, returns `name` (for MIXTURE_OR_TASK_NAME)."""
  if name in seqio.TaskRegistry.names():
    raise ValueError(f"mixture name {name!r} is already a task")
  unknown = [t for t in task_names
             if t not in seqio.TaskRegistry.names() and t not in seqio.MixtureRegistry.names()]
  if unknown:
    raise ValueError(f"mixture {name!r}: unknown tasks {unknown}")
  if name in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, list(task_names), default_rate=rate)
  return name


def mixture_definitions() -> dict[str, list[str]]:
  """Every predefined mixture name and its tasks."""
  out = {
      # The generation task first, so the mixture carries inputs/targets only.
      "generation_and_cloze": list(tasks.GENERATION_TASKS + tasks.CLOZE_TASKS),
      **heap_mixtures.protocol_mixtures(),
  }
  out["quickstart"] = ["turingadvice_generation", "timedial_weak_supervision",
                       "timedial_cloze_full", "asq_intent_cloze", "heap_ah", "heap_av",
                       "summarize_feedback_preference"]
  return out


def register_mixtures():
  for name, task_names in mixture_definitions().items():
    register_mixture(name, task_names)
