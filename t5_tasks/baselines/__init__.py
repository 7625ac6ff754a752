"""The papers' simple baselines, evaluable like a model.

Each baseline scores the candidates of `CandidateItem`s (or, for advice
retrieval, generates text); `prediction_record` turns scores into the shared
predictions.jsonl format of `runner.outputs`.
"""
import dataclasses
from typing import Mapping, Sequence

import numpy as np

from t5_tasks import metrics as t5_metrics


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


def accuracy_metrics(records: Sequence[Mapping], *, by: str | None = None, seed: int = 0) -> dict[str, dict]:
  """{"accuracy": interval} over the records, plus "accuracy/<group>" per value of metadata `by`.

  Ties between candidate scores count as broken at random, as in model evaluation.
  """
  scores = np.asarray([r["scores"] for r in records])
  labels = np.asarray([r["gold"] for r in records])
  result = {"accuracy": t5_metrics.accuracy(scores, labels, seed=seed).as_dict()}
  for group in sorted({r.get(by, "") for r in records} - {""}) if by else ():
    rows = np.asarray([r.get(by) == group for r in records])
    result[f"accuracy/{group}"] = t5_metrics.accuracy(scores[rows], labels[rows], seed=seed).as_dict()
  return result
