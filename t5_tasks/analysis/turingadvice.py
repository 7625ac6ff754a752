"""The TuringAdvice human evaluation, recomputed from the released ratings.

Works on `t5_tasks.sources.turingadvice.TuringAdviceSituation` records (any
objects with `id`, `subreddit` and `ratings: {system: TurkRating}`).
"""
import itertools
from typing import Sequence

import numpy as np
from scipy import stats

from t5_tasks.analysis import mean_interval

DOMAINS = {
    "relationships": ("relationships", "relationship_advice", "dating_advice", "dating", "Marriage", "love"),
    "legal": ("legaladvice",),
    "life": ("internetparents", "needadvice", "techsupport", "Advice"),
}
OTHER_DOMAIN = "other"

# Diagnostics describe the advice that lost; for a system that is its own advice
# only where the Reddit advice was preferred, so only those ratings are counted.
_HELPFULNESS = {"helpful": "slightly helpful", "slightlyhelpful": "slightly helpful",
                "nothelpful": "not helpful", "dangerous": "dangerous"}
_JUSTIFICATION = {
    "slightly helpful": {"meaning": "meaning problem", "writing": "writing problem"},
    "not helpful": {"neutral": "possibly helpful", "contradiction": "never helpful"},
    "dangerous": {"neutral": "possibly helpful", "contradiction": "never helpful"},
}
DIAGNOSTIC_CATEGORIES = tuple(f"{h} / {j}" for h, js in _JUSTIFICATION.items() for j in js.values())


def domain_of(subreddit: str) -> str:
  for domain, subreddits in DOMAINS.items():
    if subreddit in subreddits:
      return domain
  return OTHER_DOMAIN


def systems_of(situations: Sequence) -> list[str]:
  """Every rated system, in order of first appearance."""
  return list(dict.fromkeys(s for situation in situations for s in situation.ratings))


def continuous_scores(situations: Sequence) -> dict[str, dict[str, float]]:
  """{system: {situation id: continuous score}} by the paper's appendix C rule.

  `TurkRating.preference_score`: the mean over the majority workers of +-1.0
  ("definitely") or +-0.5 ("slightly"), + when the system's advice was preferred.
  """
  scores: dict[str, dict[str, float]] = {}
  for situation in situations:
    for system, rating in situation.ratings.items():
      scores.setdefault(system, {})[situation.id] = rating.preference_score()
  return scores


def preference_rates(situations: Sequence, *, seed: int = 0) -> dict[str, dict]:
  """{system: share of situations where it beat the top Reddit advice, with 95% CI}."""
  return {
      system: mean_interval([s.ratings[system].is_preferred for s in situations if system in s.ratings],
                            seed=seed)
      for system in systems_of(situations)
  }


def mean_continuous_scores(situations: Sequence, *, seed: int = 0) -> dict[str, dict]:
  return {system: mean_interval(list(by_id.values()), seed=seed)
          for system, by_id in continuous_scores(situations).items()}


def paired_ttests(situations: Sequence) -> list[dict]:
  """Paired t-test of continuous scores for every ordered pair of systems.

  `difference` is the mean of (a - b) over the situations both were rated on.
  """
  scores = continuous_scores(situations)
  rows = []
  for a, b in itertools.permutations(scores, 2):
    shared = [i for i in scores[a] if i in scores[b]]
    x = np.array([scores[a][i] for i in shared])
    y = np.array([scores[b][i] for i in shared])
    result = stats.ttest_rel(x, y)
    rows.append({"a": a, "b": b, "n": len(shared), "difference": float(np.mean(x - y)),
                 "t": float(result.statistic), "p": float(result.pvalue)})
  return rows


def diagnostic_category(diagnostic, where: str = "") -> str:
  helpfulness = _HELPFULNESS.get(diagnostic.q2_helpful_or_not)
  if helpfulness is None:
    raise ValueError(f"{where}: unknown q2_helpful_or_not {diagnostic.q2_helpful_or_not!r}")
  justification = _JUSTIFICATION[helpfulness].get(diagnostic.q3_justification)
  if justification is None:
    raise ValueError(f"{where}: q3_justification {diagnostic.q3_justification!r} "
                     f"does not go with {diagnostic.q2_helpful_or_not!r}")
  return f"{helpfulness} / {justification}"


def diagnostic_distribution(situations: Sequence) -> dict[str, dict]:
  """{system: {"n": ratings counted, "shares": {category: share}}} over lost situations."""
  result = {}
  for system in systems_of(situations):
    counts = dict.fromkeys(DIAGNOSTIC_CATEGORIES, 0)
    for situation in situations:
      rating = situation.ratings.get(system)
      if rating is None or rating.is_preferred:
        continue
      for diagnostic in rating.diagnostics:
        counts[diagnostic_category(diagnostic, f"situation {situation.id!r}, system {system!r}")] += 1
    total = sum(counts.values())
    result[system] = {"n": total, "shares": {c: (n / total if total else 0.0) for c, n in counts.items()}}
  return result


def preference_rates_by_domain(situations: Sequence, *, seed: int = 0) -> dict[str, dict]:
  """{domain: {"n_situations": n, "rates": {system: rate with CI}}}; empty domains left out."""
  by_domain: dict[str, list] = {}
  for situation in situations:
    by_domain.setdefault(domain_of(situation.subreddit), []).append(situation)
  order = list(DOMAINS) + [OTHER_DOMAIN]
  return {d: {"n_situations": len(by_domain[d]), "rates": preference_rates(by_domain[d], seed=seed)}
          for d in order if d in by_domain}


def analyze(situations: Sequence, *, seed: int = 0) -> dict:
  """Every table of the TuringAdvice evaluation, as plain JSON-ready data."""
  if not situations:
    raise ValueError("no situations to analyze")
  return {
      "n_situations": len(situations),
      "systems": systems_of(situations),
      "preference_rates": preference_rates(situations, seed=seed),
      "continuous_scores": mean_continuous_scores(situations, seed=seed),
      "paired_ttests": paired_ttests(situations),
      "diagnostics": diagnostic_distribution(situations),
      "by_domain": preference_rates_by_domain(situations, seed=seed),
  }
