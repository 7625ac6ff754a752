"""What the analyses share: intervals as text, console tables, bar charts, --predictions."""
import os

from runner import outputs
from runner import report
import storage


def with_interval(e: dict) -> str:
  return f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def improvement_text(test: dict) -> str:
  return f"{test['improvement']:+.1f} (p={test['p']:.2g})"


def print_table(table: report.Table) -> None:
  cells = [[str(c) for c in table.columns]] + [[report.format_cell(v) for v in row] for row in table.rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(table.columns))]
  print(f"\n{table.title}")
  for row in cells:
    print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def rate_chart(title: str, rates: dict) -> report.BarChart:
  names = list(rates)
  return report.BarChart(title, names, [rates[n]["value"] for n in names], [rates[n]["low"] for n in names],
                         [rates[n]["high"] for n in names])


def named_predictions(args) -> dict[str, list[dict]]:
  named = {}
  for spec in args.predictions:
    name, _, path = spec.rpartition("=")
    folder = storage.parent(path if storage.is_bucket(path) else os.path.abspath(path))
    named[name or storage.name(folder)] = outputs.read_predictions(path)
  return named
