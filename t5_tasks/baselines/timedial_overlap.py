"""TimeDial option-in-context: prefer options whose words occur in the dialog.

The TimeDial paper's point: this phrase matching solves many items but walks
into the Rule 1 distractors, which were built to copy the dialog's phrases.
"""
from typing import Mapping, Sequence

import numpy as np
from sklearn.feature_extraction import text as sk_text

from t5_tasks import metrics as t5_metrics
from t5_tasks.baselines import CandidateItem, prediction_record

_WORDS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b").build_analyzer()


def option_in_context(dialog: str, option: str) -> float:
  """Share of the option's words that occur somewhere in the dialog."""
  words = _WORDS(option)
  if not words:
    return 0.0
  vocabulary = set(_WORDS(dialog))
  return sum(w in vocabulary for w in words) / len(words)


def items_from_timedial(items: Sequence, task: str = "timedial") -> list[CandidateItem]:
  """TimeDialItems as 4 candidates: the two correct, then the two incorrect."""
  return [CandidateItem(task, it.id, "\n".join(it.conversation),
                        tuple(it.correct) + tuple(it.incorrect), (1, 1, 0, 0),
                        {"candidate_rules": ["", ""] + list(it.incorrect_rules)})
          for it in items]


def predict(items: Sequence[CandidateItem]) -> list[dict]:
  return [prediction_record(item, [option_in_context(item.context, c) for c in item.candidates])
          for item in items]


def metrics(records: Sequence[Mapping], *, seed: int = 0) -> dict:
  """{task: two-best accuracy, accuracy, and error rate per rule}, ties broken at random."""
  by_task: dict[str, list[Mapping]] = {}
  for r in records:
    by_task.setdefault(r["task"], []).append(r)
  result = {}
  for task, rows in by_task.items():
    scores = np.asarray([r["scores"] for r in rows])
    labels = np.asarray([r["gold"] for r in rows])
    result[task] = {
        "two_best_accuracy": t5_metrics.two_best_accuracy(scores, labels, seed=seed).as_dict(),
        "accuracy": t5_metrics.accuracy(scores, labels, seed=seed).as_dict(),
    }
    for rule, estimate in t5_metrics.rule_error_rates(
        scores, labels, [r["candidate_rules"] for r in rows], seed=seed).items():
      result[task][f"error_rate/{rule}"] = estimate.as_dict()
  return result
