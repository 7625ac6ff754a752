"""TuringAdvice analysis against numbers recomputed here from the raw JSON lines, and against the
paper's figures where the 100 situations here (the first half of the paper's 200) allow."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from t5_tasks.analysis import turingadvice
from t5_tasks.sources import turingadvice as turingadvice_source
from t5_tasks.sources.turingadvice import read_turingadvice_eval

FILE = "turingadvice/feb-14-2020_first100.jsonl"


@pytest.fixture
def raw_and_analysis(shared_data):
  path = shared_data / FILE
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  situations, _ = read_turingadvice_eval(str(path))
  return rows, situations, turingadvice.analyze(situations, seed=1)


def _raw_score(rating) -> float:
  """Appendix C, by hand: +-1 for "definitely" (2), +-0.5 for "slightly" (1), averaged."""
  magnitudes = [1.0 if d["q1_intensifier"] == 2 else 0.5 for d in rating["diagnostics"]]
  return (1 if rating["is_preferred"] else -1) * sum(magnitudes) / len(magnitudes)


def test_preference_rates_equal_raw_counts(raw_and_analysis):
  rows, _, result = raw_and_analysis
  systems = list(rows[0]["turk_ratings"])
  assert result["systems"] == systems and len(systems) == 6
  for system in systems:
    wins = sum(row["turk_ratings"][system]["is_preferred"] for row in rows)
    rate = result["preference_rates"][system]
    assert rate["value"] == pytest.approx(wins / len(rows))
    assert rate["n"] == len(rows)
    assert rate["low"] <= rate["value"] <= rate["high"]
    # The percentile bootstrap of a proportion is close to the normal interval.
    half_width = 1.96 * math.sqrt(rate["value"] * (1 - rate["value"]) / len(rows))
    assert rate["high"] - rate["low"] == pytest.approx(2 * half_width, abs=0.04)


def test_continuous_scores_follow_appendix_c(raw_and_analysis):
  rows, situations, result = raw_and_analysis
  scores = turingadvice.continuous_scores(situations)
  for row in rows:
    for system, rating in row["turk_ratings"].items():
      assert scores[system][row["situation"]["id"]] == pytest.approx(_raw_score(rating))
  for system in rows[0]["turk_ratings"]:
    expected = np.mean([_raw_score(row["turk_ratings"][system]) for row in rows])
    assert result["continuous_scores"][system]["value"] == pytest.approx(expected)


def test_fig5_improvements_are_preference_rate_points_with_paired_t_tests(raw_and_analysis):
  rows, _, result = raw_and_analysis
  tests = {(r["a"], r["b"]): r for r in result["improvements"]}
  systems = list(rows[0]["turk_ratings"])
  assert len(tests) == len(systems) * (len(systems) - 1)
  for (a, b), row in tests.items():
    won = {s: sum(r["turk_ratings"][s]["is_preferred"] for r in rows) for s in (a, b)}
    assert row["improvement"] == pytest.approx(100 * (won[a] - won[b]) / len(rows))
    d = np.array([_raw_score(r["turk_ratings"][a]) - _raw_score(r["turk_ratings"][b]) for r in rows])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    p = 2 * stats.t.sf(abs(t), df=len(d) - 1)
    assert row["continuous_difference"] == pytest.approx(d.mean())
    assert row["t"] == pytest.approx(t)
    assert row["p"] == pytest.approx(p, rel=1e-6)
    assert tests[(b, a)]["t"] == pytest.approx(-t)
  # The paper's Fig. 5 (200 situations): T5-11B over T5-3B +3 points (not significant), over
  # Grover-Mega +5 (p < .01). The first 100 here give +2 over each (7, 5 and 5 wins), neither
  # significant: the paper's values need the other 100 situations, which are not here.
  assert tests[("T5-11B", "T5-3B")]["improvement"] == pytest.approx(2)
  assert tests[("T5-11B", "T5-3B")]["p"] > 0.05


def test_rates_by_domain_equal_raw_counts(raw_and_analysis):
  rows, _, result = raw_and_analysis
  relationships = {"relationships", "relationship_advice", "dating_advice", "dating", "Marriage", "love"}
  # Fig. 10's caption lists each domain's subreddits; r/Advice is in none of them.
  for domain, members in [("legal", {"legaladvice"}), ("relationships", relationships),
                          ("life", {"internetparents", "needadvice", "techsupport"}), ("other", {"Advice"})]:
    in_domain = [r for r in rows if r["situation"]["subreddit"] in members]
    assert result["by_domain"][domain]["n_situations"] == len(in_domain)
    for system in rows[0]["turk_ratings"]:
      wins = sum(r["turk_ratings"][system]["is_preferred"] for r in in_domain)
      assert result["by_domain"][domain]["rates"][system]["value"] == pytest.approx(wins / len(in_domain))
  assert sum(d["n_situations"] for d in result["by_domain"].values()) == len(rows)
  assert result["by_domain"]["other"]["n_situations"] == 7 and turingadvice.domain_of("Advice") == "other"


def _majority_category(diagnostics) -> dict[str, float]:
  """By hand: the helpfulness most workers chose (dangerous counted as not helpful), then the
  justification most of those chose; a tie splits the piece of advice's weight."""
  helpfulness = ["slightly" if d["q2_helpful_or_not"] in ("helpful", "slightlyhelpful") else "not"
                 for d in diagnostics]
  top = [h for h in set(helpfulness) if helpfulness.count(h) == max(map(helpfulness.count, helpfulness))]
  weights = {}
  for h in top:
    reasons = [d["q3_justification"] for d, x in zip(diagnostics, helpfulness) if x == h]
    best = [j for j in set(reasons) if reasons.count(j) == max(map(reasons.count, reasons))]
    for j in best:
      weights[(h, j)] = 1 / (len(top) * len(best))
  return weights


def test_fig7_shares_are_per_piece_of_advice(raw_and_analysis):
  rows, _, result = raw_and_analysis
  names = {("slightly", "meaning"): "slightly helpful / meaning problem",
           ("slightly", "writing"): "slightly helpful / writing problem",
           ("not", "neutral"): "not helpful / possibly helpful", ("not", "contradiction"): "not helpful / never helpful"}
  for system in rows[0]["turk_ratings"]:
    lost = [r["turk_ratings"][system]["diagnostics"] for r in rows if not r["turk_ratings"][system]["is_preferred"]]
    got = result["diagnostics"][system]
    assert (got["n"], got["n_ratings"]) == (len(lost), sum(map(len, lost)))
    for key, name in names.items():
      assert got["shares"][name] == pytest.approx(sum(_majority_category(d).get(key, 0) for d in lost) / len(lost))
    assert sum(got["shares"].values()) == pytest.approx(1.0)
  # §5.1 and Fig. 7's caption (200 situations): the retrieval baseline's advice is irrelevant
  # (possibly helpful elsewhere) 84% of the time and never helpful 4%; the first 100 give 82 of 98
  # pieces, 0.837 and 0.041. (Per worker rating it would be 0.78.) The paper's T5-11B figures
  # disagree with each other (never helpful: 31% in the caption, 26% in §5.1) and are not tested.
  retrieval = result["diagnostics"]["retrieval"]["shares"]
  assert round(100 * retrieval["not helpful / possibly helpful"]) == 84
  assert round(100 * retrieval["not helpful / never helpful"]) == 4


def test_a_tie_between_two_workers_splits_the_advice():
  diagnostic = lambda h, j: turingadvice_source.Diagnostic(1, h, j)
  weights = turingadvice.advice_categories([diagnostic("nothelpful", "neutral"), diagnostic("dangerous", "contradiction")])
  assert weights == {"not helpful / possibly helpful": 0.5, "not helpful / never helpful": 0.5}
  weights = turingadvice.advice_categories([diagnostic("slightlyhelpful", "writing"), diagnostic("nothelpful", "neutral"),
                                            diagnostic("nothelpful", "neutral")])
  assert weights == {"not helpful / possibly helpful": 1.0}


def test_domain_of_unknown_subreddit_is_other():
  assert turingadvice.domain_of("legaladvice") == "legal"
  assert turingadvice.domain_of("cooking") == turingadvice.OTHER_DOMAIN
