"""Agreement between judges and the length-controlled preference, against hand computation."""
import json
import re

import numpy as np
import pytest
from scipy import optimize

from t5_tasks.analysis import agreement
from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import preference_heuristics
from t5_tasks.sources.turingadvice import read_turingadvice_eval


def test_agreement_rates_by_hand():
  # Items are [human-preferred, other]; judge a picks it on items 0, 1; ties on 2; misses 3.
  a = [[2, 1], [5, 0], [1, 1], [0, 3]]
  b = [[2, 1], [0, 5], [0, 1], [0, 3]]
  result = agreement.agreement_rates({"a": a, "b": b})
  assert result["with_humans"]["a"]["value"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
  assert result["with_humans"]["b"]["value"] == pytest.approx(1 / 4)
  # Per item, a and b agree with probability 1, 0, 0.5 (a's coin flip), 1.
  assert result["between"]["a"]["b"]["value"] == pytest.approx(2.5 / 4)
  assert result["between"]["b"]["a"] == result["between"]["a"]["b"]
  assert "a" not in result["between"]["a"]
  assert result["between"]["humans"]["b"] == result["with_humans"]["b"]
  assert result["with_humans"]["a"]["se"] > 0


def test_agreement_needs_equal_item_counts():
  with pytest.raises(ValueError, match="different numbers of items"):
    agreement.agreement_rates({"a": [[1, 0]], "b": [[1, 0], [0, 1]]})


def test_scores_from_predictions_orient_by_gold():
  items = [CandidateItem("p", "x", "", ("g", "b"), (1, 0)), CandidateItem("p", "y", "", ("g", "b"), (1, 0))]
  predictions = [{"id": "y", "scores": [0.1, 0.9], "gold": [0, 1]},
                 {"id": "x", "scores": [3, 4], "gold": [1, 0]}]
  assert agreement.scores_from_predictions(items, predictions) == [[3, 4], [0.9, 0.1]]
  with pytest.raises(ValueError, match="no prediction for 1 items, e.g. 'x'"):
    agreement.scores_from_predictions(items, predictions[:1], "rm")


def _items(lengths_a, lengths_b, chose_a):
  items = []
  for n, (la, lb, won) in enumerate(zip(lengths_a, lengths_b, chose_a)):
    a, b = " ".join(["w"] * la), " ".join(["v"] * lb)
    pair, systems = ((a, b), ["A", "B"]) if won else ((b, a), ["B", "A"])
    items.append(CandidateItem("p", f"i{n}", "", pair, (1, 0), {"systems": systems}))
  return items


def test_length_controlled_preference_matches_a_likelihood_fit():
  rng = np.random.default_rng(0)
  la = rng.integers(5, 60, size=80)
  lb = rng.integers(5, 60, size=80)
  x = np.log(la / lb)
  chose_a = rng.random(80) < 1 / (1 + np.exp(-(0.4 + 1.5 * x)))
  result = agreement.length_controlled_preference(_items(la, lb, chose_a), "A", "B", n_resamples=100)

  def nll(w):
    z = w[0] + w[1] * x
    return np.sum(np.logaddexp(0, z) - chose_a * z)
  w = optimize.minimize(nll, np.zeros(2), method="BFGS").x
  assert result["n"] == 80
  assert result["raw"]["value"] == pytest.approx(chose_a.mean())
  assert result["length_controlled"]["value"] == pytest.approx(1 / (1 + np.exp(-w[0])), abs=1e-4)
  controlled = result["length_controlled"]
  assert controlled["low"] < controlled["value"] < controlled["high"]


def test_equal_lengths_leave_the_raw_preference():
  chose_a = [True, True, False, True]
  result = agreement.length_controlled_preference(_items([3] * 4, [3] * 4, chose_a), "A", "B", n_resamples=50)
  assert result["length_controlled"]["value"] == pytest.approx(0.75, abs=1e-4)
  with pytest.raises(ValueError, match="fewer than 2 comparisons between 'A' and 'C'"):
    agreement.length_controlled_preference(_items([3] * 4, [3] * 4, chose_a), "A", "C")


def test_length_judge_on_turingadvice_equals_raw_count(shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  items = preference_heuristics.items_from_turingadvice(read_turingadvice_eval(str(path))[0])
  result = agreement.agreement_rates(agreement.heuristic_scores(items))
  credit = []
  for row in rows:
    reddit = len(re.findall(r"\w+", row["best_advice"]["bestadvice_body"]))
    for system, rating in row["turk_ratings"].items():
      own = len(re.findall(r"\w+", row["model_advice"][system]))
      human_says_system = rating["is_preferred"]
      credit.append(0.5 if own == reddit else float((own > reddit) == human_says_system))
  assert result["with_humans"]["length"]["value"] == pytest.approx(np.mean(credit))
