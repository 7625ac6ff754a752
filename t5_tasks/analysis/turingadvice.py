"""The TuringAdvice human evaluation, recomputed from the released ratings: preference
rates (Fig. 4), improvements between systems with their significance (Fig. 5), the
diagnostics of lost advice (Fig. 7) and rates by domain (Fig. 10).

Works on `t5_tasks.sources.turingadvice.TuringAdviceSituation` records (any
objects with `id`, `subreddit` and `ratings: {system: TurkRating}`).

Every figure of the paper is over its whole round of 200 situations (§4, Fig. 4's caption);
`analyze` says how many situations its own figures are over (`population`).

Fig. 7 is not reproduced. The paper gives its shares only in words (§5.1 and the caption), and
they disagree with each other (T5-11B never helpful 26% or 31%, retrieval 3% or 4%). The
definitions its words allow, on the 100 situations here, the first half of the round (never /
possibly helpful, %; the paper's figures are over the whole round):

  definition                                                           retrieval grover-mega T5-11B
  the paper (§5.1; the caption's in brackets)                          3(4)/84   29/32       26(31)/21
  per piece of advice, the majority of its workers (helpfulness,
    then justification, fn. 9), a tie split, advice that lost (kept)   4/84      39/25       33/16
  the same over all the system's advice ("26% of T5-11B's advice")     4/82      37/24       31/15
  the same, one vote over the four labels                              4/84      39/24       34/17
  the same, Dangerous a level of its own (fn. 10 joins it to draw)     4/84      37/24       32/16
  per piece of advice, its workers' labels averaged, advice that lost  10/78     35/29       31/18
  per majority worker's rating ("3% of workers"), advice that lost     10/78     35/30       31/18
  per worker, three a situation (minority ratings are not released)    9/75      32/27       27/16
  the majority, a tie to the severer label (the paper names no rule)   5/84      46/20       40/13
  the majority, a tie to the milder label                              3/84      32/29       27/19

Each definition the paper states or implies misses one of its figures by over twice the sampling
error of half the round, sqrt(p(1 - p) / 2n) for n pieces of advice here: the majority ones give
Grover-Mega 37-46% never helpful (29), and on the whole round, where nothing is sampled, the kept
one gives T5-11B and Grover-Mega about 9 points over the paper and retrieval no longer 84% (issue
51, from a file not here); the per-worker ones give retrieval 9-10% never helpful (3-4). Only a tie
to the milder label comes within one sampling error of all six: a rule the paper never states,
found by looking at these 100 situations, so not adopted. docs/evaluation.md says the same.
"""
import collections
import itertools
from typing import Sequence

import numpy as np
from scipy import stats

from t5_tasks.analysis import mean_interval

# §4: "In a single round of evaluation, we retrieve 200 popular Reddit situations"; the paper's
# figures are over all 200 of the round of February 2020 (Fig. 4's caption: "200 shared situations").
PAPER_ROUND_SITUATIONS = 200

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
NEVER_HELPFUL, POSSIBLY_HELPFUL = "not helpful / never helpful", "not helpful / possibly helpful"

# Fig. 7's shares as the paper states them in words (its bars are not in the text), in percent
# of the round of 200, each with where it is stated. §5.1's retrieval advice "often irrelevant
# (84% of the time), it is almost never complete gibberish": possibly helpful elsewhere.
PAPER_FIG7 = {
    "retrieval": {NEVER_HELPFUL: ((3, "§5.1, of workers"), (4, "Fig. 7 caption")),
                  POSSIBLY_HELPFUL: ((84, "§5.1, irrelevant"),)},
    "grover-mega": {NEVER_HELPFUL: ((29, "§5.1"),), POSSIBLY_HELPFUL: ((32, "§5.1"),)},
    "T5-11B": {NEVER_HELPFUL: ((26, "§5.1"), (31, "Fig. 7 caption")), POSSIBLY_HELPFUL: ((21, "§5.1"),)},
}


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


def diagnostic_distribution(situations: Sequence, *, seed: int = 0) -> dict[str, dict]:
  """Fig. 7: {system: {"n": pieces of advice rated, "n_ratings": worker ratings, "n_situations":
  situations the system was rated on, "shares": {category: share of the pieces of advice},
  "intervals": {category: the share with its bootstrapped 95% interval}}} over the situations
  the system lost (§5.1: "Machine-written advice that was not preferred ... can have the following
  ratings").

  Shares are per piece of advice (§5.1: the retrieval baseline's advice is "irrelevant", possibly
  helpful elsewhere, "84% of the time"), not per worker rating (which gives it 0.78 on the first
  100 situations: advice rated by two workers weighs less than advice rated by three). Neither
  reproduces all of the paper's figures: the module's docstring lists the definitions tried.
  """
  result = {}
  for system in systems_of(situations):
    pieces, ratings, rated = [], 0, 0
    for situation in situations:
      rating = situation.ratings.get(system)
      if rating is None:
        continue
      rated += 1
      if rating.is_preferred or not rating.diagnostics:
        continue
      ratings += len(rating.diagnostics)
      pieces.append(advice_categories(rating.diagnostics, f"situation {situation.id!r}, system {system!r}"))
    result[system] = {
        "n": len(pieces), "n_ratings": ratings, "n_situations": rated,
        "shares": {c: (sum(p.get(c, 0.0) for p in pieces) / len(pieces) if pieces else 0.0)
                   for c in DIAGNOSTIC_CATEGORIES},
        "intervals": ({c: mean_interval([p.get(c, 0.0) for p in pieces], seed=seed) for c in DIAGNOSTIC_CATEGORIES}
                      if pieces else {}),
    }
  return result


def population(n_situations: int) -> dict:
  """What a file's figures are over, beside the paper's round of 200 (§4)."""
  if n_situations == PAPER_ROUND_SITUATIONS:
    text = f"{n_situations} situations, a whole round as the paper's figures are"
  elif n_situations < PAPER_ROUND_SITUATIONS:
    text = f"{n_situations} situations, not the whole round (the paper's figures: all {PAPER_ROUND_SITUATIONS})"
  else:
    text = f"{n_situations} situations, more than a round (the paper's figures: one round of {PAPER_ROUND_SITUATIONS})"
  return {"n_situations": n_situations, "paper_round_situations": PAPER_ROUND_SITUATIONS,
          "whole_round": n_situations == PAPER_ROUND_SITUATIONS, "text": text}


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
      "population": population(len(situations)),
      "systems": systems_of(situations),
      "preference_rates": preference_rates(situations, seed=seed),
      "continuous_scores": mean_continuous_scores(situations, seed=seed),
      "improvements": improvements(situations),
      "diagnostics": diagnostic_distribution(situations, seed=seed),
      "paper_fig7": {system: {c: [{"percent": v, "where": w} for v, w in figures] for c, figures in by.items()}
                     for system, by in PAPER_FIG7.items()},
      "by_domain": preference_rates_by_domain(situations, seed=seed),
  }
