"""The TuringAdvice human evaluation, recomputed from the released ratings: preference
rates (Fig. 4), improvements between systems with their significance (Fig. 5), the
diagnostics of lost advice (Fig. 7) and rates by domain (Fig. 10).

Works on `t5_tasks.sources.turingadvice.TuringAdviceSituation` records (any
objects with `id`, `subreddit` and `ratings: {system: TurkRating}`).
"""
import collections
import itertools
from typing import Sequence

import numpy as np
from scipy import stats

from t5_tasks.analysis import mean_interval

# Fig. 10's caption lists each domain's subreddits; r/Advice is in none of its lists (though
# §A.1 collects it), so its situations go to OTHER_DOMAIN.
DOMAINS = {
    "relationships": ("relationships", "relationship_advice", "dating_advice", "dating", "Marriage", "love"),
    "legal": ("legaladvice",),
    "life": ("internetparents", "needadvice", "techsupport"),
}
OTHER_DOMAIN = "other"

# Diagnostics describe the advice that lost; for a system that is its own advice
# only where the Reddit advice was preferred, so only those ratings are counted.
# Fig. 7 (footnote 10) counts Dangerous with Not helpful.
_HELPFULNESS = {"helpful": "slightly helpful", "slightlyhelpful": "slightly helpful",
                "nothelpful": "not helpful", "dangerous": "not helpful"}
_JUSTIFICATION = {
    "slightly helpful": {"meaning": "meaning problem", "writing": "writing problem"},
    "not helpful": {"neutral": "possibly helpful", "contradiction": "never helpful"},
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


def improvements(situations: Sequence) -> list[dict]:
  """Fig. 5 for every ordered pair of systems (a, b), over the situations both were rated on.

  `improvement`: a's preference rate minus b's, in percentage points (the paper's "absolute
  percentage": T5-11B over T5-3B 3, over Grover-Mega 5); `t`, `p`: appendix C's paired t-test
  on the continuous scores, the significance Fig. 5 marks; `continuous_difference`: the mean of
  (a - b) in those scores, the quantity the t-test is on.
  """
  scores = continuous_scores(situations)
  rows = []
  for a, b in itertools.permutations(scores, 2):
    shared = [s for s in situations if a in s.ratings and b in s.ratings]
    x = np.array([scores[a][s.id] for s in shared])
    y = np.array([scores[b][s.id] for s in shared])
    won_a = np.mean([s.ratings[a].is_preferred for s in shared])
    won_b = np.mean([s.ratings[b].is_preferred for s in shared])
    result = stats.ttest_rel(x, y)
    rows.append({"a": a, "b": b, "n": len(shared), "improvement": float(100 * (won_a - won_b)),
                 "continuous_difference": float(np.mean(x - y)),
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


def _modes(values: Sequence[str]) -> list[str]:
  counts = collections.Counter(values)
  return [v for v, n in counts.items() if n == max(counts.values())]


def advice_categories(diagnostics: Sequence, where: str = "") -> dict[str, float]:
  """One piece of advice's Fig. 7 rating, {category: weight} summing to 1, from its majority
  workers' diagnostics: the helpfulness most of them chose, then among those workers the
  justification most chose (the two levels §5.1's footnote 9 measures agreement on); a tie
  splits the advice's weight equally."""
  categories = [diagnostic_category(d, where).split(" / ") for d in diagnostics]
  weights = {}
  helpful_modes = _modes([h for h, _ in categories])
  for helpfulness in helpful_modes:
    justification_modes = _modes([j for h, j in categories if h == helpfulness])
    for justification in justification_modes:
      weights[f"{helpfulness} / {justification}"] = 1 / (len(helpful_modes) * len(justification_modes))
  return weights


def diagnostic_distribution(situations: Sequence) -> dict[str, dict]:
  """Fig. 7: {system: {"n": pieces of advice rated, "n_ratings": worker ratings,
  "shares": {category: share of the pieces of advice}}} over the situations the system lost.

  Shares are per piece of advice (§5.1: the retrieval baseline's advice is "irrelevant", possibly
  helpful elsewhere, "84% of the time"), not per worker rating (which gives it 0.78 on the first
  100 situations: advice rated by two workers weighs less than advice rated by three).
  """
  result = {}
  for system in systems_of(situations):
    weights = dict.fromkeys(DIAGNOSTIC_CATEGORIES, 0.0)
    pieces = ratings = 0
    for situation in situations:
      rating = situation.ratings.get(system)
      if rating is None or rating.is_preferred or not rating.diagnostics:
        continue
      pieces, ratings = pieces + 1, ratings + len(rating.diagnostics)
      where = f"situation {situation.id!r}, system {system!r}"
      for category, weight in advice_categories(rating.diagnostics, where).items():
        weights[category] += weight
    result[system] = {"n": pieces, "n_ratings": ratings,
                      "shares": {c: (w / pieces if pieces else 0.0) for c, w in weights.items()}}
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
      "improvements": improvements(situations),
      "diagnostics": diagnostic_distribution(situations),
      "by_domain": preference_rates_by_domain(situations, seed=seed),
  }
