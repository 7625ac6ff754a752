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


def _label(d, dangerous_apart: bool = False) -> tuple[str, str]:
  """A worker's diagnostic: (helpfulness, justification), Dangerous counted as not helpful (fn. 10)."""
  h = d["q2_helpful_or_not"]
  h = "slightly" if h in ("helpful", "slightlyhelpful") else "dangerous" if dangerous_apart and h == "dangerous" else "not"
  return h, d["q3_justification"]


def _modes(values):
  return [v for v in set(values) if values.count(v) == max(map(values.count, values))]


def _majority_category(diagnostics, dangerous_apart: bool = False) -> dict[tuple, float]:
  """By hand: the helpfulness most workers chose (dangerous counted as not helpful), then the
  justification most of those chose; a tie splits the piece of advice's weight."""
  labels = [_label(d, dangerous_apart) for d in diagnostics]
  top = _modes([h for h, _ in labels])
  weights = {}
  for h in top:
    for j in (best := _modes([j for x, j in labels if x == h])):
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
    assert (got["n"], got["n_ratings"], got["n_situations"]) == (len(lost), sum(map(len, lost)), len(rows))
    for key, name in names.items():
      assert got["shares"][name] == pytest.approx(sum(_majority_category(d).get(key, 0) for d in lost) / len(lost))
      interval = got["intervals"][name]
      assert interval["value"] == pytest.approx(got["shares"][name]) and interval["n"] == len(lost)
      assert interval["low"] <= interval["value"] <= interval["high"]
    assert sum(got["shares"].values()) == pytest.approx(1.0)
  # §5.1 and Fig. 7's caption (the round's 200 situations): the retrieval baseline's advice is
  # irrelevant (possibly helpful elsewhere) 84% of the time and never helpful 4%; the first 100 give
  # 82 of 98 pieces, 0.837 and 0.041. (Per worker rating it would be 0.78.) On the whole round the
  # 84% is not reached (issue 51), nor are the generators' figures: see the test below.
  retrieval = result["diagnostics"]["retrieval"]["shares"]
  assert round(100 * retrieval["not helpful / possibly helpful"]) == 84
  assert round(100 * retrieval["not helpful / never helpful"]) == 4


_NEVER, _POSSIBLY = ("not", "contradiction"), ("not", "neutral")
# A tie broken by severity (the paper names no rule): never > possibly helpful > slightly helpful.
_SEVERITY = {("slightly", "writing"): 0, ("slightly", "meaning"): 1, _POSSIBLY: 2, _NEVER: 3}


def _tie_to(pick):
  def weigh(diagnostics):
    weights = _majority_category(diagnostics)
    return {pick(weights, key=_SEVERITY.get): 1.0}
  return weigh


def _one_vote(diagnostics):
  best = _modes([_label(d) for d in diagnostics])
  return {label: 1 / len(best) for label in best}


def _averaged(diagnostics):
  labels = [_label(d) for d in diagnostics]
  return {label: labels.count(label) / len(labels) for label in set(labels)}


def _per_advice(weigh, over_all: bool = False):
  """Shares of pieces of advice, each weighed by `weigh`, over the advice that lost (or all of the
  system's advice, the preferred in no category)."""
  def shares(rows, system):
    ratings = [r["turk_ratings"][system] for r in rows]
    counted = ratings if over_all else [t for t in ratings if not t["is_preferred"]]
    weights = [weigh(t["diagnostics"]) for t in counted if not t["is_preferred"]]
    return [sum(w.get(label, 0) for w in weights) / len(counted) for label in (_NEVER, _POSSIBLY)], len(counted)
  return shares


def _per_worker(three_a_situation: bool = False):
  """Shares of worker ratings: the majority workers of the advice that lost, over their number (or
  over three a situation: the minority workers' ratings of preferred advice are not released)."""
  def shares(rows, system):
    lost = [r["turk_ratings"][system]["diagnostics"] for r in rows if not r["turk_ratings"][system]["is_preferred"]]
    labels = [_label(d) for diagnostics in lost for d in diagnostics]
    denominator = 3 * len(rows) if three_a_situation else len(labels)
    return [labels.count(label) / denominator for label in (_NEVER, _POSSIBLY)], (len(rows) if three_a_situation
                                                                                  else len(lost))
  return shares


# The paper's Fig. 7 in words (§5.1; the caption's 31% and 4% for T5-11B's and retrieval's "never
# helpful"): the figures the definitions below are held against.
_PAPER = {"retrieval": ((3, 4), (84,)), "grover-mega": ((29,), (32,)), "T5-11B": ((26, 31), (21,))}
# {definition: (its shares, its (never, possibly helpful) % for retrieval, Grover-Mega, T5-11B on
# these 100 situations, whether all the paper's figures are within twice the sampling error of half
# the round)}: the table of the module's docstring and of docs/evaluation.md.
_DEFINITIONS = {
    "kept: advice, majority, tie split, lost": (_per_advice(_majority_category), ((4, 84), (39, 25), (33, 16)), False),
    "advice, majority, all the system's advice": (_per_advice(_majority_category, over_all=True),
                                                  ((4, 82), (37, 24), (31, 15)), False),
    "advice, one vote over the four labels": (_per_advice(_one_vote), ((4, 84), (39, 24), (34, 17)), False),
    "advice, Dangerous a level of its own": (_per_advice(lambda d: _majority_category(d, dangerous_apart=True)),
                                             ((4, 84), (37, 24), (32, 16)), False),
    "advice, its workers' labels averaged": (_per_advice(_averaged), ((10, 78), (35, 29), (31, 18)), False),
    "majority workers' ratings, lost": (_per_worker(), ((10, 78), (35, 30), (31, 18)), False),
    "worker ratings, three a situation": (_per_worker(three_a_situation=True), ((9, 75), (32, 27), (27, 16)), False),
    "advice, majority, tie to the severer": (_per_advice(_tie_to(max)), ((5, 84), (46, 20), (40, 13)), False),
    "advice, majority, tie to the milder": (_per_advice(_tie_to(min)), ((3, 84), (32, 29), (27, 19)), True),
}


@pytest.mark.parametrize("name", _DEFINITIONS)
def test_fig7_definitions_tried_give_the_documented_figures(shared_data, name):
  """Issue 51: no definition the paper's words allow gives its Fig. 7 figures. Each stated one
  misses one of them by over twice the sampling error of these 100 situations as half of the
  paper's round of 200, sqrt(p(1 - p) / 2n) for n pieces of advice here; the one that fits, a tie
  to the milder label, is a rule the paper never states, found on these very situations."""
  rows = [json.loads(line) for line in open(shared_data / FILE, encoding="utf-8")]
  shares, documented, fits = _DEFINITIONS[name]
  worst = 0.0
  for system, expected in zip(_PAPER, documented):
    (never, possibly), n = shares(rows, system)
    assert (round(100 * never), round(100 * possibly)) == expected, system
    for value, paper in zip((never, possibly), _PAPER[system]):
      sampling_error = math.sqrt(value * (1 - value) / (2 * n))
      worst = max(worst, min(abs(value - p / 100) for p in paper) / sampling_error)
  assert (worst <= 2) == fits and (worst < 1 or not fits), worst


def test_analyze_says_which_population_its_figures_are_over(raw_and_analysis):
  rows, _, result = raw_and_analysis
  assert result["population"] == turingadvice.population(len(rows))
  assert result["population"]["text"] == "100 situations, not the whole round (the paper's figures: all 200)"
  whole = turingadvice.population(200)
  assert whole["whole_round"] and not result["population"]["whole_round"]
  fig7 = result["paper_fig7"]
  assert [f["percent"] for f in fig7["T5-11B"]["not helpful / never helpful"]] == [26, 31]
  assert [f["percent"] for f in fig7["retrieval"]["not helpful / possibly helpful"]] == [84]


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
