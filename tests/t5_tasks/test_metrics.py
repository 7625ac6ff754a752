"""Metrics against hand computations; bootstrap intervals contain the estimate and shrink."""
import numpy as np
import pytest
from scipy import stats

from t5_tasks import metrics

# Three TimeDial-like items, candidates 0 and 1 correct.
SCORES = np.array([[3.0, 2.0, 1.0, 0.0],    # both correct on top
                   [0.0, 5.0, 1.0, 2.0],    # best correct, second best wrong
                   [1.0, 1.0, 1.0, 1.0]])   # all tied
LABELS = np.array([[1, 1, 0, 0]] * 3)


def test_accuracy_and_two_best_by_hand():
  # Item 3 with all ties: the best is correct 2 times in 4; both top-2 correct 1 time in C(4,2)=6.
  assert metrics.accuracy(SCORES, LABELS).value == pytest.approx((1 + 1 + 0.5) / 3)
  assert metrics.two_best_accuracy(SCORES, LABELS).value == pytest.approx((1 + 0 + 1 / 6) / 3)


def test_mask_hides_padding_candidates():
  scores = np.array([[1.0, 9.0, 0.0]])
  labels = np.array([[1, 0, 0]])
  assert metrics.accuracy(scores, labels).value == 0.0
  assert metrics.accuracy(scores, labels, mask=[[True, False, True]]).value == 1.0


def test_pairwise_accuracy_counts_ties_half():
  good = np.array([2.0, 1.0, 0.5, 3.0])
  bad = np.array([1.0, 1.0, 0.7, 0.0])
  assert metrics.pairwise_accuracy(good, bad).value == pytest.approx((1 + 0.5 + 0 + 1) / 4)


def test_spearman_matches_scipy_and_hand_value():
  x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
  y = np.array([5.0, 6.0, 7.0, 8.0, 7.0])
  # ranks of y: 1, 2, 3.5, 5, 3.5 -> d = 0, 0, -0.5, -1, 1.5; with ties use Pearson on ranks.
  ry = np.array([1, 2, 3.5, 5, 3.5])
  expected = np.corrcoef(np.arange(1, 6), ry)[0, 1]
  assert metrics.spearman(x, y).value == pytest.approx(expected)
  assert metrics.spearman(x, y).value == pytest.approx(stats.spearmanr(x, y).statistic)


def test_rule_error_rates_by_hand():
  rules = [["", "", "Rule 1", "Rule 2"]] * 3
  rates = metrics.rule_error_rates(SCORES, LABELS, rules)
  # Rule 1 negative (index 2): beats the weakest correct in item 2 (1 > 0), ties it in item 3.
  assert rates["Rule 1"].value == pytest.approx((0 + 1 + 0.5) / 3)
  assert rates["Rule 2"].value == pytest.approx((0 + 1 + 0.5) / 3)


def test_bad_shapes_are_named():
  with pytest.raises(ValueError, match=r"\[items, candidates\]"):
    metrics.accuracy(np.zeros(3), np.zeros(3))
  with pytest.raises(ValueError, match="labels must be 0 or 1"):
    metrics.accuracy(np.zeros((1, 2)), np.array([[2, 0]]))
  with pytest.raises(ValueError, match="equal-length"):
    metrics.pairwise_accuracy(np.zeros(3), np.zeros(4))


@pytest.mark.parametrize("metric", ["accuracy", "pairwise", "spearman"])
def test_bootstrap_interval_contains_estimate_and_shrinks(metric):
  rng = np.random.default_rng(0)

  def estimate(n):
    if metric == "accuracy":
      labels = np.zeros((n, 3), int)
      labels[:, 0] = 1
      return metrics.accuracy(rng.normal(size=(n, 3)) + labels, labels)
    if metric == "pairwise":
      return metrics.pairwise_accuracy(rng.normal(size=n) + 0.5, rng.normal(size=n))
    x = rng.normal(size=n)
    return metrics.spearman(x, x + rng.normal(size=n))

  small, large = estimate(50), estimate(2000)
  for e in (small, large):
    assert e.low <= e.value <= e.high
  assert large.high - large.low < (small.high - small.low) / 3


def test_timedial_metric_fn_reports_intervals_and_rules():
  targets = [{"candidate_labels": [1, 1, 0, 0], "candidate_rules": ["", "", "Rule 1", "Rule 2"]}
             for _ in range(3)]
  out = metrics.timedial_metric_fn(targets, SCORES.tolist())
  assert out["two_best_accuracy"] == pytest.approx((1 + 0 + 1 / 6) / 3)
  assert out["two_best_accuracy_low"] <= out["two_best_accuracy"] <= out["two_best_accuracy_high"]
  assert out["error_rate/Rule 1"] == pytest.approx(0.5)


def test_asq_metric_fn_by_overlapping_pair_groups():
  targets = [{"candidate_labels": [1, 0], "pair_groups": "C+E"},
             {"candidate_labels": [0, 1], "pair_groups": "C+{C,I}|C+C"},
             {"candidate_labels": [1, 0], "pair_groups": "C+{C,I}"},
             {"candidate_labels": [1, 0], "pair_groups": ""}]
  scores = [[1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]
  out = metrics.asq_metric_fn(targets, scores)
  assert out["accuracy"] == pytest.approx(2 / 4)
  assert out["accuracy/C+E"] == 1.0
  assert out["accuracy/C+{C,I}"] == pytest.approx(1 / 2)
  assert out["accuracy/C+C"] == 0.0


def test_preference_metric_fn_spearman_on_margins():
  targets = [{"candidate_labels": [1, 0], "candidate_scores": [g, 0.0]}
             for g in (1.0, 2.0, 3.0, 4.0)]
  scores = [[0.1, 0.0], [0.5, 0.1], [0.2, 0.3], [2.0, 0.0]]
  out = metrics.preference_metric_fn(targets, scores)
  assert out["pairwise_accuracy"] == pytest.approx(3 / 4)
  margins = [0.1, 0.4, -0.1, 2.0]
  assert out["spearman"] == pytest.approx(stats.spearmanr(margins, [1, 2, 3, 4]).statistic)
  flat = [{"candidate_labels": [1, 0], "candidate_scores": [1.0, 0.0]}] * 4
  assert "spearman" not in metrics.preference_metric_fn(flat, scores)
  ungraded = [{"candidate_labels": [1, 0]}] * 4  # comparisons with no human scores
  assert metrics.preference_metric_fn(ungraded, scores) == {
      k: v for k, v in out.items() if k.startswith("pairwise_accuracy")}
