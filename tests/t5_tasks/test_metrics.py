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



def test_an_item_in_no_group_stays_out_even_when_a_later_round_typed_it():
  # The record of an item the first round typed G (no group) that the second round typed C+C:
  # its pair_groups is empty and its pair_type "C+C". It counts in no group (scripts.analyze
  # breaks systems down by the first round's types); only a record without pair_groups (the
  # TFDS task's) is grouped by its pair_type.
  assert metrics.item_groups({"pair_groups": "", "pair_type": "C+C"}) == set()
  assert metrics.item_groups({"pair_type": "C+C"}) == {"C+C"}
  assert metrics.item_groups({"pair_groups": b"C+{C,I}|C+C"}) == {"C+{C,I}", "C+C"}
  out = metrics.asq_metric_fn([{"candidate_labels": [1, 0], "pair_groups": "", "pair_type": "C+C"},
                               {"candidate_labels": [1, 0], "pair_groups": "C+E", "pair_type": "C+E"}],
                              [[1.0, 0.0], [1.0, 0.0]])
  assert "accuracy/C+C" not in out and out["accuracy/C+E"] == 1.0


def test_item_credit_is_each_metric_item_by_item():
  # SCORES' rows: both correct on top; best correct and second wrong; all four tied.
  for metric, expected in (("accuracy", [1, 1, 1 / 2]), ("accuracy/C+E", [1, 1, 1 / 2]),
                           ("two_best_accuracy", [1, 0, 1 / 6])):
    assert [metrics.item_credit(metric, s, y) for s, y in zip(SCORES, LABELS)] == pytest.approx(expected)
  assert [metrics.item_credit("pairwise_accuracy", s, y) for s, y in
          (([2.0, 1.0], [1, 0]), ([2.0, 2.0], [0, 1]), ([2.0, 1.0], [0, 1]))] == [1, 0.5, 0]
  with pytest.raises(ValueError, match="no per-item credit for metric 'spearman'"):
    metrics.item_credit("spearman", [1.0, 0.0], [1, 0])

# Two contexts of a ranked criterion: each output's human score, and each pair compared; an
# output is in several comparisons ("A" of c1 in three), and "A" of c2 is another output.
HUMAN = {("c1", "A"): 3.0, ("c1", "B"): 2.0, ("c1", "C"): 1.0, ("c1", "D"): 0.0,
         ("c2", "A"): 0.5, ("c2", "E"): 2.5}
MODEL = {("c1", "A"): 0.1, ("c1", "B"): 0.9, ("c1", "C"): 0.3, ("c1", "D"): 0.2,
         ("c2", "A"): 0.6, ("c2", "E"): 0.4}
PAIRS = [("c1", "A", "B"), ("c1", "A", "C"), ("c1", "A", "D"), ("c1", "B", "C"),
         ("c2", "E", "A")]


def _ranked_items():
  targets = [{"candidate_labels": [1, 0], "context_id": c, "candidate_texts": [g, b],
              "candidate_scores": [HUMAN[c, g], HUMAN[c, b]]} for c, g, b in PAIRS]
  scores = [[MODEL[c, g], MODEL[c, b]] for c, g, b in PAIRS]
  return targets, scores


def test_ranked_spearman_counts_each_output_once():
  targets, scores = _ranked_items()
  out = metrics.preference_metric_fn(targets, scores, ranked=True)
  keys = sorted(HUMAN)
  expected = stats.spearmanr([MODEL[k] for k in keys], [HUMAN[k] for k in keys]).statistic
  assert out["spearman"] == pytest.approx(expected)
  assert out["spearman_low"] <= out["spearman"] <= out["spearman_high"]
  # Counted once per comparison instead, the answer differs: the case tells the two apart.
  occurrences = [(c, t) for c, g, b in PAIRS for t in (g, b)]
  pooled = stats.spearmanr([MODEL[k] for k in occurrences], [HUMAN[k] for k in occurrences]).statistic
  assert abs(pooled - expected) > 0.05
  assert out["pairwise_accuracy"] == pytest.approx(
      np.mean([MODEL[c, g] > MODEL[c, b] for c, g, b in PAIRS]))


def test_ranked_spearman_keys_outputs_by_token_ids_without_texts():
  targets, scores = _ranked_items()
  ids = {text: [ord(text), 1] for text in "ABCDE"}
  for t in targets:
    t["candidate_ids"] = [ids[text] for text in t.pop("candidate_texts")]
  by_text = metrics.preference_metric_fn(*_ranked_items(), ranked=True)
  assert metrics.preference_metric_fn(targets, scores, ranked=True)["spearman"] == by_text["spearman"]


def test_ranked_spearman_averages_the_human_scores_of_one_text_judged_twice():
  """Two systems wrote the same text (the real defeasible-inference file has such updates): it is
  one output, its human score the mean of the distinct scores it was given."""
  targets, scores = _ranked_items()
  targets[1]["candidate_scores"] = [2.0, 1.0]  # "A" of c1 was 3.0 in the first comparison
  model, human = metrics.output_scores(targets, scores)
  keys = list(dict.fromkeys((t["context_id"], text) for t in targets for text in t["candidate_texts"]))
  assert human[keys.index(("c1", "A"))] == 2.5 and len(human) == len(keys)


def test_unranked_preference_reports_accuracy_only():
  targets, scores = _ranked_items()
  out = metrics.preference_metric_fn(targets, scores)
  assert set(out) == {"pairwise_accuracy", "pairwise_accuracy_low", "pairwise_accuracy_high"}
  ungraded = [{"candidate_labels": [1, 0]}] * len(scores)  # comparisons with no human scores
  assert metrics.preference_metric_fn(ungraded, scores) == out
