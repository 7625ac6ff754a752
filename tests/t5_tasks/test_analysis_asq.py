"""ASQ annotation analysis: real files against raw counts, small cases against hand computation."""
import json

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
  pooled = raw[0] + raw[1]
  assert result["human_accuracy"]["pooled"]["value"] == pytest.approx(
      sum(r["true_label"] == r["annotated_label"] for r in pooled) / len(pooled))
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
  with pytest.raises(ValueError, match="prediction 0: needs 'id', 'prediction' and a 'gold' list"):
    asq.system_correct([{"id": "a", "prediction": 0}])
