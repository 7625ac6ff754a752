"""ASQ annotation analysis: real files against raw counts and the paper's Table 4, small cases
against hand computation, and the pair-type table as metrics.json computes it."""
import json
import math
import pathlib
import re

import pytest

from t5_tasks.analysis import asq
from t5_tasks.sources.asq import AsqAnnotation, read_asq_annotations


def _ann(item_id, true_label, annotated, true_type=1, paired_type=3):
  return AsqAnnotation(item_id, true_label, annotated, true_type, paired_type)


def test_human_accuracy_equals_raw_count(shared_data):
  paths = [shared_data / "asq" / name for name in ("annotation_first.json", "annotation_second.json")]
  raw = [json.load(open(p, encoding="utf-8")) for p in paths]
  rounds = [read_asq_annotations(str(p))[0] for p in paths]
  result = asq.analyze(*rounds)
  for name, rows in zip(("first", "second"), raw):
    correct = sum(r["true_label"] == r["annotated_label"] for r in rows)
    assert result["human_accuracy"][name]["value"] == pytest.approx(correct / len(rows))
    assert result["human_accuracy"][name]["n"] == len(rows)
  assert "pooled" not in result["human_accuracy"]  # the second round measures agreement only
  shared = {r["id"] for r in raw[0]} & {r["id"] for r in raw[1]}
  assert result["agreement"]["n_shared"] == len(shared)
  first = {r["id"]: r["annotated_label"] for r in raw[0]}
  same = sum(first[r["id"]] == r["annotated_label"] for r in raw[1] if r["id"] in shared)
  assert result["agreement"]["raw_agreement"] == pytest.approx(same / len(shared))
  assert sum(map(sum, result["qn_type_pairs"]["first"]["counts"])) == len(raw[0])


def test_kappa_by_hand():
  first = [_ann(f"i{k}", 0, a) for k, a in enumerate([0, 0, 1, 1, 0, 1])] + [_ann("only_first", 1, 1)]
  second = [_ann(f"i{k}", 0, a) for k, a in enumerate([0, 1, 1, 1, 0, 0])]
  # Observed agreement 4/6; each round says 0 half the time, so chance agreement is 1/2.
  expected_kappa = (4 / 6 - 1 / 2) / (1 - 1 / 2)
  result = asq.round_agreement(first, second)
  assert result["n_shared"] == 6
  assert result["kappa"] == pytest.approx(expected_kappa)
  assert result["raw_agreement"] == pytest.approx(4 / 6)
  assert result["accuracy_first"] == pytest.approx(3 / 6)


def test_rounds_without_shared_items_are_an_error():
  with pytest.raises(ValueError, match="share no item ids"):
    asq.round_agreement([_ann("a", 0, 0)], [_ann("b", 0, 0)])


def test_pair_type_table_and_accuracy_by_hand():
  # (true type, paired type, annotator correct?) with the groups each pair falls in, by the paper:
  # C = compatible (1 likely, 2 unlikely), E = 3 explicit, I = 4 implicit, L = 1, U = 2.
  cases = [
      ((1, 3), True, {"C+E"}),
      ((2, 3), False, {"C+E"}),
      ((1, 1), True, {"C+{C,I}", "C+C"}),
      ((1, 2), False, {"C+{C,I}", "C+C", "L+{U,I}"}),
      ((2, 4), True, {"C+{C,I}"}),
      ((1, 4), True, {"C+{C,I}", "L+{U,I}"}),
      ((0, 3), False, set()),
  ]
  annotations = [_ann(f"i{k}", 0, 0 if ok else 1, t, p) for k, ((t, p), ok, _) in enumerate(cases)]
  table = asq.qn_type_pairs(annotations)
  assert table["qn_types"] == ["G", "L", "U", "E", "I"]
  assert table["counts"][1] == [0, 1, 1, 1, 1]
  assert table["counts"][2] == [0, 0, 0, 1, 1]
  assert table["counts"][0] == [0, 0, 0, 1, 0]
  result = asq.analyze(annotations)["by_pair_type"]["humans"]
  for group in ("C+E", "C+{C,I}", "C+C", "L+{U,I}"):
    members = [ok for _, ok, groups in cases if group in groups]
    assert result[group]["n"] == len(members)
    assert result[group]["value"] == pytest.approx(sum(members) / len(members))
  assert result["all"]["value"] == pytest.approx(4 / 7)


def test_system_predictions_broken_down_by_annotated_pair_type():
  annotations = [_ann("a", 0, 0, 1, 3), _ann("b", 1, 1, 1, 1), _ann("c", 0, 0, 1, 2)]
  predictions = [
      {"task": "asq", "id": "a", "scores": [2.0, 1.0], "prediction": 0, "gold": [1, 0]},   # right, C+E
      {"task": "asq", "id": "b", "scores": [2.0, 1.0], "prediction": 0, "gold": [0, 1]},   # wrong, C+C
      {"task": "asq", "id": "c", "scores": [0.0, 1.0], "prediction": 1, "gold": [0, 1]},   # right, C+C, L+{U,I}
      {"task": "asq", "id": "z", "scores": [0.0, 1.0], "prediction": 1, "gold": [1, 0]},   # wrong, unannotated
  ]
  result = asq.analyze(annotations, system_predictions={"sys": predictions})
  assert result["system_accuracy"]["sys"]["value"] == pytest.approx(2 / 4)
  by_type = result["by_pair_type"]["sys"]
  assert by_type["all"]["value"] == pytest.approx(2 / 3)
  assert by_type["C+E"]["value"] == 1.0
  assert by_type["C+C"]["value"] == pytest.approx(1 / 2)
  assert by_type["L+{U,I}"]["value"] == 1.0


def test_prediction_without_gold_is_named():
  with pytest.raises(ValueError, match="prediction 0: needs 'id', and 'scores' and 'gold' lists of one length"):
    asq.system_credit([{"id": "a", "prediction": 0, "scores": [1.0, 0.0]}])


def test_a_tie_gets_half_credit_whatever_prediction_names():
  annotations = [_ann("a", 0, 0, 1, 3), _ann("b", 0, 0, 1, 3)]
  predictions = [{"id": "a", "scores": [1.0, 1.0], "prediction": 0, "gold": [1, 0]},
                 {"id": "b", "scores": [1.0, 1.0], "prediction": 0, "gold": [0, 1]}]
  result = asq.analyze(annotations, system_predictions={"tied": predictions})
  assert result["by_pair_type"]["tied"]["C+E"]["value"] == 0.5
  assert result["system_accuracy"]["tied"]["value"] == 0.5


def test_a_system_with_no_annotated_item_is_said_in_one_line():
  predictions = [{"id": "z", "scores": [1.0, 0.0], "prediction": 0, "gold": [1, 0]}]
  result = asq.analyze([_ann("a", 0, 0)], system_predictions={"elsewhere": predictions})
  assert "elsewhere" not in result["by_pair_type"]
  assert result["warnings"] == ["elsewhere: none of its 1 items is annotated in these rounds (the annotated "
                                "items are ASQ's asq_annotation.json), so it has no accuracy-by-pair-type row"]


PAPER = pathlib.Path(__file__).resolve().parents[3] / "shared" / "papers" / "asq.txt"


def _paper_table4() -> dict[str, tuple[float, float]]:
  """{pair type: (HUMAN, % in data)} parsed from the paper's Table 4 (columns SIM FT-LM HUMAN %)."""
  text = PAPER.read_text(encoding="utf-8")
  table = text[text.index("Pair type SIM FT-LM HUMAN % in data"):text.index("OVERALL")]
  rows = re.findall(r"([CL] \+ (?:E|C|\{[A-Z], [A-Z]\})) (\d+)% (\d+)% (\d+)% (\d+)%", table)
  return {name.replace(" ", ""): (int(human) / 100, int(share) / 100) for name, _, _, human, share in rows}


def _percent(share: float) -> float:
  return math.floor(100 * share + 0.5 + 1e-9) / 100


def test_table4_human_rows_and_shares_are_the_first_rounds(shared_data):
  if not PAPER.is_file():
    pytest.skip(f"the paper's text is not at {PAPER}")
  paper = _paper_table4()
  assert set(paper) == {"C+E", "C+{C,I}", "C+C", "L+{U,I}"}
  assert paper["C+C"] == (0.84, 0.32) and paper["C+{C,I}"] == (0.89, 0.46)  # the parse itself
  rounds = [read_asq_annotations(str(shared_data / "asq" / f"annotation_{r}.json"))[0] for r in ("first", "second")]
  result = asq.analyze(*rounds)
  for group, (human, share) in paper.items():
    # The paper prints whole percents, rounded half up (91 of 200 = 45.5% prints as 46%).
    assert _percent(result["by_pair_type"]["humans"][group]["value"]) == human, group
    assert _percent(result["pair_type_shares"][group]["share"]) == share, group
  assert result["by_pair_type"]["humans"]["all"]["n"] == 200
  # Pooling the second round in (the earlier rows) misses the paper: C+C 0.86, C+{C,I} 0.90.
  pooled = asq.analyze(rounds[0] + rounds[1])["by_pair_type"]["humans"]
  assert _percent(pooled["C+C"]["value"]) == 0.86 != paper["C+C"][0]


def test_pair_type_table_is_metrics_json_s(shared_data):
  """scripts.analyze's accuracy by pair type of a system equals the per-group accuracy metrics.json
  gets from the same scores (t5_tasks.metrics.asq_metric_fn on the records the evaluation reads),
  on the real annotated items, with a tie-heavy system (scores by question length mod 3)."""
  from t5_tasks import families, metrics, tasks  # pylint: disable=g-import-not-at-top
  folder = shared_data / "asq"
  files = {"asq": {"annotation": str(folder / "asq_annotation.json")},
           "asq_annotations": {r: str(folder / f"annotation_{r}.json") for r in ("first", "second")}}
  examples = families.asq_examples(files)["annotation"]
  scores = [[float(len(q) % 3) for q in e["candidates"]] for e in examples]
  assert sum(s[0] == s[1] for s in scores) > len(scores) / 5  # many ties
  # As runner.eval_metrics.task_metrics makes them: each record's metadata through the task's postprocessor.
  targets = [tasks.candidate_targets(None, example={k: v for k, v in e.items() if k != "candidates"},
                                     is_target=True) for e in examples]
  from_metrics = metrics.asq_metric_fn(targets, scores)
  rounds = [read_asq_annotations(files["asq_annotations"][r])[0] for r in ("first", "second")]
  predictions = [{"id": e["id"], "scores": s, "prediction": int(s[1] > s[0]), "gold": e["candidate_labels"]}
                 for e, s in zip(examples, scores)]
  analysis = asq.analyze(*rounds, system_predictions={"sys": predictions})
  by_type = analysis["by_pair_type"]["sys"]
  # The two overall rows: metrics.json's `accuracy` is every scored item (the 500), the "all" row
  # the 200 the first round annotated (the second's 75 are among them), 33 in no pair type.
  assert {k: analysis["system_accuracy"]["sys"][k] for k in ("value", "low", "high", "n")} == {
      "value": from_metrics["accuracy"], "low": from_metrics["accuracy_low"],
      "high": from_metrics["accuracy_high"], "n": 500}
  assert by_type["all"]["n"] == 200
  assert analysis["overall_rows"]["all"] == "overall (the 200 items a round annotated, 33 of them in no pair type)"
  groups = [g for g in by_type if g != "all"]
  assert sorted(groups) == sorted(k.partition("/")[2] for k in from_metrics if k.count("/") == 1
                                  and not k.endswith(("_low", "_high")))
  for group in groups:
    assert by_type[group]["value"] == pytest.approx(from_metrics[f"accuracy/{group}"], abs=1e-12), group
    assert by_type[group]["n"] == sum(group in metrics.item_groups(t) for t in targets), group
    # One interval function and seed in both: the same interval, bound for bound.
    assert (by_type[group]["low"], by_type[group]["high"]) == (
        from_metrics[f"accuracy/{group}_low"], from_metrics[f"accuracy/{group}_high"]), group


def _annotation_split(folder) -> list[dict]:
  """The registered task's `annotation` split with the release's files bound, as an evaluation
  with SPLIT='annotation' reads it."""
  import gin  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  from t5_tasks import tasks  # pylint: disable=g-import-not-at-top,unused-import  (registers the tasks)
  files = {"asq": {"annotation": str(folder / "asq_annotation.json")},
           "asq_annotations": {r: str(folder / f"annotation_{r}.json") for r in ("first", "second")}}
  gin.clear_config()
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", files)
  try:
    task = seqio.get_mixture_or_task("asq_intent_cloze")
    assert "annotation" in task.splits and "heldout" in task.splits
    return task.source.examples("annotation")
  finally:
    gin.clear_config()


def test_the_annotation_split_gives_table4s_rows_through_the_models_metric(shared_data):
  """One evaluation of the `annotation` split is a model's Table 4 row: its 500 items, each pair type
  the first round's, and the model's metric (metrics.asq_metric_fn, what metrics.json holds) fed the
  first round's own answers as scores gives the paper's human row (C+C 0.84, C+{C,I} 0.89)."""
  from t5_tasks import metrics, tasks  # pylint: disable=g-import-not-at-top
  if not PAPER.is_file():
    pytest.skip(f"the paper's text is not at {PAPER}")
  examples = _annotation_split(shared_data / "asq")
  assert len(examples) == 500
  first = {a.id: a for a in read_asq_annotations(str(shared_data / "asq" / "annotation_first.json"))[0]}
  # A judge choosing as the first round's annotator did, on the 200 items that round annotated.
  judged = [e for e in examples if e["id"] in first]
  assert len(judged) == 200
  scores = [[float(i == first[e["id"]].annotated_label) for i in range(2)] for e in judged]
  targets = [tasks.candidate_targets(None, example={k: v for k, v in e.items() if k != "candidates"},
                                     is_target=True) for e in judged]
  from_metrics = metrics.asq_metric_fn(targets, scores)
  for group, (human, share) in _paper_table4().items():
    assert _percent(from_metrics[f"accuracy/{group}"]) == human, group
    in_group = sum(group in metrics.item_groups(t) for t in targets)
    assert _percent(in_group / len(judged)) == share, group
  # The items no round annotated count in the overall accuracy and in no group.
  unjudged = [e for e in examples if e["id"] not in first]
  assert len(unjudged) == 300 and not any(e["pair_groups"] for e in unjudged)


def test_the_quickstart_has_its_asq_splits_and_the_annotation_split_names_its_binding():
  """train, test and heldout from quickstart files; the annotation split has none (the release's
  asq_annotation.json is bound from ../shared/data), and asking for it says what to bind."""
  import seqio  # pylint: disable=g-import-not-at-top
  from t5_tasks import tasks  # pylint: disable=g-import-not-at-top,unused-import
  task = seqio.get_mixture_or_task("asq_intent_cloze")
  counts = {split: len(task.source.examples(split)) for split in ("train", "test", "heldout")}
  assert counts == {"train": 16, "test": 12, "heldout": 4}
  assert not any(e["pair_groups"] for e in task.source.examples("heldout"))
  with pytest.raises(ValueError, match=r"no 'annotation' split in the files bound.*bind a 'annotation' file"):
    task.source.examples("annotation")


def _metrics_json_and_analysis(n_items: int, seed: int = 0):
  """(metrics.asq_metric_fn's output, scripts.analyze asq's result) on the same predictions of
  `n_items` items, the first two thirds annotated (cycling through the pair types, G+E in none)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from t5_tasks import metrics  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import asq as asq_source  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(7)
  kinds = [(1, 3), (2, 3), (1, 1), (1, 2), (2, 4), (1, 4), (0, 3)]
  annotations = [_ann(f"i{k}", k % 2, k % 2, *kinds[k % len(kinds)]) for k in range(2 * n_items // 3)]
  gold = [[1, 0] if k % 2 == 0 else [0, 1] for k in range(n_items)]
  scores = [[float(x) for x in rng.integers(0, 3, size=2)] for _ in range(n_items)]  # ties too
  by_id = {a.id: asq_source.pair_groups(a.true_qn_type, a.paired_qn_type) for a in annotations}
  targets = [{"candidate_labels": g, "pair_groups": "|".join(by_id.get(f"i{k}", ()))} for k, g in enumerate(gold)]
  predictions = [{"id": f"i{k}", "scores": s, "gold": g} for k, (s, g) in enumerate(zip(scores, gold))]
  return (metrics.asq_metric_fn(targets, scores),
          asq.analyze(annotations, system_predictions={"sys": predictions}, seed=seed))


def test_metrics_json_and_scripts_analyze_give_identical_intervals():
  """The same predictions: each pair type's accuracy and interval in metrics.json equal scripts.analyze
  asq's, and metrics.json's `accuracy` (every scored item) is the analysis' system_accuracy, not its
  "all" row (the annotated items only): the two overall rows are labelled with their populations."""
  from_metrics, analysis = _metrics_json_and_analysis(90)
  by_type = analysis["by_pair_type"]["sys"]
  for group in ("C+E", "C+{C,I}", "C+C", "L+{U,I}"):
    ours = {k: by_type[group][k] for k in ("value", "low", "high")}
    assert ours == {"value": from_metrics[f"accuracy/{group}"], "low": from_metrics[f"accuracy/{group}_low"],
                    "high": from_metrics[f"accuracy/{group}_high"]}, group
    assert ours["low"] < ours["value"] < ours["high"], group  # a real interval, not a degenerate one
  overall = analysis["system_accuracy"]["sys"]
  assert overall["n"] == 90 and by_type["all"]["n"] == 60
  assert [overall[k] for k in ("value", "low", "high")] == [
      from_metrics["accuracy"], from_metrics["accuracy_low"], from_metrics["accuracy_high"]]
  assert analysis["overall_rows"] == {
      "all": "overall (the 60 items a round annotated, 8 of them in no pair type)",
      "system_accuracy": "overall (every item the system scored: metrics.json's accuracy)"}
  assert analysis["warnings"] == []
  # Another seed draws other intervals, and says that metrics.json's are seed 0.
  _, reseeded = _metrics_json_and_analysis(90, seed=3)
  bounds = lambda rows: [(e["low"], e["high"]) for e in rows.values()]
  assert bounds(reseeded["by_pair_type"]["sys"]) != bounds(by_type)
  assert reseeded["warnings"] == ["intervals drawn with seed 3; metrics.json's are seed 0, so a system's "
                                  "intervals here differ from its metrics.json's"]


def test_the_shared_interval_on_cases_whose_answer_is_known():
  """A group all right (or all wrong) has the interval [1, 1] ([0, 0]); one item, its own value; a
  balanced group's percentile interval holds its mean and lies within the normal approximation's
  reach (mean 0.5, n 400: 0.5 +- 1.96 * 0.025 = [0.451, 0.549], to a resampling error of ~0.01)."""
  assert asq.accuracy_interval([1.0] * 20) == {"value": 1.0, "low": 1.0, "high": 1.0, "n": 20}
  assert asq.accuracy_interval([0.0] * 5)["high"] == 0.0
  assert asq.accuracy_interval([0.5]) == {"value": 0.5, "low": 0.5, "high": 0.5, "n": 1}
  balanced = asq.accuracy_interval([1.0, 0.0] * 200)
  assert balanced["value"] == 0.5
  assert balanced["low"] == pytest.approx(0.451, abs=0.012) and balanced["high"] == pytest.approx(0.549, abs=0.012)
