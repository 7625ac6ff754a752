"""Averages over groups of tasks (HEAP's clusters and overall average) against hand computations."""
import numpy as np
import pytest

from runner import eval_metrics
from runner import report
from t5_tasks import metrics as task_metrics


def _entry(value, low, high):
  return {"value": value, "low": low, "high": high}


METRICS = {
    "heap_ah": {"pairwise_accuracy": _entry(0.6, 0.5, 0.7)},
    "heap_ag": {"pairwise_accuracy": _entry(0.8, 0.7, 0.9), "spearman": _entry(0.3, 0.1, 0.5)},
    "heap_dia": {"pairwise_accuracy": _entry(0.5, 0.4, 0.6), "spearman": _entry(0.2, 0.0, 0.4)},
    "asq_intent_cloze": {"accuracy": _entry(0.9, 0.8, 1.0)},
}


def test_each_metric_every_member_reports_is_averaged_unweighted():
  groups = eval_metrics.group_metrics(METRICS, {
      "all": ["heap_ah", "heap_ag", "heap_dia", "heap_not_evaluated"],
      "ranked": ["heap_ag", "heap_dia", "heap_ag"],  # a task named twice counts once
      "none_evaluated": ["heap_cnsp"]})
  assert sorted(groups) == ["all", "ranked"]
  accuracy = [METRICS[t]["pairwise_accuracy"] for t in ("heap_ah", "heap_ag", "heap_dia")]
  for key in ("value", "low", "high"):
    assert groups["all"]["pairwise_accuracy"][key] == pytest.approx(np.mean([e[key] for e in accuracy]))
  assert groups["all"]["pairwise_accuracy"]["tasks"] == 3
  assert "spearman" not in groups["all"]  # heap_ah has none: no average over a part of the group
  assert groups["ranked"]["spearman"] == {"value": pytest.approx(0.25), "low": pytest.approx(0.05),
                                          "high": pytest.approx(0.45), "tasks": 2}


def test_a_group_named_like_a_task_is_refused():
  with pytest.raises(ValueError, match="metric group 'heap_ah' is named like a task"):
    eval_metrics.group_metrics(METRICS, {"heap_ah": ["heap_ag"]})
  assert eval_metrics.group_metrics(METRICS, None) == {}


def test_heap_groups_name_the_evaluated_criteria_of_each_cluster():
  clusters = {"context": ("AH", "QA"), "hate_speech": ("CNG", "HSO"), "story_rewriting": ("SRC",)}
  groups = task_metrics.heap_metric_groups(
      ["heap_ah", "heap_qa_tfds", "heap_hso", "heap_srs", "asq_intent_cloze"], clusters,
      criteria=("AH", "QA", "CNG", "HSO", "SRC", "SRS"), task_name=lambda a: f"heap_{a.lower()}")
  assert groups == {"heap": ["heap_ah", "heap_qa_tfds", "heap_hso", "heap_srs"],
                    "heap_cluster_context": ["heap_ah", "heap_qa_tfds"],
                    "heap_cluster_hate_speech": ["heap_hso"]}


def test_report_shows_the_groups_beside_the_tasks(tmp_path):
  groups = eval_metrics.group_metrics(METRICS, {"heap": ["heap_ah", "heap_ag"]})
  page = open(report.write_report(str(tmp_path), title="t", metrics=METRICS, groups=groups),
              encoding="utf-8").read()
  assert "Averages over groups of tasks" in page and "<td>heap</td><td>pairwise_accuracy</td><td>2</td>" in page
  charts = len(report.metric_charts(METRICS)) + 1
  assert sorted(p.name for p in tmp_path.glob("*.png")) == [f"plot_{i:02d}.png" for i in range(charts)]
