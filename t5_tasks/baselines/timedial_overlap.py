"""TimeDial option-in-context: prefer options whose words occur in the dialog.

The TimeDial paper's point: this phrase matching solves many items but walks
into the Rule 1 distractors, which were built to copy the dialog's phrases.
"""
from typing import Mapping, Sequence

import numpy as np
from sklearn.feature_extraction import text as sk_text

from t5_tasks.analysis import mean_interval
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


def top_two(scores: Sequence[float]) -> list[int]:
  """Indices of the two best scores; a stable sort keeps the earlier candidate on ties."""
  return [int(i) for i in np.argsort(-np.asarray(scores), kind="stable")[:2]]


def predict(items: Sequence[CandidateItem]) -> list[dict]:
  records = []
  for item in items:
    scores = [option_in_context(item.context, c) for c in item.candidates]
    records.append({**prediction_record(item, scores), "top2": top_two(scores)})
  return records


def metrics(records: Sequence[Mapping], *, seed: int = 0) -> dict:
  """Two-best accuracy (both correct options ranked first) and top-1 accuracy, by task."""
  by_task: dict[str, dict[str, list[bool]]] = {}
  for r in records:
    values = by_task.setdefault(r["task"], {"two_best_accuracy": [], "accuracy": []})
    values["two_best_accuracy"].append(all(r["gold"][i] == 1 for i in r["top2"]))
    values["accuracy"].append(r["gold"][r["prediction"]] == 1)
  return {task: {name: {k: v for k, v in mean_interval(vals, seed=seed).items() if k in ("value", "low", "high")}
                 for name, vals in values.items()}
          for task, values in by_task.items()}


def error_rate_by_rule(records: Sequence[Mapping], *, seed: int = 0) -> dict[str, dict]:
  """For each rule, the share of its incorrect options ranked among the top two."""
  by_rule: dict[str, list[bool]] = {}
  for r in records:
    for index, rule in enumerate(r["candidate_rules"]):
      if rule:
        by_rule.setdefault(rule, []).append(index in r["top2"])
  return {rule: mean_interval(values, seed=seed) for rule, values in sorted(by_rule.items())}
