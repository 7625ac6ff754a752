"""Agreement between judges, labelers and the length-controlled preference, against independent computations."""
import json
import re

import numpy as np
import pytest
from scipy import optimize

from t5_tasks.analysis import agreement
from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import preference_heuristics
from t5_tasks.sources import summarize_feedback
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


def test_a_judge_that_leaves_items_out_is_compared_on_the_items_it_judged():
  nan = float("nan")
  a = [[2, 1], [0, 1], [1, 1], [3, 0]]
  partial = [[nan, nan], [1, 0], [nan, nan], [0, 1]]  # judges items 1 and 3, picks wrong on 3
  result = agreement.agreement_rates({"a": a, "partial": partial})
  assert result["with_humans"]["partial"]["value"] == pytest.approx(0.5)
  assert result["with_humans"]["partial"]["n"] == 2 and result["with_humans"]["a"]["n"] == 4
  assert result["between"]["a"]["partial"]["value"] == pytest.approx(0.0)  # a: other, then preferred
  with pytest.raises(ValueError, match="judge 'none' judged no item"):
    agreement.agreement_rates({"partial": partial, "none": [[nan, nan]] * 4})
  with pytest.raises(ValueError, match="judges 'partial' and 'other' have no judged item in common"):
    agreement.agreement_rates({"partial": partial, "other": [[1, 0], [nan, nan], [1, 0], [nan, nan]]})


def _dp_lcs(a, b):
  table = np.zeros((len(a) + 1, len(b) + 1), dtype=int)
  for i, x in enumerate(a):
    for j, y in enumerate(b):
      table[i + 1, j + 1] = table[i, j] + 1 if x == y else max(table[i, j + 1], table[i + 1, j])
  return int(table[-1, -1])


def test_copying_is_the_lcs_of_bigrams_over_the_summarys_bigrams():
  post = "The cat sat on the mat. The dog sat on the cat."
  # Post bigrams, in order: the-cat cat-sat sat-on on-the the-mat mat-the the-dog dog-sat sat-on
  # on-the the-cat. The summary's five: the-dog dog-sat sat-on on-the the-mat. All five occur in
  # the post, but the-mat only before the-dog: the longest common subsequence is the first four.
  assert preference_heuristics.lcs_bigram_copying(post, "the dog sat on the mat") == pytest.approx(4 / 5)
  # In reverse word order (cat-the the-on on-sat) no bigram occurs in the post.
  assert preference_heuristics.lcs_bigram_copying(post, "cat the on sat") == 0.0
  assert preference_heuristics.lcs_bigram_copying(post, "The cat sat on the mat") == 1.0
  assert preference_heuristics.lcs_bigram_copying(post, "cat") == 0.0  # no bigram


def test_bit_parallel_lcs_matches_dynamic_programming():
  rng = np.random.default_rng(0)
  for _ in range(200):
    a = rng.integers(0, 4, size=rng.integers(0, 30)).tolist()
    b = rng.integers(0, 4, size=rng.integers(0, 30)).tolist()
    assert preference_heuristics.lcs_length(a, b) == _dp_lcs(a, b), (a, b)


def test_scores_from_predictions_orient_by_gold():
  items = [CandidateItem("p", "x", "", ("g", "b"), (1, 0)), CandidateItem("p", "y", "", ("g", "b"), (1, 0))]
  predictions = [{"id": "y", "scores": [0.1, 0.9], "gold": [0, 1]},
                 {"id": "x", "scores": [3, 4], "gold": [1, 0]}]
  assert agreement.scores_from_predictions(items, predictions) == [[3, 4], [0.9, 0.1]]
  with pytest.raises(ValueError, match="no prediction for 1 items, e.g. 'x'"):
    agreement.scores_from_predictions(items, predictions[:1], "rm")


def _items(comparisons):
  """CandidateItems from (preferred policy, its length in words, other policy, its length)."""
  return [CandidateItem("p", f"i{n}", "", (" ".join(["w"] * lw), " ".join(["v"] * ll)), (1, 0),
                        {"systems": [won, lost]})
          for n, (won, lw, lost, ll) in enumerate(comparisons)]


def _synthetic(rng, effects, length_coefficient, pairs, n):
  """Comparisons drawn from P(a preferred) = sigmoid(effect a - effect b + c log(len a / len b))."""
  comparisons, features = [], []
  for k in range(n):
    a, b = pairs[k % len(pairs)]
    la, lb = rng.integers(5, 60, size=2)
    z = effects[a] - effects[b] + length_coefficient * np.log(la / lb)
    a_won = rng.random() < 1 / (1 + np.exp(-z))
    comparisons.append((a, la, b, lb) if a_won else (b, lb, a, la))
    features.append((a, b, np.log(la / lb)))
  return comparisons, features


def test_length_control_recovers_a_known_logistic_model():
  effects = {"A": 0.8, "B": 0.0, "C": -0.5}
  pairs = [("A", "B"), ("B", "C")]  # A and C meet only through B
  rng = np.random.default_rng(0)
  comparisons, features = _synthetic(rng, effects, 1.2, pairs, 2000)
  result = agreement.length_controlled_preferences(_items(comparisons), [("A", "B"), ("A", "C"), ("C", "B")],
                                                   n_resamples=10)
  # The tolerance: the maximum-likelihood estimate is asymptotically normal with covariance the
  # inverse Fisher information, here at the true parameters (w = [B - A, C - A, length]); 4 of
  # its standard errors are exceeded with probability 6e-5.
  truth = np.array([effects["B"] - effects["A"], effects["C"] - effects["A"], 1.2])
  x = np.array([[(a == "B") - (b == "B"), (a == "C") - (b == "C"), r] for a, b, r in features])
  p = 1 / (1 + np.exp(-x @ truth))
  covariance = np.linalg.inv(x.T @ (x * (p * (1 - p))[:, None]))
  for got in result["pairs"]:
    d = np.array([(got["b"] == "B") - (got["a"] == "B"), (got["b"] == "C") - (got["a"] == "C"), 0.0])
    expected = 1 / (1 + np.exp(-(effects[got["a"]] - effects[got["b"]])))
    se = expected * (1 - expected) * np.sqrt(d @ covariance @ d)  # delta method
    assert got["length_controlled"]["value"] == pytest.approx(expected, abs=4 * se), got
    assert got["length_controlled"]["low"] <= got["length_controlled"]["value"] <= got["length_controlled"]["high"]
  assert result["length_coefficient"] == pytest.approx(1.2, abs=4 * np.sqrt(covariance[2, 2]))
  by_pair = {(c["a"], c["b"]): c for c in result["pairs"]}
  assert by_pair[("A", "C")]["n_direct"] == 0 and by_pair[("A", "C")]["raw"] is None
  assert by_pair[("A", "B")]["n_direct"] == 1000 and result["n_resamples_without_fit"] == 0


def test_length_control_is_the_likelihood_maximum_of_one_model():
  rng = np.random.default_rng(1)
  comparisons, _ = _synthetic(rng, {"A": 0.4, "B": 0.0, "C": 0.3}, 1.5, [("A", "B"), ("B", "C"), ("A", "C")], 90)
  result = agreement.length_controlled_preferences(_items(comparisons), [("A", "B"), ("C", "A")], n_resamples=20)
  # Independently: minimise the negative log-likelihood of sigmoid(e_won - e_lost + c log ratio), e_B = 0.
  won = np.array([[w == "A", w == "C"] for w, _, _, _ in comparisons], dtype=float)
  lost = np.array([[l == "A", l == "C"] for _, _, l, _ in comparisons], dtype=float)
  ratio = np.log([lw / ll for _, lw, _, ll in comparisons])

  def nll(w):
    z = (won - lost) @ w[:2] + w[2] * ratio
    return np.sum(np.logaddexp(0, -z))
  w = optimize.minimize(nll, np.zeros(3), method="BFGS", options={"gtol": 1e-10}).x
  by_pair = {(c["a"], c["b"]): c["length_controlled"]["value"] for c in result["pairs"]}
  assert by_pair[("A", "B")] == pytest.approx(1 / (1 + np.exp(-w[0])), abs=1e-5)
  assert by_pair[("C", "A")] == pytest.approx(1 / (1 + np.exp(-(w[1] - w[0]))), abs=1e-5)
  assert result["length_coefficient"] == pytest.approx(w[2], abs=1e-4)
  effects = result["policy_effects"]  # only differences are identified
  assert (effects["A"] - effects["B"], effects["C"] - effects["B"]) == pytest.approx(tuple(w[:2]), abs=1e-4)


def test_equal_lengths_leave_the_raw_preference():
  comparisons = [("A", 3, "B", 3)] * 3 + [("B", 3, "A", 3)]
  result = agreement.length_controlled_preferences(_items(comparisons), [("A", "B")], n_resamples=20)
  assert result["pairs"][0]["length_controlled"]["value"] == pytest.approx(0.75, abs=1e-6)
  assert result["pairs"][0]["raw"]["value"] == pytest.approx(0.75)


def test_degenerate_comparisons_are_refused():
  mixed = [("A", 3, "B", 4), ("B", 5, "A", 3), ("A", 6, "B", 2), ("B", 2, "A", 3)]
  always_loses = mixed + [("A", 3, "C", 4), ("B", 3, "C", 5), ("A", 4, "C", 4)]
  with pytest.raises(ValueError, match=r"no finite fit, because the comparisons are separable "
                                       r"\('C' loses all 3 of its comparisons\)"):
    agreement.length_controlled_preferences(_items(always_loses), [("A", "B")])
  with pytest.raises(ValueError, match="policy 'D' is in no comparison; policies: A, B"):
    agreement.length_controlled_preferences(_items(mixed), [("A", "D")])
  unlinked = mixed + [("C", 3, "D", 4), ("D", 3, "C", 5)]
  with pytest.raises(ValueError, match="no chain of comparisons links 'A' and 'C'"):
    agreement.length_controlled_preferences(_items(unlinked), [("A", "C")])
  with pytest.raises(ValueError, match="no item names its policies"):
    agreement.length_controlled_preferences([CandidateItem("p", "x", "", ("a", "b"), (1, 0))], [("A", "B")])


def _comparison(post, summaries, choice, worker, policies=("p", "q")):
  return summarize_feedback.SummaryComparison(post, "sub", "title", "the post", tuple(summaries),
                                              tuple(policies), choice, "train", None, worker)


def test_labeler_agreement_by_hand():
  comparisons = [
      _comparison("p1", ("x", "y"), 0, "w1"), _comparison("p1", ("x", "y"), 0, "w2"),
      _comparison("p1", ("y", "x"), 0, "w3"),  # the same pair shown the other way round; chose y
      _comparison("p2", ("a", "b"), 0, "w1"), _comparison("p2", ("a", "b"), 1, "w1"),  # one worker twice
      _comparison("p3", ("c", "d"), 0, "w2"), _comparison("p3", ("d", "c"), 1, "w3"),  # both chose c
      _comparison("p3", ("c", "d"), 1, ""),  # no worker: left out
      _comparison("p4", ("x", "y"), 0, "w4"),  # labelled once
  ]
  result = agreement.labeler_agreement(comparisons)
  # p1: w1-w2 agree, w1-w3 and w2-w3 do not: 1/3. p3: 1. The rate is their mean.
  assert result["rate"]["value"] == pytest.approx((1 / 3 + 1) / 2)
  assert (result["n_comparisons"], result["n_label_pairs"], result["n_labels_without_worker"]) == (2, 4, 1)
  assert agreement.labeler_agreement(comparisons[3:5])["rate"] is None


def test_rouge_judge_scores_against_the_posts_reference():
  from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top
  comparisons = [
      _comparison("p1", ("my landlord entered twice without notice", "landlord keeps coming in"), 0, "w1",
                  ("ref", "sup")),
      _comparison("p1", ("the landlords entered without any notice", "landlord came in"), 1, "w2"),
      _comparison("p2", ("a cat", "a dog"), 0, "w1"),
  ]
  references = agreement.reference_summaries(comparisons)
  assert references == {"p1": "my landlord entered twice without notice"}
  items = preference_heuristics.items_from_summary_comparisons(comparisons)
  result = agreement.rouge_scores(items, [references.get(c.id) for c in comparisons])
  assert (result["n_judged"], result["n_without_reference"], result["n_reference_is_a_candidate"]) == (1, 1, 1)
  assert np.isnan(result["scores"][0]).all() and np.isnan(result["scores"][2]).all()
  scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
  reference = "my landlord entered twice without notice"
  expected = [np.mean([s.fmeasure for s in scorer.score(reference, summary).values()])
              for summary in ("landlord came in", "the landlords entered without any notice")]  # chosen first
  assert result["scores"][1] == pytest.approx(expected)
  with pytest.raises(ValueError, match="post 'p1' has two different 'ref' summaries"):
    agreement.reference_summaries(comparisons + [_comparison("p1", ("other", "x"), 0, "w3", ("ref", "q"))])


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


def test_policy_names_carry_their_sampling_temperature():
  assert agreement.policy_and_temperature("sup4_6b_t0.7") == ("sup4_6b", 0.7)
  assert agreement.policy_and_temperature("sup2_t.7") == ("sup2", 0.7)
  assert agreement.policy_and_temperature("ppo_xl_t1") == ("ppo_xl", 1.0)
  assert agreement.policy_and_temperature("ref") == ("ref", None)
  assert agreement.policy_and_temperature("sup4_ppo_rm3_kl10") == ("sup4_ppo_rm3_kl10", None)


def test_g7_groups_hold_comparisons_of_one_policy_at_one_temperature():
  comparisons = [
      _comparison("p1", ("a", "b"), 0, "w1", ("sup_t0.7", "sup_t.7")),  # the same temperature, written twice
      _comparison("p2", ("a", "b"), 0, "w1", ("sup_t0.7", "sup_t0.7")),
      _comparison("p3", ("a", "b"), 0, "w1", ("sup_t0.7", "sup_t1")),  # two temperatures: no table
      _comparison("p4", ("a", "b"), 0, "w1", ("sup_t0.7", "rl_t0.7")),  # two policies: no table
      _comparison("p5", ("a", "b"), 0, "w1", ("rl", "rl")),
  ]
  assert agreement.same_policy_groups(comparisons) == {("sup", 0.7): [0, 1], ("rl", None): [4]}


def _labelled(post, choices, policies=("p", "q"), confidences=None):
  """One comparison of the summaries ("A", "B") labelled by workers w1, w2, ... choosing `choices`."""
  confidences = confidences or [None] * len(choices)
  return [summarize_feedback.SummaryComparison(post, "sub", "title", "the post", ("A", "B"), policies,
                                               "AB".index(chosen), "train", confidence, f"w{i + 1}")
          for i, (chosen, confidence) in enumerate(zip(choices, confidences))]


def test_the_labeler_ensemble_leaves_out_the_labeler_it_predicts():
  comparisons = _labelled("p1", "AABA") + _labelled("p2", "ABB") + _labelled("p3", "AB")  # p3: 2 workers
  # p1: w1, w2, w4 chose A and the other three's majority is A: 1, 1, 1; w3 chose B against A: 0.
  # p2: w1 (A) against B, B: 0; w2 (B) against A, B: a tie, 0.5; w3 likewise 0.5.
  # The judge prefers A everywhere; the ensemble of all workers picks A on p1 (3 of 4), B on p2.
  judge = [[1.0, 0.0] if c.summaries[c.choice] == "A" else [0.0, 1.0] for c in comparisons]
  result = agreement.labeler_ensemble(comparisons, {"prefers A": judge})
  assert result["with_labelers"]["value"] == pytest.approx((1 + 1 + 0 + 1 + 0 + 0.5 + 0.5) / 7)
  assert result["with_labelers"]["n"] == 7 and result["n_comparisons"] == 2
  assert result["with_judges"]["prefers A"]["value"] == pytest.approx(0.5)
  assert result["with_judges"]["prefers A"]["n"] == 2
  assert agreement.labeler_ensemble(_labelled("p3", "AB"))["with_labelers"] is None


def test_confidence_thresholds_are_each_labelers_own():
  # Posts p0..p5, each labelled by w1 (with a confidence), w2 and w3 (A, no confidence) and w4; w5
  # labels p0 and p1. A label's reference is the majority of the other workers on its post.
  comparisons = []
  for n, (w1_choice, w1_confidence) in enumerate([("A", 9), ("A", 8), ("A", 7), ("A", 6), ("B", 3), ("B", 2)]):
    comparisons += _labelled(f"p{n}", w1_choice + "AA", confidences=[w1_confidence, None, None])
  for n, (choice, confidence) in enumerate([("A", 9), ("B", 8), ("B", 7), ("A", 6), ("B", 3), ("A", 2)]):
    comparisons.append(summarize_feedback.SummaryComparison(f"p{n}", "sub", "title", "the post", ("A", "B"),
                                                            ("p", "q"), "AB".index(choice), "train", confidence, "w4"))
  for n in range(2):
    comparisons.append(summarize_feedback.SummaryComparison(f"p{n}", "sub", "title", "the post", ("A", "B"),
                                                            ("p", "q"), 1, "train", 9, "w5"))
  thresholds = agreement.confidence_thresholds(comparisons)
  # w1: on p1 the others are A, A, B, B (a tie: no reference); elsewhere their majority is A. Its labels
  # (confidence, agrees): (9, 1) (7, 1) (6, 1) (3, 0) (2, 0): 60% from 1, 75% from 3, 100% from 4.
  assert thresholds["w1"] == {"threshold": 4, "agreement": 1.0, "n": 3, "n_labels": 5}
  # w4 against A everywhere: (9, 1) (8, 0) (7, 0) (6, 1) (3, 0) (2, 1): 80% only from 9.
  assert thresholds["w4"] == {"threshold": 9, "agreement": 1.0, "n": 1, "n_labels": 6}
  # w5 disagrees at its only confidence: no threshold reaches 80%.
  assert thresholds["w5"] == {"threshold": None, "agreement": 0.0, "n": 2, "n_labels": 2}
  assert "w2" not in thresholds  # no label of w2 has a confidence
  assert agreement.confidence_thresholds(comparisons, target=0.75)["w1"]["threshold"] == 3


def test_the_g7_settings_are_the_papers(shared_data):
  path = shared_data.parent / "papers" / "summarize_from_feedback_appendix.txt"
  if not path.is_file():
    pytest.skip(f"the paper's text is not at {path}")
  text = " ".join(path.read_text(encoding="utf-8").split())
  assert "all of the summary comparisons are generated by the same policy at the same temperature value" in text
  assert "we need to exclude the labeler being predicted. All ensembles have at least 3 workers." in text
  min_workers = re.search(r"All ensembles have at least (\d+) workers", text).group(1)
  target = re.search(r"labels above this threshold to agree with us (\d+)% of the time", text).group(1)
  import inspect  # pylint: disable=g-import-not-at-top
  assert inspect.signature(agreement.labeler_ensemble).parameters["min_workers"].default == int(min_workers)
  assert inspect.signature(agreement.confidence_thresholds).parameters["target"].default == int(target) / 100


def _released(post, policies, texts, choice, worker, confidence=None):
  """A comparison as the released files write it."""
  return {"info": {"id": post, "post": f"the post of {post}", "title": "title", "subreddit": "tifu"},
          "summaries": [{"text": t, "policy": p, "note": None} for t, p in zip(texts, policies)],
          "choice": choice, "worker": worker, "batch": "b1", "split": "valid1", "extra": {"confidence": confidence}}


def test_analyze_agreement_tabulates_each_policy_at_each_temperature_apart(capsys, tmp_path):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import analyze  # pylint: disable=g-import-not-at-top
  short, long = "short one", "a much longer summary of the post"
  rows = []
  for n in range(4):  # sup at T=0.7: labelers prefer the longer summary; the RL policy's, the shorter
    rows.append(_released(f"s{n}", ("sup_t0.7", "sup_t0.7"), (short, long), 1, "w1", 8))
    rows.append(_released(f"r{n}", ("rl_t0.7", "rl_t0.7"), (short, long), 0, "w1", 8))
  rows += [_released("s0", ("sup_t0.7", "sup_t0.7"), (short, long), choice, worker, 5)  # s0: 4 workers
           for choice, worker in ((1, "w2"), (1, "w3"), (0, "w4"))]
  rows.append(_released("x", ("sup_t0.7", "rl_t0.7"), (short, long), 0, "w1", 8))  # in no G.7 table
  path = tmp_path / "comparisons.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--comparisons={path}", f"--out={tmp_path / 'out'}"])
  analyze.run("agreement", fv)
  analysis = json.loads((tmp_path / "out" / "analysis.json").read_text())
  console = capsys.readouterr().out
  # Pooled over both policies, length agrees with the labels half the time; G.7 separates 1 from 0.
  assert analysis["agreement"]["with_humans"]["length"]["value"] == pytest.approx(6 / 12)
  groups = {(g["policy"], g["temperature"]): g for g in analysis["by_policy"]}
  assert set(groups) == {("sup", 0.7), ("rl", 0.7)}
  sup, rl = groups[("sup", 0.7)], groups[("rl", 0.7)]
  assert (sup["n_comparisons"], rl["n_comparisons"]) == (7, 4)
  assert sup["agreement"]["with_humans"]["length"]["value"] == pytest.approx(6 / 7)  # w4 chose the shorter
  assert rl["agreement"]["with_humans"]["length"]["value"] == pytest.approx(0.0)
  # s0's ensemble (w1, w2, w3 longer; w4 shorter): leaving each out, 1, 1, 1 and 0; with all, the longer.
  assert sup["labeler_ensemble"]["with_labelers"]["value"] == pytest.approx(3 / 4)
  ensemble_with_length = sup["labeler_ensemble"]["with_judges"]["length"]
  assert (ensemble_with_length["value"], ensemble_with_length["n"]) == (1.0, 1)
  assert rl["labeler_ensemble"]["with_labelers"] is None  # one worker per comparison
  assert "G.7: sup at T=0.7, 7 comparisons of two of its summaries" in console
  assert "G.7: rl at T=0.7, 4 comparisons" in console and "High-confidence thresholds per labeler" in console
  # Only s0's labels have a reference (the other workers' majority, the longer): w4 alone disagrees.
  assert analysis["confidence_thresholds"]["w4"]["threshold"] is None
  assert ("bind t5_tasks.families.comparison_filter.min_confidence = {'w1': 1, 'w2': 1, 'w3': 1}"
          in " ".join(console.split()))
