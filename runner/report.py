"""A small HTML report with PNG plots, for evaluations and analyses alike.

The page shows each metric with its 95% interval (table and bar chart with
error bars), then optional bar charts (breakdowns such as error rate by rule)
and tables. PNGs sit beside `report.html`; every file is written atomically.
"""
import dataclasses
import glob
import html
import io
import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # No display on servers; must precede pyplot.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

from runner import outputs

REPORT_FILE = "report.html"


@dataclasses.dataclass(frozen=True)
class BarChart:
  """Bars with optional [low, high] intervals drawn as error bars."""
  title: str
  labels: Sequence[str]
  values: Sequence[float]
  lows: Sequence[float] | None = None
  highs: Sequence[float] | None = None
  ylabel: str = ""


@dataclasses.dataclass(frozen=True)
class Table:
  title: str
  columns: Sequence[str]
  rows: Sequence[Sequence[object]]


def format_cell(value: object) -> str:
  if isinstance(value, float):
    return f"{value:.4g}"
  return str(value)


def _table_html(table: Table) -> str:
  head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
  body = "".join(
      "<tr>" + "".join(f"<td>{html.escape(format_cell(v))}</td>" for v in row) + "</tr>"
      for row in table.rows)
  return f"<h2>{html.escape(table.title)}</h2>\n<table><tr>{head}</tr>{body}</table>\n"


def _save_chart(chart: BarChart, path: str) -> None:
  fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(chart.labels) + 2), 3.5))
  positions = range(len(chart.labels))
  errors = None
  if chart.lows is not None and chart.highs is not None:
    # Clipped at 0: a bootstrap interval may sit entirely on one side of a tiny value.
    errors = [[max(0.0, v - lo) for v, lo in zip(chart.values, chart.lows)],
              [max(0.0, hi - v) for v, hi in zip(chart.values, chart.highs)]]
  ax.bar(positions, chart.values, yerr=errors, capsize=4, color="#4c72b0")
  ax.set_xticks(list(positions))
  ax.set_xticklabels(chart.labels, rotation=30, ha="right")
  ax.set_title(chart.title)
  ax.set_ylabel(chart.ylabel)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=90)
  plt.close(fig)
  outputs.atomic_write_bytes(path, buffer.getvalue())


def metric_charts(metrics: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[BarChart]:
  """Bar charts with intervals as error bars.

  Plain metrics get one chart per metric name, a bar per task; grouped ones
  ("accuracy/C+E", "error_rate/Rule 1") one chart per task and metric, a bar per group.
  """
  by_metric: dict[str, list[tuple[str, Mapping[str, float]]]] = {}
  for task, by_name in metrics.items():
    for name, entry in by_name.items():
      if "/" in name:
        metric, group = name.split("/", 1)
        by_metric.setdefault(f"{task}: {metric} by group", []).append((group, entry))
      else:
        by_metric.setdefault(name, []).append((task, entry))
  return [
      BarChart(title=title, labels=[t for t, _ in rows], values=[e["value"] for _, e in rows],
               lows=[e["low"] for _, e in rows], highs=[e["high"] for _, e in rows])
      for title, rows in sorted(by_metric.items(), key=lambda kv: (":" in kv[0], kv[0]))
  ]


def metrics_table(metrics: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Table:
  rows = [(task, name, e["value"], e["low"], e["high"])
          for task, by_name in metrics.items() for name, e in by_name.items()]
  return Table("Metrics (95% bootstrap intervals)", ("task", "metric", "value", "low", "high"), rows)


def groups_table(groups: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Table:
  """Averages over groups of tasks (`runner.evaluate.group_metrics`), each with its task count."""
  rows = [(group, name, e["tasks"], e["value"], e["low"], e["high"])
          for group, by_name in groups.items() for name, e in by_name.items()]
  return Table("Averages over groups of tasks, unweighted (intervals: the members' bounds averaged)",
               ("group", "metric", "tasks", "value", "low", "high"), rows)


def group_charts(groups: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[BarChart]:
  """One chart per metric, a bar per group (apart from the tasks': the bars are averages)."""
  by_metric: dict[str, list[tuple[str, Mapping[str, float]]]] = {}
  for group, by_name in groups.items():
    for name, entry in by_name.items():
      by_metric.setdefault(name, []).append((f"{group} ({entry['tasks']})", entry))
  return [BarChart(title=f"{name}, averaged over groups of tasks", labels=[g for g, _ in rows],
                   values=[e["value"] for _, e in rows], lows=[e["low"] for _, e in rows],
                   highs=[e["high"] for _, e in rows])
          for name, rows in sorted(by_metric.items())]


def write_report(out_dir: str, *, title: str,
                 metrics: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 groups: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 charts: Sequence[BarChart] = (), tables: Sequence[Table] = (),
                 notes: Sequence[str] = ()) -> str:
  """Writes `out_dir/report.html` and its PNGs; returns the HTML path.

  `groups` (averages over groups of tasks, as `runner.evaluate.group_metrics` makes them) get a
  table and charts of their own after the metrics'.
  """
  os.makedirs(out_dir, exist_ok=True)
  parts = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>"]
  parts += [f"<p>{html.escape(note)}</p>" for note in notes]
  all_charts = []
  if metrics:
    parts.append(_table_html(metrics_table(metrics)))
    all_charts += metric_charts(metrics)
  if groups:
    parts.append(_table_html(groups_table(groups)))
    all_charts += group_charts(groups)
  all_charts += charts
  for i, chart in enumerate(all_charts):
    name = f"plot_{i:02d}.png"
    _save_chart(chart, os.path.join(out_dir, name))
    parts.append(f"<h2>{html.escape(chart.title)}</h2><img src='{name}' alt='{html.escape(chart.title)}'>")
  for stale in glob.glob(os.path.join(out_dir, "plot_*.png")):
    if os.path.basename(stale) not in {f"plot_{i:02d}.png" for i in range(len(all_charts))}:
      os.unlink(stale)  # Left by an earlier report with more charts; the page no longer shows it.
  parts += [_table_html(t) for t in tables]
  parts.append("</body></html>\n")
  path = os.path.join(out_dir, REPORT_FILE)
  outputs.atomic_write_text(path, "\n".join(parts))
  return path
