"""The evaluation report: reference figures, whole labels, single-value charts, items most wrong."""
import dataclasses
import html
import re

from runner import eval_metrics
from runner import report


def _entry(value, low, high):
  return {"value": value, "low": low, "high": high}


METRICS = {
    "timedial_cloze_full": {"two_best_accuracy": _entry(0.0, 0.0, 0.0)},
    "asq_intent_cloze": {"accuracy": _entry(0.7, 0.6, 0.8), "accuracy/C+E": _entry(0.9, 0.8, 1.0),
                         "accuracy/C+C": _entry(0.6, 0.5, 0.7)},
    "heap_ag": {"accuracy": _entry(0.55, 0.5, 0.6)},
}
REFERENCES = {
    "timedial_cloze_full": [("two_best_accuracy", "human", 0.978, "TimeDial Table 5, row 'human'")],
    "asq_intent_cloze": [("accuracy", "chance", 0.5, "ASQ footnote 16"),
                         ("accuracy/C+E", "human", 1.0, "ASQ Table 4, row 'C + E'")],
    "not_evaluated": [("accuracy", "human", 0.9, "elsewhere")],
}


def test_report_lists_and_draws_the_reference_figures(tmp_path):
  page = open(report.write_report(str(tmp_path), title="t", metrics=METRICS, references=REFERENCES),
              encoding="utf-8").read()
  assert "Reference figures" in page
  for task, figures in REFERENCES.items():
    for metric, label, value, source in figures:
      row = (f"<tr><td>{task}</td><td>{html.escape(metric)}</td><td>{label}</td><td>{value:.4g}</td>")
      assert (row in page) == (task != "not_evaluated"), row  # only the evaluated tasks'
      assert (html.escape(source) in page) == (task != "not_evaluated")
  for image in re.findall(r"<img src='([^']+)'", page):
    assert (tmp_path / image).is_file(), image
  charts = {c.title: c for c in report.metric_charts(METRICS, REFERENCES)}
  assert charts["two_best_accuracy"].references == (
      [report.ReferenceLine("human", 0.978)])  # its one bar: across the chart
  # Two bars (asq_intent_cloze, heap_ag), a figure for one of them: drawn over that bar only.
  assert charts["accuracy"].references == [report.ReferenceLine("chance", 0.5, bar=0)]
  assert charts["asq_intent_cloze: accuracy by group"].references == [
      report.ReferenceLine("human", 1.0, bar=0)]


def test_a_chart_of_one_zero_value_shows_where_its_bar_is():
  """A two-best accuracy of 0 alone: matplotlib centred an empty axis on it (-0.055..0.055)."""
  chart = report.BarChart("two_best_accuracy", ["timedial_cloze_full"], [0.0], [0.0], [0.0])
  fig = report.chart_figure(chart)
  ax = fig.axes[0]
  low, high = ax.get_ylim()
  assert -0.05 < low <= 0 and high >= 0.5
  assert len(ax.patches) == 1 and [t.get_text() for t in ax.texts] == ["0"]  # the bar, its value
  report.plt.close(fig)
  with_chance = report.chart_figure(dataclasses.replace(chart, references=[report.ReferenceLine("chance", 1 / 6)]))
  low, high = with_chance.axes[0].get_ylim()
  assert -0.05 < low <= 0 and high > 1 / 6
  assert "chance 0.167" in [t.get_text() for t in with_chance.axes[0].texts]
  report.plt.close(with_chance)


def test_long_tick_labels_are_whole_and_inside_the_figure():
  labels = ["heap_cluster_semantic_understanding (7)", "Rule 1", "timedial_cloze_full_tfds"]
  fig = report.chart_figure(report.BarChart("accuracy", labels, [0.5, 0.6, 0.7]))
  fig.canvas.draw()
  ticks = fig.axes[0].get_xticklabels()
  assert [t.get_text().replace("\n", "") for t in ticks] == labels
  frame = fig.bbox
  for tick in ticks:
    extent = tick.get_window_extent()
    assert extent.x0 >= frame.x0 and extent.x1 <= frame.x1 and extent.y0 >= frame.y0, tick.get_text()
  report.plt.close(fig)


def _record(item_id, scores, gold, context="ctx"):
  return {"task": "t", "id": item_id, "scores": scores, "gold": gold,
          "inputs_pretokenized": context, "candidates_pretokenized": [f"c{j}" for j in range(len(scores))]}


def test_worst_items_by_hand():
  records = [
      _record("right", [-1.0, -2.0, -3.0, -4.0], [1, 1, 0, 0]),  # ranked right: no margin
      _record("a", [-1.0, -0.5, -3.0, -0.25], [1, 1, 0, 0]),     # -0.25 - (-0.5) = 0.25
      _record("b", [-2.0, -5.0, -1.0, -9.0], [1, 0, 1, 0]),      # -5 < -1: none
      _record("c", [-4.0, -1.0], [1, 0]),                        # -1 - (-4) = 3
      _record("d", [-1.0, -0.75], [1, 0]),                       # 0.25, tied with "a": by id
      _record("only_gold", [-1.0], [1]),                         # a generation item: none
  ]
  items = eval_metrics.worst_items(records, count=2)
  assert [(i["id"], round(i["margin"], 6)) for i in items] == [("c", 3.0), ("a", 0.25)]
  assert items[0]["context"] == "ctx"
  assert items[0]["candidates"] == [("c0", -4.0, True), ("c1", -1.0, False)]
  assert [i["id"] for i in eval_metrics.worst_items(records)] == ["c", "a", "d"]


def test_report_shows_the_items_most_wrong(tmp_path):
  items = eval_metrics.worst_items([_record("x<1>", [-3.0, -1.0], [1, 0], context="A: it took <MASK>.")])
  page = open(report.write_report(str(tmp_path), title="t", metrics=METRICS,
                                  tables=[report.worst_items_table("timedial_cloze_full", items)]),
              encoding="utf-8").read()
  assert "timedial_cloze_full: the 1 items most wrong" in page
  assert ("<tr><td>x&lt;1&gt;</td><td>2</td><td>A: it took &lt;MASK&gt;.</td><td>c0</td><td>-3</td>"
          "<td>yes</td></tr><tr><td></td><td></td><td></td><td>c1</td><td>-1</td><td>no</td></tr>") in page
