"""TuringAdvice analysis against numbers recomputed here from the raw JSON lines."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from t5_tasks.analysis import turingadvice
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


def test_paired_t_tests_equal_hand_formula(raw_and_analysis):
  rows, _, result = raw_and_analysis
  tests = {(r["a"], r["b"]): r for r in result["paired_ttests"]}
  systems = list(rows[0]["turk_ratings"])
  assert len(tests) == len(systems) * (len(systems) - 1)
  for (a, b), row in tests.items():
    d = np.array([_raw_score(r["turk_ratings"][a]) - _raw_score(r["turk_ratings"][b]) for r in rows])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    p = 2 * stats.t.sf(abs(t), df=len(d) - 1)
    assert row["difference"] == pytest.approx(d.mean())
    assert row["t"] == pytest.approx(t)
    assert row["p"] == pytest.approx(p, rel=1e-6)
    assert tests[(b, a)]["t"] == pytest.approx(-t)


def test_rates_by_domain_equal_raw_counts(raw_and_analysis):
  rows, _, result = raw_and_analysis
  relationships = {"relationships", "relationship_advice", "dating_advice", "dating", "Marriage", "love"}
  for domain, members in [("legal", {"legaladvice"}), ("relationships", relationships),
                          ("life", {"internetparents", "needadvice", "techsupport", "Advice"})]:
    in_domain = [r for r in rows if r["situation"]["subreddit"] in members]
    assert result["by_domain"][domain]["n_situations"] == len(in_domain)
    for system in rows[0]["turk_ratings"]:
      wins = sum(r["turk_ratings"][system]["is_preferred"] for r in in_domain)
      assert result["by_domain"][domain]["rates"][system]["value"] == pytest.approx(wins / len(in_domain))
  assert sum(d["n_situations"] for d in result["by_domain"].values()) == len(rows)


def test_diagnostics_count_majority_ratings_of_lost_situations(raw_and_analysis):
  rows, _, result = raw_and_analysis
  for system in ("T5-11B", "grover-mega"):
    ratings = [d for r in rows if not r["turk_ratings"][system]["is_preferred"]
               for d in r["turk_ratings"][system]["diagnostics"]]
    got = result["diagnostics"][system]
    assert got["n"] == len(ratings)
    writing = sum(d["q2_helpful_or_not"] in ("helpful", "slightlyhelpful") and d["q3_justification"] == "writing"
                  for d in ratings)
    never = sum(d["q2_helpful_or_not"] == "nothelpful" and d["q3_justification"] == "contradiction"
                for d in ratings)
    assert got["shares"]["slightly helpful / writing problem"] == pytest.approx(writing / len(ratings))
    assert got["shares"]["not helpful / never helpful"] == pytest.approx(never / len(ratings))
    assert sum(got["shares"].values()) == pytest.approx(1.0)


def test_domain_of_unknown_subreddit_is_other():
  assert turingadvice.domain_of("legaladvice") == "legal"
  assert turingadvice.domain_of("cooking") == turingadvice.OTHER_DOMAIN
