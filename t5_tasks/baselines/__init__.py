"""The papers' simple baselines, evaluable like a model.

Each baseline scores the candidates of `CandidateItem`s (or, for advice
retrieval, generates text); `prediction_record` turns scores into the shared
predictions.jsonl format of `runner.outputs`.
"""
import dataclasses
from typing import Mapping, Sequence

import numpy as np

from t5_tasks.analysis import mean_interval


@dataclasses.dataclass(frozen=True)
class CandidateItem:
  """One cloze or preference item: a context and K candidates, gold[k] = 1 if correct."""
  task: str
  id: str
  context: str
  candidates: tuple[str, ...]
  gold: tuple[int, ...]
  metadata: Mapping[str, object] = dataclasses.field(default_factory=dict)


def prediction_record(item: CandidateItem, scores: Sequence[float]) -> dict:
  """The interface's per-item JSON object; ties go to the first candidate."""
  if len(scores) != len(item.candidates):
    raise ValueError(f"item {item.id!r}: {len(scores)} scores for {len(item.candidates)} candidates")
  return {"task": item.task, "id": item.id, "scores": [float(s) for s in scores],
          "prediction": int(np.argmax(scores)), "gold": list(item.gold), **item.metadata}


def is_correct(record: Mapping) -> bool:
  """The top-scored candidate is a correct one."""
  return record["gold"][record["prediction"]] == 1


def accuracy_metrics(records: Sequence[Mapping], *, seed: int = 0) -> dict[str, dict]:
  """{task: {"accuracy": {"value", "low", "high"}}} over the records of each task."""
  by_task: dict[str, list[bool]] = {}
  for record in records:
    by_task.setdefault(record["task"], []).append(is_correct(record))
  return {task: {"accuracy": _entry(values, seed)} for task, values in by_task.items()}


def _entry(values, seed: int) -> dict:
  result = mean_interval(values, seed=seed)
  return {"value": result["value"], "low": result["low"], "high": result["high"]}


def breakdown(records: Sequence[Mapping], key: str, *, seed: int = 0) -> dict[str, dict]:
  """Accuracy with CI grouped by a metadata field (e.g. ASQ "pair_type"); "" groups are skipped."""
  groups: dict[str, list[bool]] = {}
  for record in records:
    if record.get(key):
      groups.setdefault(str(record[key]), []).append(is_correct(record))
  return {name: {**_entry(values, seed), "n": len(values)} for name, values in sorted(groups.items())}
