r"""Compares systems on the items they both scored, with paired significance tests.

  python -m scripts.compare --eval_dirs=base=runs/base/eval,large=runs/large/eval --out=/tmp/cmp \
      [--metric=accuracy,two_best_accuracy] [--num_bootstrap=1000] [--num_permutations=10000] [--seed=0]

Each --eval_dirs entry NAME=DIR is a directory written by scripts.evaluate or scripts.run_baseline
(predictions.jsonl and metrics.json); it and --out may be local folders or `gs://...` prefixes.
Two systems are compared on the items of a task both scored, matched by (task, id): a model
evaluated on a whole test file beside ASQ's similarity baseline tested on its held-out share
(--train_fraction) is compared on that share, and a line says so, e.g. `asq_intent_cloze: comparing
300 items both scored (model scored 1000, similarity 300)`. Two systems that share no item of a task
both scored, or that give a shared item different gold labels, exit 1 naming the task.

The compared metrics are the accuracy-like ones every system's metrics.json reports: accuracy,
two_best_accuracy (TimeDial), pairwise_accuracy (preference tasks, HEAP) and their per-group
variants (accuracy/C+E). Each item's credit is recomputed from its prediction record by
t5_tasks.metrics.item_credit, the definition metrics.json uses (a tie gets the expected credit of
breaking it at random, so 0.5 on a two-candidate item), and its mean must equal the value in
metrics.json. The table shows each system's value and 95% interval as its metrics.json reports
them, on all the items it scored. For each pair of systems A, B, on the items both scored:

  * paired bootstrap: --num_bootstrap (B) resamples of the items with replacement, the same items
    for both systems; the difference A - B of the means; and from the same B resampled differences
    d(1) <= ... <= d(B), the 95% percentile interval [d(j), d(B + 1 - j)], j = ceil(0.025 B), and
    the two-sided p = 2 x min(share of d <= 0, share of d >= 0), capped at 1 (Efron & Tibshirani
    1993, An Introduction to the Bootstrap, ch. 13 and 16). The interval excludes 0 exactly when
    p < 0.05; identical systems get p = 1 and [0, 0]; a p of 0 means that no resample reached 0.
    comparison.json also gives each system's mean on these items (a_value, b_value) and how many
    items each scored (a_items, b_items).
  * "A better / B better": the credit A gains over B summed over the items where A gets more, and
    the same for B; their difference is items x (A - B), so they agree in sign with the difference.
    With 0/1 credit they are McNemar's discordant pairs (items only A, or only B, gets right).
  * a second paired test, named in the output. McNemar's exact test (a two-sided binomial test,
    p = 1/2, on the discordant pairs) where every item's credit is 0 or 1 for both systems: McNemar
    is defined on correct/incorrect pairs. Else (a tie's fractional credit) a paired permutation
    test: --num_permutations random sign flips of the per-item differences (seed --seed), two-sided
    p = (1 + flips whose |mean| >= the observed |mean|) / (1 + flips); 1 when no item differs.

Writes report.html (tables and one bar chart per task and metric, a bar per system),
comparison.json, comparison.md and comparison.tex (booktabs) under --out, all with the same numbers.
"""
import json
import math
import sys
from typing import Mapping, Sequence

from absl import app
from absl import flags
import numpy as np

from runner import outputs
from runner import report
from scripts import console
import storage

# t5_tasks (seqio, TensorFlow: seconds to import; its statistics: the paired tests below) is imported
# where used (`item_credit`, `compare`), once the inputs are
# checked: a mismatched directory is refused at once, and absl has started (see scripts/analyze.py).

ACCURACY_METRICS = ("accuracy", "two_best_accuracy", "pairwise_accuracy")
MAX_IDS_SHOWN = 5
VALUE_TOLERANCE = 1e-9  # recomputed mean vs metrics.json: the same float64 arithmetic


class ComparisonError(ValueError):
  """Inputs that cannot be compared (a user's error: one line, exit 1)."""


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the command line's flags (on `fv`; tests pass their own FlagValues)."""
  flags.DEFINE_list("eval_dirs", [], "NAME=DIR of each system's evaluation directory (two or more).",
                    flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory.", flag_values=fv)
  flags.DEFINE_list("metric", [], "Metrics to compare (default: every accuracy-like metric all systems "
                    "report), e.g. accuracy,two_best_accuracy,accuracy/C+E.", flag_values=fv)
  flags.DEFINE_integer("num_bootstrap", 1000, "Paired bootstrap resamples.", flag_values=fv)
  flags.DEFINE_integer("num_permutations", 10000, "Sign flips of the paired permutation test (used where "
                       "a tie gives fractional credit).", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Paired bootstrap and permutation seed.", flag_values=fv)


def parse_systems(specs: Sequence[str]) -> dict[str, str]:
  """{name: directory} of the NAME=DIR entries, in their order."""
  systems = {}
  for spec in specs:
    name, sep, directory = spec.partition("=")
    if not sep or not name or not directory:
      raise ComparisonError(f"--eval_dirs entries are NAME=DIR, got {spec!r}")
    if name in systems:
      raise ComparisonError(f"--eval_dirs names system {name!r} twice")
    systems[name] = directory
  if len(systems) < 2:
    raise ComparisonError("--eval_dirs needs two or more NAME=DIR entries to compare")
  return systems


def load_system(directory: str) -> dict:
  """The directory's records by task and id, its metrics and provenance."""
  path = storage.join(directory, outputs.PREDICTIONS_FILE)
  by_task: dict[str, dict[str, dict]] = {}
  for record in outputs.read_predictions(path):
    items = by_task.setdefault(record["task"], {})
    if record["id"] in items:
      raise ComparisonError(f"{path}: item ({record['task']}, {record['id']}) appears twice")
    items[record["id"]] = record
  return {"dir": directory, "records": by_task, "metrics": outputs.read_metrics(directory),
          "provenance": outputs.read_provenance(directory)}


def _ids(ids) -> str:
  shown = sorted(ids)[:MAX_IDS_SHOWN]
  return ", ".join(shown) + (f" (and {len(ids) - len(shown)} more)" if len(ids) > len(shown) else "")


def check_shared_items(systems: Mapping[str, dict]) -> list[str]:
  """Per task and pair of systems that scored it, the items both scored, matched by (task, id): the
  lines saying how many are compared where the two scored different items. Refuses a pair that
  shares none, or gives a shared item different gold labels. A task only some systems scored is
  compared among those (a model's mixture beside one-task baselines)."""
  lines = []
  tasks = sorted({task for system in systems.values() for task in system["records"]})
  for task in tasks:
    scored = [(n, s["records"][task]) for n, s in systems.items() if task in s["records"]]
    for k, (first, reference) in enumerate(scored):
      for name, theirs in scored[k + 1:]:
        counts = f"{first} scored {len(reference)}, {name} {len(theirs)}"
        shared = [i for i in reference if i in theirs]
        if not shared:
          raise ComparisonError(f"task {task}: {first} and {name} scored no item in common ({counts}; "
                                f"items are matched by task and id)")
        differ = [i for i in shared if reference[i].get("gold") != theirs[i].get("gold")]
        if differ:
          raise ComparisonError(f"task {task}: {first} and {name} have different gold labels for items "
                                f"{_ids(differ)}")
        if len(shared) != len(reference) or len(shared) != len(theirs):
          lines.append(f"{task}: comparing {len(shared)} items both scored ({counts})")
  return lines


def item_credit(metric: str, records: Sequence[Mapping]) -> np.ndarray:
  """Per item, its credit in `metric` (accuracy, two_best_accuracy, pairwise_accuracy)."""
  from t5_tasks import metrics as t5_metrics  # pylint: disable=g-import-not-at-top
  return np.asarray([t5_metrics.item_credit(metric, r["scores"], r["gold"]) for r in records])


def comparable(name: str) -> bool:
  return name.partition("/")[0] in ACCURACY_METRICS


def metrics_to_compare(systems: Mapping[str, dict], requested: Sequence[str]):
  """([(task, metric)] to compare: accuracy-like, reported by two systems or more; [(task, metric)]
  reported but left out), in a stable order."""
  reported = [{(t, m) for t, by_name in s["metrics"].items() for m in by_name} for s in systems.values()]
  every = set.union(*reported)
  shared = {key for key in every if sum(key in r for r in reported) >= 2}
  chosen = sorted((t, m) for t, m in shared if comparable(m) and (not requested or m in requested))
  unknown = set(requested) - {m for _, m in chosen}
  if unknown:
    available = sorted({m for t, m in shared if comparable(m)})
    raise ComparisonError(f"--metric {', '.join(sorted(unknown))}: not an accuracy-like metric two systems "
                          f"report; they report {', '.join(available) or 'none'}")
  if not chosen:
    raise ComparisonError("no accuracy-like metric (" + ", ".join(ACCURACY_METRICS) + ") that two systems "
                          "report on the same task to compare")
  return chosen, sorted(every - set(chosen))


def _groups(record: Mapping) -> set[str]:
  from t5_tasks import metrics as t5_metrics  # pylint: disable=g-import-not-at-top
  return t5_metrics.item_groups(record)


def _credits(system: dict, task: str, metric: str) -> dict[str, float]:
  """{id: credit} of the system's items counted in `metric` (a group's: the items in that group)."""
  group = metric.partition("/")[2]
  records = [r for r in system["records"][task].values() if not group or group in _groups(r)]
  return dict(zip((r["id"] for r in records), item_credit(metric, records)))


DISAGREEMENTS_SHOWN = 5  # items listed per task and pair of systems


def _context(record: Mapping) -> str:
  """The text the item's candidates answer, as predictions.jsonl records it (a model's records
  hold the input text; a TimeDial baseline's, the conversation)."""
  if record.get("inputs_pretokenized"):
    return str(record["inputs_pretokenized"])
  return "\n".join(record.get("conversation", []))


def disagreements(system_a: dict, system_b: dict, task: str, ids: Sequence[str], credit_a, credit_b) -> dict:
  """The items two systems get different credit on: their count, and the first few (by id) with
  the context, each candidate, whether it is correct, and both systems' scores."""
  differ = sorted(i for i, x, y in zip(ids, credit_a, credit_b) if x != y)
  items = []
  for i in differ[:DISAGREEMENTS_SHOWN]:
    a, b = system_a["records"][task][i], system_b["records"][task][i]
    texts = a.get("candidates_pretokenized") or b.get("candidates_pretokenized") or [
        f"candidate {j}" for j in range(len(a["scores"]))]
    items.append({"id": i, "context": _context(a) or _context(b), "candidates": [
        {"text": str(t), "correct": bool(g), "a_score": sa, "b_score": sb}
        for t, g, sa, sb in zip(texts, a["gold"], a["scores"], b["scores"])]})
  return {"count": len(differ), "items": items}


def compare(systems: Mapping[str, dict], chosen, num_bootstrap: int, seed: int,
            num_permutations: int = 10000) -> tuple[list, list]:
  """(value rows, difference rows) of every chosen (task, metric): see comparison.json. A system's
  value is on all the items it scored (its metrics.json's); a pair's difference on the items both
  scored (check_shared_items), and on a whole task's metric (not a group's) it also lists the items
  the two disagree on. A group that two systems share no item of gets no difference row."""
  from t5_tasks import statistics  # pylint: disable=g-import-not-at-top  # seqio: once inputs are checked
  values, differences = [], []
  for task, metric in chosen:
    names = [n for n, s in systems.items() if metric in s["metrics"].get(task, {})]
    group = metric.partition("/")[2]
    credits = {}
    for name in names:
      system = systems[name]
      credits[name] = _credits(system, task, metric)
      mean = float(np.mean(list(credits[name].values()))) if credits[name] else math.nan
      reported = system["metrics"][task][metric]
      if not math.isclose(mean, reported["value"], rel_tol=0, abs_tol=VALUE_TOLERANCE):
        raise ComparisonError(f"{name}: {task} {metric} recomputed from predictions.jsonl is "
                              f"{mean:.6f}, metrics.json says {reported['value']:.6f}")
      values.append({"task": task, "metric": metric, "system": name, "items": len(credits[name]),
                     **{k: reported[k] for k in ("value", "low", "high")}})
    for i, a in enumerate(names):
      for b in names[i + 1:]:
        ids = [item for item in credits[a] if item in credits[b]]  # in A's order: the seed's resamples
        if not ids:
          continue
        credit_a = np.asarray([credits[a][item] for item in ids])
        credit_b = np.asarray([credits[b][item] for item in ids])
        bootstrap = statistics.paired_bootstrap(credit_a, credit_b, num_bootstrap, seed)
        test = statistics.second_test(credit_a, credit_b, num_permutations, seed)
        differences.append({"task": task, "metric": metric, "a": a, "b": b, "items": len(ids),
                            "a_items": len(credits[a]), "b_items": len(credits[b]),
                            "a_value": float(credit_a.mean()), "b_value": float(credit_b.mean()),
                            "difference": bootstrap["difference"], "low": bootstrap["low"],
                            "high": bootstrap["high"], "p_bootstrap": bootstrap["p"],
                            "a_better": test["a_better"], "b_better": test["b_better"],
                            "test": test["test"], "p_test": test["p"]})
        if not group:
          differences[-1]["disagreements"] = disagreements(systems[a], systems[b], task, ids,
                                                           credit_a, credit_b)
  return values, differences


# The numbers as every output shows them: the tests find each JSON number in each file this way.
def fmt(x: float) -> str:
  """Three decimals; a nonzero number they would show as 0 gets one significant digit, so that an
  interval's bound keeps its side of 0 (0.0004, not 0.000)."""
  text = f"{x:.3f}"
  return f"{x:.1g}" if x != 0 and float(text) == 0 else text


def fmt_p(p: float, num_bootstrap: int) -> str:
  """A bootstrap p (a multiple of 2 / B, B resamples) with decimals enough that one below 0.05 (at
  most 0.05 - 2 / B) never shows as 0.050, so that the printed p and interval agree: 10^-d < 4 / B."""
  decimals = 3
  while num_bootstrap >= 4 * 10 ** decimals:
    decimals += 1
  return f"{p:.{decimals}f}"


def _with_interval(row: Mapping, key: str = "value") -> str:
  return f"{fmt(row[key])} [{fmt(row['low'])}, {fmt(row['high'])}]"


def value_table(result: Mapping) -> tuple[list[str], list[list[str]]]:
  """(columns, rows): a row per system, a column per task and metric: value [low, high]."""
  keys = list(dict.fromkeys((v["task"], v["metric"]) for v in result["values"]))
  cell = {(v["system"], v["task"], v["metric"]): _with_interval(v) for v in result["values"]}
  columns = ["system"] + [f"{t} {m}" for t, m in keys]
  return columns, [[s["name"]] + [cell.get((s["name"], t, m), "–") for t, m in keys] for s in result["systems"]]


DIFFERENCE_COLUMNS = ["task", "metric", "A", "B", "items", "A - B [95% interval]", "p (paired bootstrap)",
                      "A better / B better (credit)", "test", "p (test)"]


def fmt_credit(x: float) -> str:
  """Summed credit: a count where it is whole (0/1 credit), else one decimal."""
  return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def better_cell(d: Mapping) -> str:
  return f"{fmt_credit(d['a_better'])} / {fmt_credit(d['b_better'])}"


def difference_rows(result: Mapping) -> list[list[str]]:
  return [[d["task"], d["metric"], d["a"], d["b"], str(d["items"]), _with_interval(d, "difference"),
           fmt_p(d["p_bootstrap"], result["num_bootstrap"]), better_cell(d), d["test"], fmt(d["p_test"])]
          for d in result["differences"]]


def markdown(result: Mapping) -> str:
  def table(columns, rows):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]
  columns, rows = value_table(result)
  lines = ["## Systems (95% bootstrap intervals)", ""] + table(columns, rows)
  lines += ["", f"## Paired differences ({result['num_bootstrap']} paired bootstrap resamples, "
            f"seed {result['seed']})", ""] + table(DIFFERENCE_COLUMNS, difference_rows(result))
  return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
  return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def _latex_cell(cell: str) -> str:
  # Numbers in math mode (a real minus sign); names escaped as text.
  try:
    float(cell.split(" ")[0])
  except ValueError:
    return latex_escape(cell)
  return f"${cell}$".replace(" [", r"\ [").replace(" / ", r"\,/\,")


def latex(result: Mapping) -> str:
  def table(caption, columns, rows):
    header = " & ".join(latex_escape(c) for c in columns) + r" \\"
    body = [" & ".join(_latex_cell(c) for c in row) + r" \\" for row in rows]
    return [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
            r"\begin{tabular}{" + "l" * len(columns) + "}", r"\toprule", header, r"\midrule", *body,
            r"\bottomrule", r"\end{tabular}", r"\end{table}"]
  columns, rows = value_table(result)
  lines = ["% Requires \\usepackage{booktabs}. Written by scripts.compare."]
  lines += table("Systems: value [95% bootstrap interval]", columns, rows) + [""]
  lines += table(f"Paired differences ({result['num_bootstrap']} paired bootstrap resamples; McNemar's exact "
                 f"test on 0/1 credit, else {result['num_permutations']} paired permutations)",
                 DIFFERENCE_COLUMNS, difference_rows(result))
  return "\n".join(lines) + "\n"


def charts(result: Mapping) -> list[report.BarChart]:
  """One chart per task and metric, a bar per system with its interval."""
  by_key: dict[tuple[str, str], list[dict]] = {}
  for v in result["values"]:
    by_key.setdefault((v["task"], v["metric"]), []).append(v)
  return [report.BarChart(f"{task}: {metric}", [v["system"] for v in rows], [v["value"] for v in rows],
                          [v["low"] for v in rows], [v["high"] for v in rows], ylabel=metric)
          for (task, metric), rows in by_key.items()]


def report_notes(result: Mapping) -> list[str]:
  notes = [f"{s['name']}: {s['dir']}" for s in result["systems"]]
  notes.append("Values and intervals as each system's metrics.json reports them (recomputed per item "
               "from predictions.jsonl: the same values).")
  notes.append(f"Paired bootstrap: {result['num_bootstrap']} resamples of the items, the same for both "
               "systems (seed {}), on the items both scored; the 95% percentile interval and p = 2 x min(share "
               "of resampled differences <= 0, share >= 0), capped at 1, from the same resamples: the "
               "interval excludes 0 exactly when p < 0.05. A better / B better: the credit each gains over the other, summed over items. "
               "Test: McNemar's exact test where both systems' credit is 0/1; where a tie gives fractional "
               "credit, a paired permutation test ({} random sign flips of the per-item differences)."
               .format(result["seed"], result["num_permutations"]))
  notes += result.get("shared_items", [])
  if result["not_compared"]:
    notes.append("Not compared (not accuracy-like, or reported by one system only): " + ", ".join(
        f"{t} {m}" for t, m in result["not_compared"]))
  return notes


def disagreement_tables(result: Mapping) -> list[report.Table]:
  """Per task, metric and pair: the items one system gets right and the other not."""
  tables = []
  for d in result["differences"]:
    found = d.get("disagreements")
    if not found or not found["count"]:
      continue
    rows = [[item["id"], item["context"], c["text"], "yes" if c["correct"] else "", fmt(c["a_score"]),
             fmt(c["b_score"])] for item in found["items"] for c in item["candidates"]]
    tables.append(report.Table(
        f"{d['task']} {d['metric']}: {d['a']} and {d['b']} disagree on {found['count']} items "
        f"(the first {len(found['items'])} by id)",
        ["id", "context", "candidate", "correct", f"{d['a']} score", f"{d['b']} score"], rows))
  return tables


def write_outputs(out: str, result: Mapping) -> str:
  """Writes comparison.json, .md, .tex and report.html under `out` (a folder or `gs://...`);
  returns the report's path."""
  storage.makedirs(out)
  storage.write_text(storage.join(out, "comparison.json"), json.dumps(result, indent=2) + "\n")
  storage.write_text(storage.join(out, "comparison.md"), markdown(result))
  storage.write_text(storage.join(out, "comparison.tex"), latex(result))
  columns, rows = value_table(result)
  tables = [report.Table("Systems: value [95% bootstrap interval]", columns, rows),
            report.Table("Paired differences", DIFFERENCE_COLUMNS, difference_rows(result))]
  tables += disagreement_tables(result)
  return report.write_report(out, title="Comparison of " + ", ".join(s["name"] for s in result["systems"]),
                             tables=tables, charts=charts(result), notes=report_notes(result))


def run(args: flags.FlagValues) -> dict:
  """Compares the systems the parsed flags `args` name; writes and prints the results."""
  if not args.out:
    raise ComparisonError("--out is required")
  if args.num_bootstrap < 1:
    raise ComparisonError(f"--num_bootstrap must be positive, got {args.num_bootstrap}")
  if args.num_permutations < 1:
    raise ComparisonError(f"--num_permutations must be positive, got {args.num_permutations}")
  systems = {name: load_system(d) for name, d in parse_systems(args.eval_dirs).items()}
  shared_items = check_shared_items(systems)
  chosen, not_compared = metrics_to_compare(systems, args.metric)
  values, differences = compare(systems, chosen, args.num_bootstrap, args.seed, args.num_permutations)
  from t5_tasks import statistics  # pylint: disable=g-import-not-at-top  # imported by `compare` already
  result = {"systems": [{"name": name, "dir": system["dir"], "provenance": system["provenance"]}
                        for name, system in systems.items()],
            "num_bootstrap": args.num_bootstrap, "num_permutations": args.num_permutations,
            "seed": args.seed, "confidence": statistics.CONFIDENCE,
            "values": values, "differences": differences, "shared_items": shared_items,
            "not_compared": [list(key) for key in not_compared]}
  page = write_outputs(args.out, result)
  for line in shared_items:
    print(line)
  for v in values:
    print(f"{v['task']:28s} {v['metric']:24s} {v['system']:16s} {_with_interval(v)}")
  for d in differences:
    print(f"{d['task']:28s} {d['metric']:24s} {d['a']} - {d['b']}: {_with_interval(d, 'difference')}  "
          f"p(bootstrap)={fmt_p(d['p_bootstrap'], args.num_bootstrap)}  A/B better {better_cell(d)}  "
          f"{d['test']} p={fmt(d['p_test'])}")
  print(f"wrote {page} and comparison.json, .md, .tex in {args.out}")
  return result


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  console.quiet_libraries()
  try:
    run(flags.FLAGS)
  except (ValueError, OSError) as error:  # a user's input (ComparisonError, a bad or missing file)
    print(f"error: {error}", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  console.run(main)
