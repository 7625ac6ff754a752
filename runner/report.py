"""A small HTML report with PNG plots, for evaluations and analyses alike.

The page shows each metric with its 95% interval (table and bar chart with
error bars), the papers' reference figures beside them (a table with sources, and
labelled lines on the charts), then optional bar charts (breakdowns such as error
rate by rule) and tables. PNGs sit beside `report.html`; every file is written
atomically.
"""
import dataclasses
import html
import io
import re
import textwrap
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # No display on servers; must precede pyplot.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

from runner import run_dir
from runner import truncation as truncation_lib
import storage

REPORT_FILE = run_dir.REPORT
LABEL_WIDTH = 18  # characters per line of a tick label; longer ones wrap
TITLE_WIDTH = 60
BAR_COLOR = "#4c72b0"
REFERENCE_COLORS = {"chance": "#7f7f7f", "human": "#2ca02c"}  # others: OTHER_REFERENCE_COLOR
OTHER_REFERENCE_COLOR = "#dd8452"

# {task: [(metric, label, value, source), ...]}: the papers' figures (t5_tasks.references makes
# them; runner takes plain data so that it need not import t5_tasks).
References = Mapping[str, Sequence[tuple[str, str, float, str]]]


@dataclasses.dataclass(frozen=True)
class ReferenceLine:
  """A labelled horizontal line at `value`: across the chart when `bar` is None, else over that
  bar only (a chart's bars may be tasks or groups with figures of their own)."""
  label: str
  value: float
  bar: int | None = None


@dataclasses.dataclass(frozen=True)
class BarChart:
  """Bars with optional [low, high] intervals drawn as error bars, and reference lines."""
  title: str
  labels: Sequence[str]
  values: Sequence[float]
  lows: Sequence[float] | None = None
  highs: Sequence[float] | None = None
  ylabel: str = ""
  references: Sequence[ReferenceLine] = ()


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


def wrap_label(label: str, width: int = LABEL_WIDTH) -> str:
  """Breaks a label into lines of about `width` characters after spaces, underscores or slashes
  (task names have no spaces), so that no tick label runs off the figure."""
  lines = [""]
  for piece in re.split(r"(?<=[ _/])", label):
    if lines[-1] and len(lines[-1]) + len(piece) > width:
      lines.append("")
    lines[-1] += piece
  return "\n".join(line.rstrip() for line in lines)


def _y_limits(chart: BarChart) -> tuple[float, float]:
  """From 0 (or the lowest value) to above every bar, interval and reference line. A chart of
  zeros alone gets 0..1: matplotlib would centre an empty axis on 0 and hide the bar's place."""
  points = [*chart.values, *(chart.highs or ()), *(r.value for r in chart.references)]
  low = min([0.0, *chart.values, *(chart.lows or ())])
  high = max([0.0, *points])
  if high <= low:
    high = low + 1.0
  return low - 0.02 * (high - low), high + 0.12 * (high - low)


def _draw_references(ax, chart: BarChart) -> None:
  for ref in chart.references:
    color = REFERENCE_COLORS.get(ref.label, OTHER_REFERENCE_COLOR)
    text = f"{ref.label} {ref.value:.3g}"
    if ref.bar is None:
      ax.axhline(ref.value, color=color, linestyle="--", linewidth=1)
      ax.text(1.01, ref.value, text, color=color, fontsize=7, va="center",
              transform=ax.get_yaxis_transform())  # x in axes units: right of the plot
    else:
      ax.hlines(ref.value, ref.bar - 0.45, ref.bar + 0.45, colors=color, linestyles="--",
                linewidth=1)
      ax.text(ref.bar - 0.44, ref.value, text, color=color, fontsize=6, va="bottom",
              bbox={"facecolor": "white", "alpha": 0.7, "pad": 0.5, "linewidth": 0})


def chart_figure(chart: BarChart):
  """The chart as a matplotlib figure (the caller closes it)."""
  fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(chart.labels) + 2), 3.5))
  positions = range(len(chart.labels))
  errors = None
  if chart.lows is not None and chart.highs is not None:
    # Clipped at 0: a bootstrap interval may sit entirely on one side of a tiny value.
    errors = [[max(0.0, v - lo) for v, lo in zip(chart.values, chart.lows)],
              [max(0.0, hi - v) for v, hi in zip(chart.values, chart.highs)]]
  bars = ax.bar(positions, chart.values, yerr=errors, capsize=4, color=BAR_COLOR)
  # Each bar's value written on it: a bar of height 0 is otherwise invisible.
  ax.bar_label(bars, labels=[f"{v:.3g}" for v in chart.values], fontsize=7, padding=2)
  ax.set_ylim(*_y_limits(chart))
  ax.set_xlim(-0.6, len(chart.labels) - 0.4)
  ax.set_xticks(list(positions))
  ax.set_xticklabels([wrap_label(label) for label in chart.labels], rotation=30, ha="right",
                     rotation_mode="anchor", fontsize=8)
  ax.set_title(textwrap.fill(chart.title, TITLE_WIDTH))
  ax.set_ylabel(chart.ylabel)
  fig.tight_layout()
  # After tight_layout, which would shrink the axes to make room for the texts right of it;
  # savefig's bbox_inches="tight" widens the image for them instead.
  _draw_references(ax, chart)
  return fig


def _save_chart(chart: BarChart, path: str) -> None:
  fig = chart_figure(chart)
  buffer = io.BytesIO()
  # bbox_inches="tight" grows the image to hold every label and reference text whole.
  fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
  plt.close(fig)
  storage.write_bytes(path, buffer.getvalue())


def _bar_references(references: References | None,
                    bars: Sequence[tuple[str, str]]) -> list[ReferenceLine]:
  """Reference lines of a chart whose bars are (task, metric) pairs: one across the chart for a
  (label, value) that every bar shares (chance), one over its bar otherwise."""
  by_figure: dict[tuple[str, float], list[int]] = {}
  for i, (task, metric) in enumerate(bars):
    for ref_metric, label, value, _ in (references or {}).get(task, ()):
      if ref_metric == metric:
        by_figure.setdefault((label, value), []).append(i)
  lines = []
  for (label, value), indices in by_figure.items():
    if len(set(indices)) == len(bars):
      lines.append(ReferenceLine(label, value))
    else:
      lines += [ReferenceLine(label, value, i) for i in indices]
  return lines


def metric_charts(metrics: Mapping[str, Mapping[str, Mapping[str, float]]],
                  references: References | None = None) -> list[BarChart]:
  """Bar charts with intervals as error bars, and the papers' figures as lines.

  Plain metrics get one chart per metric name, a bar per task; grouped ones
  ("accuracy/C+E", "error_rate/Rule 1") one chart per task and metric, a bar per group.
  A reference figure names the metric as metrics.json does ("accuracy/C+E" for a group's bar).
  """
  # title -> [(bar label, entry, (task, full metric name))]
  by_metric: dict[str, list[tuple[str, Mapping[str, float], tuple[str, str]]]] = {}
  for task, by_name in metrics.items():
    for name, entry in by_name.items():
      if "/" in name:
        metric, group = name.split("/", 1)
        by_metric.setdefault(f"{task}: {metric} by group", []).append((group, entry, (task, name)))
      else:
        by_metric.setdefault(name, []).append((task, entry, (task, name)))
  return [
      BarChart(title=title, labels=[t for t, _, _ in rows], values=[e["value"] for _, e, _ in rows],
               lows=[e["low"] for _, e, _ in rows], highs=[e["high"] for _, e, _ in rows],
               references=_bar_references(references, [bar for _, _, bar in rows]))
      for title, rows in sorted(by_metric.items(), key=lambda kv: (":" in kv[0], kv[0]))
  ]


def references_table(references: References,
                     metrics: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> Table:
  """The papers' figures, with sources; given `metrics`, those of the evaluated tasks' metrics,
  each beside this evaluation's value."""
  rows = []
  for task, figures in references.items():
    for metric, label, value, source in figures:
      if metrics is None:
        rows.append((task, metric, label, value, "", source))
      elif metric in metrics.get(task, {}):
        rows.append((task, metric, label, value, metrics[task][metric]["value"], source))
  return Table("Reference figures (the papers' conditions differ: they place a number, they are not "
               "targets)", ("task", "metric", "reference", "value", "this evaluation", "source"), rows)


def metrics_table(metrics: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Table:
  rows = [(task, name, e["value"], e["low"], e["high"])
          for task, by_name in metrics.items() for name, e in by_name.items()]
  return Table("Metrics (95% bootstrap intervals)", ("task", "metric", "value", "low", "high"), rows)


GROUP_BOUNDS = "members' 95% bounds averaged (not a bootstrapped interval of the average)"


def metric_line(task: str, name: str, entry: Mapping[str, float]) -> str:
  """One console line of a metric: its value and 95% bootstrap interval; a group's average
  (`runner.eval_metrics.group_metrics`, with its task count) says what its bounds are instead."""
  bounds = f"[{entry['low']:.4f}, {entry['high']:.4f}]"
  if "tasks" in entry:
    bounds = f"mean of {entry['tasks']} tasks; {GROUP_BOUNDS}: {bounds}"
  return f"{task:40s} {name:28s} {entry['value']:.4f}  {bounds}"


def groups_table(groups: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Table:
  """Averages over groups of tasks (`runner.eval_metrics.group_metrics`), each with its task count.
  Their bounds are the members' averaged (the members share no items to resample jointly), so
  the columns say so rather than look like the metrics table's 95% intervals."""
  rows = [(group, name, e["tasks"], e["value"], e["low"], e["high"])
          for group, by_name in groups.items() for name, e in by_name.items()]
  return Table(f"Averages over groups of tasks, unweighted; low and high: the {GROUP_BOUNDS}",
               ("group", "metric", "tasks", "value", "members' low, averaged", "members' high, averaged"), rows)


def group_charts(groups: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[BarChart]:
  """One chart per metric, a bar per group (apart from the tasks': the bars are averages), without
  error bars: a group has no interval of its own (groups_table gives its members' bounds)."""
  by_metric: dict[str, list[tuple[str, Mapping[str, float]]]] = {}
  for group, by_name in groups.items():
    for name, entry in by_name.items():
      by_metric.setdefault(name, []).append((f"{group} ({entry['tasks']})", entry))
  return [BarChart(title=f"{name}, averaged over groups of tasks (no interval)", labels=[g for g, _ in rows],
                   values=[e["value"] for _, e in rows])
          for name, rows in sorted(by_metric.items())]


def worst_items_table(task: str, items: Sequence[Mapping[str, object]]) -> Table:
  """The items a model gets most wrong (`runner.eval_metrics.worst_items`): a row per candidate,
  the item's id, margin and context on its first."""
  rows = []
  for item in items:
    for j, (text, score, correct) in enumerate(item["candidates"]):
      first = j == 0
      rows.append((item["id"] if first else "", item["margin"] if first else "",
                   item["context"] if first else "", text, score, "yes" if correct else "no"))
  return Table(f"{task}: the {len(items)} items most wrong (margin: best wrong score minus best "
               "correct score)", ("item", "margin", "context", "candidate", "score", "correct"), rows)


def write_report(out_dir: str, *, title: str,
                 metrics: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 groups: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                 charts: Sequence[BarChart] = (), tables: Sequence[Table] = (),
                 notes: Sequence[str] = (), references: References | None = None,
                 truncation: Mapping[str, Mapping] | None = None) -> str:
  """Writes `out_dir/report.html` and its PNGs; returns the HTML path.

  `truncation` ({task: what the feature lengths cut}, `runner.truncation`'s records) adds a line
  to the header after the `notes` for each task with anything cut, or one saying nothing was.

  `groups` (averages over groups of tasks, as `runner.eval_metrics.group_metrics` makes them) get a
  table and charts of their own after the metrics'. `references` (`{task: [(metric, label,
  value, source), ...]}`, t5_tasks.references's) are listed beside the metrics of the tasks
  they name and drawn on the metrics' charts.
  """
  storage.makedirs(out_dir)
  parts = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}"
           "td{max-width:60em;white-space:pre-wrap}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>"]
  parts += [f"<p>{html.escape(note)}</p>" for note in [*notes, *truncation_lib.report_lines(truncation or {})]]
  all_charts = []
  if metrics:
    parts.append(_table_html(metrics_table(metrics)))
    all_charts += metric_charts(metrics, references)
  if references:
    listed = references_table(references, metrics or None)
    if listed.rows:
      parts.append(_table_html(listed))
  if groups:
    parts.append(_table_html(groups_table(groups)))
    all_charts += group_charts(groups)
  all_charts += charts
  for i, chart in enumerate(all_charts):
    name = f"plot_{i:02d}.png"
    _save_chart(chart, storage.join(out_dir, name))
    parts.append(f"<h2>{html.escape(chart.title)}</h2><img src='{name}' alt='{html.escape(chart.title)}'>")
  for stale in storage.glob(out_dir, "plot_*.png"):
    if storage.name(stale) not in {f"plot_{i:02d}.png" for i in range(len(all_charts))}:
      storage.remove(stale)  # Left by an earlier report with more charts; the page no longer shows it.
  parts += [_table_html(t) for t in tables]
  parts.append("</body></html>\n")
  path = storage.join(out_dir, REPORT_FILE)
  storage.write_text(path, "\n".join(parts))
  return path
