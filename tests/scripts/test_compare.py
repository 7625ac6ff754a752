"""scripts.compare: paired bootstrap, McNemar and the paired permutation test checked against direct
computations and cases whose answer is known (the bootstrap's interval and p agreeing on random
scores, as returned and as printed), and the command end to end on the quickstart baselines
(TimeDial overlap, ASQ similarity, summary length) against the same baselines with their scores
reversed, and on two systems of which one scored a subset of the other's items.
"""
import itertools
import json
import math
import pathlib
import subprocess
import sys

from absl import flags
import gin
import numpy as np
import pytest

from runner import outputs
from scripts import compare
from t5_tasks import metrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "t5_tasks" / "data"
BASELINES = {  # the baselines' command lines (README, scripts/run_baseline.py), in-process here
    "timedial_cloze_full": ["--baseline=timedial_overlap", f"--eval_file={DATA / 'timedial_test.json'}"],
    "asq_intent_cloze": ["--baseline=asq_similarity", f"--train_file={DATA / 'asq_train.json'}",
                         f"--eval_file={DATA / 'asq_test.json'}"],
    "summarize_feedback_preference": ["--baseline=length", "--eval_format=summarize_feedback",
                                      f"--eval_file={DATA / 'summarize_comparisons.jsonl'}"],
}


def _fmt(x: float) -> str:
  return f"{x:.3f}"


# --- 1. The tests against independent computations. ---

def _mcnemar_by_hand(b: int, c: int) -> float:
  """Exact two-sided McNemar p: twice the smaller binomial tail of the discordant pairs."""
  n = b + c
  return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def _bootstrap_by_hand(a, b, num_bootstrap, seed):
  """One resample at a time, item by item: the paired bootstrap as its definition reads (the
  interval's bounds the ceil(B / 40)-th differences from either end; p from the same differences)."""
  rng = np.random.default_rng(seed)
  differences = []
  for _ in range(num_bootstrap):
    picked = [int(rng.integers(0, len(a))) for _ in range(len(a))]
    differences.append(sum(a[i] - b[i] for i in picked) / len(a))
  observed = sum(a) / len(a) - sum(b) / len(b)
  ordered, j = sorted(differences), -(-num_bootstrap // 40)
  tails = (sum(d <= 0 for d in differences), sum(d >= 0 for d in differences))
  return observed, (ordered[j - 1], ordered[-j]), min(1.0, 2 * min(tails) / num_bootstrap)


def test_mcnemar_and_paired_bootstrap_match_direct_computations():
  # 20 items: both right on 8, both wrong on 3, only A right on 7, only B right on 2.
  a = [1] * 8 + [0] * 3 + [1] * 7 + [0] * 2
  b = [1] * 8 + [0] * 3 + [0] * 7 + [1] * 2
  test = metrics.mcnemar_exact(a, b)
  assert (test["a_better"], test["b_better"]) == (7, 2)
  assert test["p"] == pytest.approx(_mcnemar_by_hand(7, 2), rel=1e-12)
  assert metrics.mcnemar_exact(b, a)["p"] == pytest.approx(test["p"], rel=1e-12)

  result = metrics.paired_bootstrap(a, b, num_bootstrap=500, seed=3)
  observed, (low, high), p = _bootstrap_by_hand(a, b, 500, 3)
  assert result["difference"] == pytest.approx(np.mean(a) - np.mean(b)) == pytest.approx(observed)
  assert (result["low"], result["high"]) == pytest.approx((low, high))
  assert result["p"] == pytest.approx(p)
  assert 0.05 < result["p"] < 1 and low <= 0 < result["difference"] < high


def test_identical_systems_differ_by_nothing_and_a_dominant_one_is_significant():
  a = [1, 0, 0.5, 1, 0] * 4
  same = metrics.paired_bootstrap(a, a, num_bootstrap=200, seed=0)
  assert (same["difference"], same["low"], same["high"], same["p"]) == (0, 0, 0, 1)
  assert metrics.second_test(a, a, 500, 0) == {"test": "paired permutation", "a_better": 0, "b_better": 0, "p": 1.0}
  zero_one = [1, 0, 0, 1] * 5
  assert metrics.second_test(zero_one, zero_one, 500, 0) == {"test": "McNemar exact", "a_better": 0,
                                                              "b_better": 0, "p": 1.0}

  swapped = metrics.paired_bootstrap([1 / 3, 2 / 3, 0, 1], [2 / 3, 1 / 3, 1, 0], num_bootstrap=200, seed=0)
  assert (swapped["difference"], swapped["p"]) == (0, 1)  # equal means, different items
  assert swapped["low"] < 0 < swapped["high"]

  right, wrong = [1] * 20, [0] * 20
  dominant = metrics.paired_bootstrap(right, wrong, num_bootstrap=200, seed=0)
  assert (dominant["difference"], dominant["low"], dominant["high"], dominant["p"]) == (1, 1, 1, 0)
  # Clearly worse on 100 items (right on 80 and on 40): significant, the interval well above 0.
  rng = np.random.default_rng(0)
  better, worse = rng.permutation([1] * 80 + [0] * 20), rng.permutation([1] * 40 + [0] * 60)
  clear = metrics.paired_bootstrap(better, worse, num_bootstrap=1000, seed=0)
  assert clear["difference"] == pytest.approx(0.4) and clear["p"] < 0.05 and 0.2 < clear["low"] < 0.4 < clear["high"]
  reverse = metrics.paired_bootstrap(worse, better, num_bootstrap=1000, seed=0)
  assert reverse["p"] == clear["p"] and reverse["high"] < 0
  assert metrics.second_test(right, wrong, 500, 0)["p"] == pytest.approx(2 / 2 ** 20)
  # A clearly worse system with a tie's partial credit: the smallest p 999 sign flips can give.
  assert metrics.second_test([1] * 20 + [0.5] * 20, [0.25] * 40, 999, 0)["p"] == pytest.approx(1 / 1000)
  with pytest.raises(ValueError, match="McNemar's test needs 0/1 credit"):
    metrics.mcnemar_exact([0.5, 1, 0], [0, 0.5, 0])


def test_bootstrap_interval_excludes_0_exactly_when_p_is_below_005_at_the_edges():
  """Resampled differences chosen so that the share at or below 0 is exactly 2.5%, or one short:
  p = 0.05 (not significant) must come with a bound at or below 0, and p just under 0.05 with one
  above it. At B = 1000, B x 0.025 in floats is 25.000000000000004: rounded up, the 26th difference."""
  from t5_tasks import statistics  # pylint: disable=g-import-not-at-top
  for count in (40, 1000, 1999, 2000):
    edge = -(-count // 40)  # ceil(B / 40), the smallest count of d <= 0 that is not significant
    for at_most_0, zero in ((edge, 0.0), (edge, -0.5), (edge - 1, 0.0), (edge - 1, -0.5), (0, 0.0)):
      differences = [zero] * at_most_0 + [0.25] * (count - at_most_0)
      summary = statistics.bootstrap_summary(np.random.default_rng(count).permutation(differences))
      assert summary["p"] == pytest.approx(2 * at_most_0 / count)
      assert (summary["p"] < 0.05) == (at_most_0 < count / 40) == (summary["low"] > 0), (count, at_most_0)
      assert summary["high"] == 0.25
  assert statistics.bootstrap_summary([0.0] * 7) == {"low": 0, "high": 0, "p": 1}  # ties: both sides


def _random_case(rng):
  """Paired per-item credit of two systems: 0/1 or with a tie's partial credit, of random size,
  accuracy and agreement, so that p lands on both sides of 0.05 and near it."""
  items = int(rng.integers(5, 80))
  credit = [0, 1] if rng.random() < 0.5 else [0, 0.25, 0.5, 1]
  a = rng.choice(credit, size=items)
  b = np.where(rng.random(items) < rng.uniform(0.3, 1.0), a, rng.choice(credit, size=items))
  return a, b


def test_bootstrap_p_below_005_exactly_when_the_interval_excludes_0_on_random_scores():
  """The property, on the numbers returned and as every output prints them (compare.fmt, fmt_p)."""
  rng = np.random.default_rng(51)
  outcomes = set()
  for case in range(300):
    a, b = _random_case(rng)
    num_bootstrap = int(rng.choice([1, 39, 40, 200, 999, 1000, 4000]))
    result = metrics.paired_bootstrap(a, b, num_bootstrap=num_bootstrap, seed=case)
    significant = result["p"] < 0.05
    assert significant == (result["low"] > 0 or result["high"] < 0), (case, result)
    low, high = float(compare.fmt(result["low"])), float(compare.fmt(result["high"]))
    printed_p = float(compare.fmt_p(result["p"], num_bootstrap))
    assert (printed_p < 0.05) == significant == (low > 0 or high < 0), (case, result, low, high, printed_p)
    assert result["low"] <= result["high"]
    outcomes.add((significant, num_bootstrap >= 40 and abs(result["p"] - 0.05) <= 0.02))
  assert outcomes == {(True, True), (True, False), (False, True), (False, False)}  # both sides, and near 0.05


def _permutation_by_hand(a, b):
  """Exact two-sided paired permutation p: every one of the 2^n sign patterns of the differences."""
  d = [x - y for x, y in zip(a, b)]
  observed = abs(sum(d))
  patterns = [[s * x for s, x in zip(signs, d)] for signs in itertools.product((-1, 1), repeat=len(d))]
  return sum(abs(sum(p)) >= observed - 1e-12 for p in patterns) / len(patterns)


def test_tie_heavy_system_gets_the_permutation_test_and_counts_in_the_differences_sign():
  # 4-candidate items: A right on 30 of 100 and wrong elsewhere; B scores every candidate alike
  # (credit 1/4 each). A is better by 0.05, though B gets more credit than A on 70 items: counting
  # items (the old "B better") had the opposite sign of the difference.
  a, b = [1.0] * 30 + [0.0] * 70, [0.25] * 100
  test = metrics.second_test(a, b, num_permutations=4000, seed=0)
  assert test["test"] == "paired permutation"
  assert (test["a_better"], test["b_better"]) == (22.5, 17.5)
  assert test["a_better"] - test["b_better"] == pytest.approx(len(a) * (np.mean(a) - np.mean(b)))
  assert np.sign(test["a_better"] - test["b_better"]) == np.sign(metrics.paired_bootstrap(a, b, 200, 0)["difference"])
  assert metrics.second_test(b, a, 4000, 0)["b_better"] == 22.5
  # Against the exact permutation distribution on a case small enough to enumerate (2^12 patterns).
  small_a, small_b = [1, 1, 1, 0.5, 1, 0, 1, 1, 0.5, 1, 0, 1], [0.5, 0, 1, 0.5, 0, 0, 0.5, 1, 0, 0, 1, 0.5]
  exact = _permutation_by_hand(small_a, small_b)
  estimate = metrics.paired_permutation(small_a, small_b, num_permutations=20000, seed=1)["p"]
  assert 0.01 < exact < 0.5 and estimate == pytest.approx(exact, abs=0.01)


def test_pairwise_credit_is_pairwise_accuracy_per_item():
  rng = np.random.default_rng(0)
  scores = rng.integers(0, 3, size=(40, 2)).astype(float)  # many ties
  gold = [[1, 0] if g else [0, 1] for g in rng.integers(0, 2, size=40)]
  credit = compare.item_credit("pairwise_accuracy", [{"scores": s, "gold": y} for s, y in zip(scores, gold)])
  good = [s[y.index(1)] for s, y in zip(scores, gold)]
  bad = [s[y.index(0)] for s, y in zip(scores, gold)]
  assert np.mean(credit) == pytest.approx(metrics.pairwise_accuracy(good, bad, num_bootstrap=10).value)
  assert sorted(set(credit)) == [0, 0.5, 1]


# --- 2. End to end. ---

def _run_baseline(args, out: pathlib.Path) -> None:
  from scripts import run_baseline  # pylint: disable=g-import-not-at-top  (registers the tasks)
  gin.clear_config()
  fv = flags.FlagValues()
  run_baseline.define_flags(fv)
  fv(["run_baseline", *args, f"--out={out}"])
  try:
    run_baseline.run(fv)
  finally:
    gin.clear_config()


def _write_system(directory: pathlib.Path, records, metrics) -> str:
  outputs.write_predictions(str(directory), records)
  outputs.write_metrics(str(directory), metrics)
  return str(directory)


def _records(directory) -> list[dict]:
  return outputs.read_predictions(str(pathlib.Path(directory) / outputs.PREDICTIONS_FILE))


def _credit(scores, gold) -> float:
  """Top-1 credit with ties broken at random: the share of the best-scored candidates that are correct."""
  best = [i for i, s in enumerate(scores) if s == max(scores)]
  return sum(gold[i] for i in best) / len(best)


def _reversed(records):
  """Another system on the same items: every score negated (its best candidate becomes its worst)."""
  return [{**r, "scores": [-s for s in r["scores"]], "prediction": int(np.argmin(r["scores"]))}
          for r in records]


@pytest.fixture(scope="module")
def systems(tmp_path_factory):
  """{name: evaluation directory}: the three baselines as one system, the same reversed, and a copy."""
  import seqio  # pylint: disable=g-import-not-at-top
  from runner import eval_metrics  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("compare")
  records, metrics = [], {}
  for task, args in BASELINES.items():
    _run_baseline(args, root / task)
    records += _records(root / task)
    metrics.update(outputs.read_metrics(str(root / task)))
  flipped = _reversed(records)
  flipped_metrics = {task: eval_metrics.task_metrics(seqio.get_mixture_or_task(task),
                                                 [r for r in flipped if r["task"] == task])
                     for task in BASELINES}
  return {"baseline": _write_system(root / "baseline", records, metrics),
          "reversed": _write_system(root / "reversed", flipped, flipped_metrics),
          "copy": _write_system(root / "copy", records, metrics)}


def _command(systems, out, *args):
  spec = ",".join(f"{name}={directory}" for name, directory in systems.items())
  return subprocess.run([sys.executable, "-m", "scripts.compare", f"--eval_dirs={spec}", f"--out={out}",
                         *args],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_compare_command_reports_the_same_numbers_everywhere(systems, tmp_path):
  result = _command(systems, tmp_path, "--num_bootstrap=500")
  assert result.returncode == 0, result.stderr
  assert not result.stderr.strip()  # the project's own lines only
  comparison = json.loads((tmp_path / "comparison.json").read_text())
  values = {(v["task"], v["metric"], v["system"]): v for v in comparison["values"]}
  keys = {(t, m) for t, m, _ in values}
  assert keys == {("timedial_cloze_full", "accuracy"), ("timedial_cloze_full", "two_best_accuracy"),
                  ("summarize_feedback_preference", "pairwise_accuracy"), ("asq_intent_cloze", "accuracy"),
                  *{("asq_intent_cloze", f"accuracy/{g}") for g in ("C+E", "C+C", "C+{C,I}", "L+{U,I}")}}
  assert ["timedial_cloze_full", "error_rate/Rule 1"] in comparison["not_compared"]
  for name, directory in systems.items():
    for (task, metric), entry in ((k, outputs.read_metrics(directory)[k[0]][k[1]]) for k in keys):
      assert {k: values[(task, metric, name)][k] for k in entry} == entry

  differences = {(d["task"], d["metric"], d["a"], d["b"]): d for d in comparison["differences"]}
  assert len(differences) == 3 * len(keys)
  for task, metric in keys:
    flipped = differences[(task, metric, "baseline", "reversed")]
    assert flipped["difference"] == pytest.approx(values[(task, metric, "baseline")]["value"]
                                                  - values[(task, metric, "reversed")]["value"])
    assert flipped["low"] <= flipped["difference"] <= flipped["high"]
    same = differences[(task, metric, "baseline", "copy")]
    assert (same["difference"], same["low"], same["high"], same["p_bootstrap"]) == (0, 0, 0, 1)
    assert (same["a_better"], same["p_test"]) == (0, 1)
  for d in comparison["differences"]:  # the same items: each system's mean is its metrics.json value
    assert d["items"] == d["a_items"] == d["b_items"] == values[(d["task"], d["metric"], d["a"])]["items"], d
    assert (d["a_value"], d["b_value"]) == pytest.approx((values[(d["task"], d["metric"], d["a"])]["value"],
                                                          values[(d["task"], d["metric"], d["b"])]["value"]))
    # One resampling gives both: the interval excludes 0 exactly when p < 0.05, and the line says so.
    assert (d["p_bootstrap"] < 0.05) == (d["low"] > 0 or d["high"] < 0), d
    assert (f"{d['a']} - {d['b']}: {_fmt(d['difference'])} [{_fmt(d['low'])}, {_fmt(d['high'])}]  "
            f"p(bootstrap)={_fmt(d['p_bootstrap'])}  ") in result.stdout
  assert "items both scored" not in result.stdout
  # The credit each system gains over the other, by hand: top-1 credit with ties broken at random.
  credit = {name: [_credit(r["scores"], r["gold"]) for r in _records(directory)
                   if r["task"] == "timedial_cloze_full"] for name, directory in systems.items()}
  timedial = differences[("timedial_cloze_full", "accuracy", "baseline", "reversed")]
  pairs = list(zip(credit["baseline"], credit["reversed"]))
  partial = any(x not in (0, 1) for pair in pairs for x in pair)
  assert timedial["test"] == ("paired permutation" if partial else "McNemar exact")
  assert timedial["a_better"] == pytest.approx(sum(max(a - b, 0) for a, b in pairs))
  assert timedial["b_better"] == pytest.approx(sum(max(b - a, 0) for a, b in pairs))
  assert timedial["a_better"] + timedial["b_better"] > 0
  for d in comparison["differences"]:  # the counts' sign is the difference's, in every row
    assert np.sign(round(d["a_better"] - d["b_better"], 9)) == np.sign(d["difference"]), d
  # The items the two disagree on: every discordant item counted, the first ones by id listed with
  # both systems' scores of every candidate, as each system's predictions.jsonl has them.
  baseline_records = [r for r in _records(systems["baseline"]) if r["task"] == "timedial_cloze_full"]
  discordant = sorted(r["id"] for r, (a, b) in zip(baseline_records, pairs) if a != b)
  found = timedial["disagreements"]
  assert found["count"] == len(discordant) and [i["id"] for i in found["items"]] == discordant[:compare.DISAGREEMENTS_SHOWN]
  by_id = {name: {r["id"]: r for r in _records(directory) if r["task"] == "timedial_cloze_full"}
           for name, directory in systems.items()}
  for item in found["items"]:
    assert [c["a_score"] for c in item["candidates"]] == by_id["baseline"][item["id"]]["scores"]
    assert [c["b_score"] for c in item["candidates"]] == by_id["reversed"][item["id"]]["scores"]
    assert [c["correct"] for c in item["candidates"]] == [bool(g) for g in by_id["baseline"][item["id"]]["gold"]]
    assert item["context"]  # the conversation the baseline's records hold
  assert all("disagreements" not in d for d in comparison["differences"] if "/" in d["metric"])

  md, tex = (tmp_path / "comparison.md").read_text(), (tmp_path / "comparison.tex").read_text()
  page = (tmp_path / "report.html").read_text()
  for v in comparison["values"]:
    cell = f"{_fmt(v['value'])} [{_fmt(v['low'])}, {_fmt(v['high'])}]"
    assert cell in md and cell in page and cell.replace(" [", r"\ [") in tex
  for d in comparison["differences"]:
    cell = f"{_fmt(d['difference'])} [{_fmt(d['low'])}, {_fmt(d['high'])}]"
    row = [d["task"], d["metric"], d["a"], d["b"], str(d["items"]), cell, _fmt(d["p_bootstrap"]),
           compare.better_cell(d), d["test"], _fmt(d["p_test"])]
    assert "| " + " | ".join(row) + " |" in md
    assert cell in page and cell.replace(" [", r"\ [") in tex and f"${_fmt(d['p_test'])}$" in tex
  assert r"\toprule" in tex and r"\bottomrule" in tex and r"asq\_intent\_cloze" in tex
  assert len(list(tmp_path.glob("plot_*.png"))) == len(keys)
  assert "asq_intent_cloze: accuracy/C+E" in page
  assert f"baseline and reversed disagree on {found['count']} items" in page


def test_no_shared_items_or_different_gold_exit_1_naming_the_task(systems, tmp_path):
  records = _records(systems["baseline"])
  renamed = [{**r, "id": f"other-{r['id']}"} if r["task"] == "timedial_cloze_full" else r for r in records]
  metrics = outputs.read_metrics(systems["baseline"])
  disjoint = {"baseline": systems["baseline"], "renamed": _write_system(tmp_path / "renamed", renamed, metrics)}
  result = _command(disjoint, tmp_path / "out")
  assert result.returncode == 1
  count = sum(r["task"] == "timedial_cloze_full" for r in records)
  assert result.stderr.strip().splitlines() == [
      f"error: task timedial_cloze_full: baseline and renamed scored no item in common (baseline scored {count}, "
      f"renamed {count}; items are matched by task and id)"]
  assert not (tmp_path / "out").exists()

  regold = [{**r, "gold": r["gold"][::-1]} if r["id"] == "qs_te02" else r for r in records]
  loaded = {"baseline": compare.load_system(systems["baseline"]),
            "regold": compare.load_system(_write_system(tmp_path / "regold", regold, metrics))}
  with pytest.raises(compare.ComparisonError,
                     match=r"task asq_intent_cloze: .* gold labels for items qs_te02$"):
    compare.check_shared_items(loaded)


def test_predictions_that_disagree_with_their_metrics_are_refused(systems, tmp_path):
  metrics = outputs.read_metrics(systems["baseline"])
  metrics["asq_intent_cloze"]["accuracy"] = outputs.interval(0.5, 0.25, 0.75)
  records = _records(systems["baseline"])
  fv = flags.FlagValues()
  compare.define_flags(fv)
  fv(["compare", f"--eval_dirs=baseline={systems['baseline']},edited="
      f"{_write_system(tmp_path / 'edited', records, metrics)}", f"--out={tmp_path / 'out'}",
      "--metric=accuracy"])
  with pytest.raises(compare.ComparisonError, match=r"edited: asq_intent_cloze accuracy recomputed .* "
                     r"metrics.json says 0.500000"):
    compare.run(fv)


def _asq_records(ids, rng) -> list[dict]:
  """Two-candidate ASQ items, one correct, scored at random from few values (so with ties)."""
  records = []
  for item in ids:
    gold = [1, 0] if rng.random() < 0.5 else [0, 1]
    scores = [float(x) for x in rng.integers(0, 3, size=2)]
    records.append({"task": "asq_intent_cloze", "id": item, "scores": scores,
                    "prediction": int(np.argmax(scores)), "gold": gold})
  return records


def _accuracy(records) -> dict:
  value = float(np.mean([_credit(r["scores"], r["gold"]) for r in records]))
  return {"asq_intent_cloze": {"accuracy": outputs.interval(value, max(0.0, value - 0.1), min(1.0, value + 0.1))}}


def test_systems_are_compared_on_the_items_both_scored(tmp_path, capsys):
  """A model that scored all 40 items beside a baseline that scored its held-out 12 (as ASQ's
  similarity baseline with --train_fraction=0.7): the 12 compared, the difference theirs."""
  rng = np.random.default_rng(7)
  ids = [f"item{i:02d}" for i in range(40)]
  model = _asq_records(ids, rng)
  # The baseline's items in another order, with the model's gold labels and its own scores.
  baseline = [{**r, "scores": [float(x) for x in rng.integers(0, 3, size=2)]} for r in model[28:]][::-1]
  dirs = {"model": _write_system(tmp_path / "model", model, _accuracy(model)),
          "similarity": _write_system(tmp_path / "similarity", baseline, _accuracy(baseline))}
  result = _run_in_process(dirs, tmp_path / "out", "--num_bootstrap=200")
  printed = capsys.readouterr().out.splitlines()
  assert printed[0] == "asq_intent_cloze: comparing 12 items both scored (model scored 40, similarity 12)"
  assert result["shared_items"] == printed[:1]
  (d,) = result["differences"]
  shared = {r["id"] for r in baseline}
  by_hand = {name: np.mean([_credit(r["scores"], r["gold"]) for r in records if r["id"] in shared])
             for name, records in (("model", model), ("similarity", baseline))}
  assert (d["items"], d["a_items"], d["b_items"]) == (12, 40, 12)
  assert d["difference"] == pytest.approx(by_hand["model"] - by_hand["similarity"])
  assert (d["a_value"], d["b_value"]) == pytest.approx((by_hand["model"], by_hand["similarity"]))
  assert d["low"] <= d["difference"] <= d["high"] and (d["p_bootstrap"] < 0.05) == (d["low"] > 0 or d["high"] < 0)
  # Each system's value is its own, on all the items it scored.
  assert [(v["system"], v["items"], v["value"]) for v in result["values"]] == [
      ("model", 40, _accuracy(model)["asq_intent_cloze"]["accuracy"]["value"]),
      ("similarity", 12, _accuracy(baseline)["asq_intent_cloze"]["accuracy"]["value"])]
  assert "asq_intent_cloze: comparing 12 items both scored" in (tmp_path / "out" / "report.html").read_text()

  # A shared item with other gold labels is another item under the same id: refused.
  regold = [{**r, "gold": r["gold"][::-1]} if r["id"] == "item30" else r for r in baseline]
  refused = {"model": dirs["model"], "regold": _write_system(tmp_path / "regold", regold, _accuracy(regold))}
  with pytest.raises(compare.ComparisonError,
                     match=r"^task asq_intent_cloze: model and regold have different gold labels for items item30$"):
    _run_in_process(refused, tmp_path / "refused")


def test_asq_similarity_on_its_held_out_share_beside_all_of_the_real_test_file(tmp_path, capsys, shared_data):
  """docs/evaluation.md's real-data baseline (trained on the first 70% of the real test file, tested
  on the rest) beside a system that scored the whole file (the baseline trained on the quickstart
  train file, standing in for the model): compared on the 300 both scored."""
  test_file = shared_data / "asq" / "asq_test_first1000.json"
  _run_baseline(["--baseline=asq_similarity", f"--eval_file={test_file}", "--train_fraction=0.7"],
                tmp_path / "heldout")
  _run_baseline(["--baseline=asq_similarity", f"--train_file={DATA / 'asq_train.json'}",
                 f"--eval_file={test_file}"], tmp_path / "whole")
  capsys.readouterr()
  result = _run_in_process({"whole": tmp_path / "whole", "heldout": tmp_path / "heldout"}, tmp_path / "out",
                           "--num_bootstrap=200", "--metric=accuracy")
  assert capsys.readouterr().out.splitlines()[0] == (
      "asq_intent_cloze: comparing 300 items both scored (whole scored 1000, heldout 300)")
  (d,) = result["differences"]
  records = {name: {r["id"]: r for r in _records(tmp_path / name)} for name in ("whole", "heldout")}
  assert list(records["heldout"]) == list(records["whole"])[700:]  # the file's last 300, by id
  by_hand = {name: np.mean([_credit(r["scores"], r["gold"]) for i, r in records[name].items()
                            if i in records["heldout"]]) for name in records}
  assert d["items"] == 300 and d["difference"] == pytest.approx(by_hand["whole"] - by_hand["heldout"])


def _run_in_process(eval_dirs: dict, out: str, *args) -> dict:
  fv = flags.FlagValues()
  compare.define_flags(fv)
  fv(["compare", "--eval_dirs=" + ",".join(f"{n}={d}" for n, d in eval_dirs.items()), f"--out={out}", *args])
  return compare.run(fv)


def test_compare_reads_and_writes_a_bucket_as_a_folder(systems, tmp_path, bucket):
  """Evaluation directories in a bucket (their predictions.jsonl and metrics.json copied there) and
  --out in a bucket: the same comparison as from and to local folders."""
  import storage  # pylint: disable=g-import-not-at-top
  in_bucket = {}
  for name, directory in systems.items():
    in_bucket[name] = f"{bucket}/{name}"
    for file in (outputs.PREDICTIONS_FILE, outputs.METRICS_FILE):
      storage.write_bytes(storage.join(in_bucket[name], file), (pathlib.Path(directory) / file).read_bytes())
  local = _run_in_process(systems, tmp_path, "--num_bootstrap=50")
  found = _run_in_process(in_bucket, f"{bucket}/out", "--num_bootstrap=50")
  assert [s["dir"] for s in found["systems"]] == list(in_bucket.values())
  strip = lambda result: {k: v for k, v in result.items() if k != "systems"}
  assert strip(found) == strip(local) and found["values"]
  assert json.loads(storage.read_text(f"{bucket}/out/comparison.json")) == found
  for name in ("comparison.md", "comparison.tex"):
    expected = (tmp_path / name).read_text()
    for system, directory in systems.items():
      expected = expected.replace(directory, in_bucket[system])
    assert storage.read_text(f"{bucket}/out/{name}") == expected
  assert storage.exists(f"{bucket}/out/report.html")
