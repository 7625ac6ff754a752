"""Evaluation outputs: atomic files, validation, resuming a cut-off predictions file, report."""
import json
import os

import pytest

from runner import outputs
from runner import report


def _record(i: int, task: str = "asq") -> dict:
  return {"task": task, "id": f"item{i}", "scores": [0.5 * i, -1.0], "prediction": 0, "gold": [1, 0]}


def test_predictions_and_metrics_round_trip(tmp_path):
  records = [_record(i) for i in range(3)] + [_record(0, task="timedial")]
  path = outputs.write_predictions(str(tmp_path), records)
  assert outputs.read_predictions(path) == records
  metrics = {"asq": {"accuracy": outputs.interval(0.75, 0.5, 0.9)}}
  outputs.write_metrics(str(tmp_path), metrics)
  assert outputs.read_metrics(str(tmp_path)) == {"asq": {"accuracy": {"value": 0.75, "low": 0.5, "high": 0.9}}}
  assert sorted(os.listdir(tmp_path)) == ["metrics.json", "predictions.jsonl"]  # No temp files left.


@pytest.mark.parametrize("record, message", [
    ({"id": "x"}, "field 'task'"),
    ({"task": "t", "id": ""}, "field 'id'"),
    ({"task": "t", "id": "x", "scores": [1.0, "a"]}, "'scores' must be a list of numbers"),
    ({"task": "t", "id": "x", "scores": [1.0], "prediction": 3}, "'prediction' 3 is not a candidate index"),
])
def test_bad_records_are_refused_and_nothing_written(tmp_path, record, message):
  with pytest.raises(outputs.OutputError, match=message):
    outputs.write_predictions(str(tmp_path), [_record(0), record])
  assert not os.listdir(tmp_path)


def test_nan_is_refused_in_metrics(tmp_path):
  with pytest.raises(outputs.OutputError, match=r"\['asq'\]\['accuracy'\]\['low'\]"):
    outputs.write_metrics(str(tmp_path), {"asq": {"accuracy": {"value": 0.5, "low": float("nan"), "high": 1}}})
  with pytest.raises(outputs.OutputError, match="missing"):
    outputs.write_metrics(str(tmp_path), {"asq": {"accuracy": {"value": 0.5}}})


def test_read_predictions_names_the_bad_line(tmp_path):
  path = tmp_path / "predictions.jsonl"
  path.write_text(json.dumps(_record(0)) + "\n{broken\n")
  with pytest.raises(outputs.OutputError, match=r"predictions.jsonl:2: invalid JSON"):
    outputs.read_predictions(str(path))


def test_resume_discards_a_truncated_last_line(tmp_path):
  with outputs.PredictionsAppender(str(tmp_path)) as appender:
    for i in range(3):
      appender.write(_record(i))
  path = tmp_path / "predictions.jsonl"
  full_line = json.dumps(_record(3))
  with open(path, "a") as f:
    f.write(full_line[:len(full_line) // 2])  # An interrupted write.
  assert outputs.read_written_ids(str(path)) == {("asq", "item0"), ("asq", "item1"), ("asq", "item2")}
  with outputs.PredictionsAppender(str(tmp_path)) as appender:
    assert appender.done == {("asq", f"item{i}") for i in range(3)}
    appender.write(_record(3))
    with pytest.raises(outputs.OutputError, match="already written"):
      appender.write(_record(1))
  assert [r["id"] for r in outputs.read_predictions(str(path))] == [f"item{i}" for i in range(4)]


def test_resume_refuses_a_corrupt_middle_line(tmp_path):
  path = tmp_path / "predictions.jsonl"
  path.write_text(json.dumps(_record(0)) + "\n{broken\n" + json.dumps(_record(1)) + "\n")
  with pytest.raises(outputs.OutputError, match="corrupt line"):
    outputs.PredictionsAppender(str(tmp_path))


def test_read_written_ids_of_missing_file_is_empty(tmp_path):
  assert outputs.read_written_ids(str(tmp_path / "none.jsonl")) == set()


def test_report_has_metrics_charts_and_escaped_tables(tmp_path):
  (tmp_path / "plot_07.png").write_bytes(b"old")  # From an earlier, longer report.
  metrics = {"timedial": {"two_best_accuracy": outputs.interval(0.6, 0.5, 0.7)},
             "asq": {"two_best_accuracy": outputs.interval(0.8, 0.7, 0.9)}}
  charts = [report.BarChart("error rate by rule", ["Rule 1", "Rule 2"], [0.4, 0.1], [0.3, 0.05], [0.5, 0.2])]
  tables = [report.Table("by <pair> type", ["type", "accuracy"], [["C+E", 0.95]])]
  path = report.write_report(str(tmp_path), title="Eval & co", metrics=metrics, charts=charts, tables=tables)
  page = open(path, encoding="utf-8").read()
  assert "Eval &amp; co" in page and "by &lt;pair&gt; type" in page and "<td>0.95</td>" in page
  pngs = sorted(f for f in os.listdir(tmp_path) if f.endswith(".png"))
  assert pngs == ["plot_00.png", "plot_01.png"]  # One per metric name, then the breakdown.
  for name in pngs:
    assert f"src='{name}'" in page
    assert open(tmp_path / name, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_written_files_are_readable_by_others_and_keep_the_provenance_apart(tmp_path):
  metrics = {"asq": {"accuracy": outputs.interval(0.75, 0.5, 0.9)}}
  outputs.write_metrics(str(tmp_path), metrics, provenance={"checkpoint_step": 50})
  report.write_report(str(tmp_path), title="t", metrics=metrics)
  modes = {name: os.stat(tmp_path / name).st_mode & 0o777 for name in os.listdir(tmp_path)}
  assert modes == {"metrics.json": 0o644, "report.html": 0o644, "plot_00.png": 0o644}
  assert outputs.read_metrics(str(tmp_path)) == metrics
  assert outputs.read_provenance(str(tmp_path)) == {"checkpoint_step": 50}
  with pytest.raises(outputs.OutputError, match="'provenance' is reserved"):
    outputs.write_metrics(str(tmp_path), {"provenance": {}})
