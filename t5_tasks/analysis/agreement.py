"""Agreement between judges of pairwise comparisons, as summarize-from-feedback reports.

Items are `CandidateItem`s oriented [human-preferred, other]. A judge is any
scorer giving each of the two responses a number; on each item it picks the
higher one (a tie is a coin flip). Agreement of two judges on an item is the
probability that they pick the same response.
"""
from typing import Mapping, Sequence

import numpy as np
from scipy import stats
from sklearn import linear_model

from t5_tasks.analysis import mean_interval
from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import preference_heuristics

HUMANS = "humans"


def picks_preferred(scores) -> np.ndarray:
  """[N] probability that a judge with these [N, 2] scores picks response 0."""
  scores = np.asarray(scores, dtype=np.float64)
  if scores.ndim != 2 or scores.shape[1] != 2:
    raise ValueError(f"scores must be [items, 2]; got shape {scores.shape}")
  return (scores[:, 0] > scores[:, 1]) + 0.5 * (scores[:, 0] == scores[:, 1])


def agreement_rates(judge_scores: Mapping[str, Sequence[Sequence[float]]], *, seed: int = 0) -> dict:
  """Agreement of every judge with the humans and with each other, bootstrap CI and SE.

  Returns {"with_humans": {judge: interval}, "between": {a: {b: interval}}} (a != b).
  """
  picks = {HUMANS: None, **{name: picks_preferred(s) for name, s in judge_scores.items()}}
  sizes = {len(p) for p in picks.values() if p is not None}
  if len(sizes) != 1:
    raise ValueError(f"judges score different numbers of items: {sorted(sizes)}")
  n = sizes.pop()
  picks[HUMANS] = np.ones(n)
  names = list(picks)
  between = {a: {} for a in names}
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      same = picks[a] * picks[b] + (1 - picks[a]) * (1 - picks[b])
      between[a][b] = between[b][a] = mean_interval(same, seed=seed)
  return {"with_humans": {name: between[name][HUMANS] for name in names if name != HUMANS},
          "between": between}


def heuristic_scores(items: Sequence[CandidateItem]) -> dict[str, list[list[float]]]:
  """Scores of the length and copying heuristics on the items."""
  return {name: preference_heuristics.score_items(items, scorer)
          for name, scorer in preference_heuristics.SCORERS.items()}


def scores_from_predictions(items: Sequence[CandidateItem], predictions: Sequence[Mapping],
                            name: str = "predictions") -> list[list[float]]:
  """A scorer's [preferred, other] scores from its prediction records, matched by item id."""
  by_id = {}
  for p in predictions:
    if sorted(p["gold"]) != [0, 1]:
      raise ValueError(f"{name}: item {p['id']!r} is not a two-candidate preference item")
    if p["id"] in by_id:
      raise ValueError(f"{name}: item id {p['id']!r} repeats, so predictions cannot be matched to items")
    good = p["gold"].index(1)
    by_id[p["id"]] = [p["scores"][good], p["scores"][1 - good]]
  missing = [it.id for it in items if it.id not in by_id]
  if missing:
    raise ValueError(f"{name}: no prediction for {len(missing)} items, e.g. {missing[0]!r}")
  return [by_id[it.id] for it in items]


def _log_length_ratio(a: str, b: str) -> float:
  length = preference_heuristics.response_length
  return float(np.log(max(length("", a), 1.0) / max(length("", b), 1.0)))


def _preference_at_equal_length(log_ratio, chose_a, axis=-1) -> float:
  del axis
  if chose_a.min() == chose_a.max():
    return float(chose_a[0])  # One outcome only: the regression's limit is that outcome.
  model = linear_model.LogisticRegression(C=np.inf).fit(log_ratio[:, None], chose_a)  # Unpenalised.
  return float(model.predict_proba([[0.0]])[0, 1])


def length_controlled_preference(items: Sequence[CandidateItem], system_a: str, system_b: str,
                                 *, seed: int = 0, n_resamples: int = 200) -> dict:
  """How often humans prefer system_a over system_b, raw and at equal length.

  A logistic regression of "chose a" on log(len a / len b) with an intercept (the
  systems' identity) is read at log ratio 0. Items need metadata "systems".
  """
  log_ratio, chose_a = [], []
  for it in items:
    systems = list(it.metadata.get("systems", ()))
    if sorted(systems) != sorted([system_a, system_b]):
      continue
    a = systems.index(system_a)
    log_ratio.append(_log_length_ratio(it.candidates[a], it.candidates[1 - a]))
    chose_a.append(float(a == 0))
  if len(chose_a) < 2:
    raise ValueError(f"fewer than 2 comparisons between {system_a!r} and {system_b!r}")
  x, y = np.asarray(log_ratio), np.asarray(chose_a)
  controlled = stats.bootstrap((x, y), _preference_at_equal_length, paired=True, vectorized=False,
                               n_resamples=n_resamples, method="percentile",
                               rng=np.random.default_rng(seed))
  return {
      "a": system_a, "b": system_b, "n": len(y),
      "raw": mean_interval(y, seed=seed),
      "length_controlled": {"value": _preference_at_equal_length(x, y),
                            "low": float(controlled.confidence_interval.low),
                            "high": float(controlled.confidence_interval.high),
                            "se": float(controlled.standard_error)},
      "mean_log_length_ratio": float(x.mean()),
  }
