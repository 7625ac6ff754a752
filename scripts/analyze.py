r"""Recomputes the papers' tables from released human judgments.

  python -m scripts.analyze turingadvice --eval_file=feb-14-2020_first100.jsonl --out=/tmp/ta
  python -m scripts.analyze asq --annotation_dir=../shared/data/asq [--predictions=NAME=predictions.jsonl] \
      --out=/tmp/asq
  python -m scripts.analyze agreement --comparisons=comparisons.jsonl [--comparison_format=turingadvice] \
      --out=/tmp/ag

Each prints its tables, and writes analysis.json and report.html (with PNG plots) under --out.
"""
import glob
import json
import os
from typing import Sequence

from absl import app
from absl import flags

from runner import outputs
from runner import report
from scripts import console

# t5_tasks (seqio, TensorFlow) is imported inside the analyses, once app.run has started absl:
# TensorFlow registers a GPU probe to run when absl starts, and imported at the top of this file
# that probe would run in app.run with stderr open, printing `failed call to cuInit` on a CPU
# machine. Imported later, the probe runs during the import, which t5_tasks does with stderr
# silenced (as scripts/train.py's start does).

def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the command line's flags (on `fv`; tests pass their own FlagValues)."""
  flags.DEFINE_string("eval_file", None, "turingadvice: the evaluation results (JSON lines).", flag_values=fv)
  flags.DEFINE_string("annotation_dir", None,
                      "asq: folder with *annotation_first.json and *annotation_second.json.", flag_values=fv)
  flags.DEFINE_list("annotation_files", [], "asq: annotation rounds, first then second.", flag_values=fv)
  flags.DEFINE_multi_string("predictions", [],
                            "asq / agreement: NAME=predictions.jsonl of a system or scorer (repeatable).",
                            flag_values=fv)
  flags.DEFINE_string("comparisons", None, "agreement: file of pairwise human comparisons.", flag_values=fv)
  flags.DEFINE_string("comparison_format", "summarize_feedback",
                      "agreement: summarize_feedback, turingadvice, or heap:<criterion> (its source file).",
                      flag_values=fv)
  flags.DEFINE_multi_string("length_controlled", [],
                            "agreement: A,B pairs of systems to compare at equal length (repeatable); by "
                            "default each system against the human one (policy 'ref', or the top Reddit advice).",
                            flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory for analysis.json and report.html.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=fv)


def _ci(e: dict) -> str:
  return f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def _difference(test: dict) -> str:
  return f"{test['difference']:+.3f} (p={test['p']:.2g})"


def _print_table(table: report.Table) -> None:
  cells = [[str(c) for c in table.columns]] + [[report.format_cell(v) for v in row] for row in table.rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(table.columns))]
  print(f"\n{table.title}")
  for row in cells:
    print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def _rate_chart(title: str, rates: dict) -> report.BarChart:
  names = list(rates)
  return report.BarChart(title, names, [rates[n]["value"] for n in names], [rates[n]["low"] for n in names],
                         [rates[n]["high"] for n in names])


def analyze_turingadvice(args):
  from t5_tasks.analysis import turingadvice as ta_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import turingadvice  # pylint: disable=g-import-not-at-top
  situations, _ = turingadvice.read_turingadvice_eval(args.eval_file)
  result = ta_analysis.analyze(situations, seed=args.seed)
  systems = result["systems"]
  pairs = {(t["a"], t["b"]): t for t in result["paired_ttests"]}
  categories = ta_analysis.DIAGNOSTIC_CATEGORIES
  tables = [
      report.Table(f"Preferred over the top Reddit advice ({result['n_situations']} situations, 95% CI)",
                   ("system", "preference rate", "continuous score"),
                   [(s, _ci(result["preference_rates"][s]), _ci(result["continuous_scores"][s]))
                    for s in systems]),
      report.Table("Paired t-tests on continuous scores: row minus column (p)", ["system"] + systems,
                   [[a] + [_difference(pairs[(a, b)]) if a != b else "" for b in systems] for a in systems]),
      report.Table("Diagnostics of the system's advice where the Reddit advice won (share of ratings)",
                   ["system", "n"] + list(categories),
                   [[s, d["n"]] + [f"{d['shares'][c]:.3f}" for c in categories]
                    for s, d in result["diagnostics"].items()]),
      report.Table("Preference rate by domain", ["domain", "n"] + systems,
                   [[d, v["n_situations"]] + [_ci(v["rates"][s]) for s in systems]
                    for d, v in result["by_domain"].items()]),
  ]
  charts = [_rate_chart("Preference rate over the top Reddit advice", result["preference_rates"]),
            _rate_chart("Mean continuous score", result["continuous_scores"])]
  charts += [_rate_chart(f"Preference rate, {d} ({v['n_situations']} situations)", v["rates"])
             for d, v in result["by_domain"].items()]
  return result, tables, charts


def _annotation_files(args) -> list[str]:
  if args.annotation_files:
    return args.annotation_files
  if not args.annotation_dir:
    raise app.UsageError("asq needs --annotation_dir or --annotation_files")
  files = []
  for round_name in ("first", "second"):
    found = sorted(glob.glob(os.path.join(args.annotation_dir, f"*annotation_{round_name}.json")))
    if len(found) > 1:
      raise app.UsageError(f"several {round_name}-round files in {args.annotation_dir}: {found}")
    files += found
  if not files:
    raise app.UsageError(f"no *annotation_first.json in {args.annotation_dir}")
  return files


def _named_predictions(args) -> dict[str, list[dict]]:
  named = {}
  for spec in args.predictions:
    name, _, path = spec.rpartition("=")
    named[name or os.path.basename(os.path.dirname(os.path.abspath(path)))] = outputs.read_predictions(path)
  return named


def analyze_asq(args):
  from t5_tasks.analysis import asq as asq_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import asq  # pylint: disable=g-import-not-at-top
  rounds = [asq.read_asq_annotations(f)[0] for f in _annotation_files(args)]
  result = asq_analysis.analyze(*rounds, system_predictions=_named_predictions(args), seed=args.seed)
  tables = [report.Table("Human accuracy (95% CI)", ("round", "n", "accuracy"),
                         [(r, e["n"], _ci(e)) for r, e in result["human_accuracy"].items()])]
  if "agreement" in result:
    g = result["agreement"]
    tables.append(report.Table("Agreement between rounds on shared items",
                               ("n shared", "Cohen's kappa", "raw agreement"),
                               [(g["n_shared"], f"{g['kappa']:.3f}", f"{g['raw_agreement']:.3f}")]))
  for name, table in result["qn_type_pairs"].items():
    tables.append(report.Table(f"Question types, {name} round: actual (rows) x alternative (columns)",
                               ["actual"] + table["qn_types"],
                               [[t] + row for t, row in zip(table["qn_types"], table["counts"])]))
  groups = ["all"] + list(asq.PAIR_GROUPS)
  tables.append(report.Table("Accuracy by pair type (groups overlap)", ["judge"] + groups,
                             [[j] + [f"{_ci(b[g])} n={b[g]['n']}" if g in b else "" for g in groups]
                              for j, b in result["by_pair_type"].items()]))
  charts = [_rate_chart(f"Accuracy by pair type: {j}", b) for j, b in result["by_pair_type"].items()]
  return result, tables, charts


def _comparison_items(args):
  """The comparisons as `CandidateItem`s, and the summarize-from-feedback records (else None)."""
  # pylint: disable=g-import-not-at-top
  from t5_tasks.baselines import preference_heuristics
  from t5_tasks.sources import heap
  from t5_tasks.sources import summarize_feedback
  from t5_tasks.sources import turingadvice
  fmt, path = args.comparison_format, args.comparisons
  if not path:
    raise app.UsageError("agreement needs --comparisons")
  if fmt == "summarize_feedback":
    comparisons = summarize_feedback.read_comparisons(path)[0]
    return preference_heuristics.items_from_summary_comparisons(comparisons), comparisons
  if fmt == "turingadvice":
    return preference_heuristics.items_from_turingadvice(turingadvice.read_turingadvice_eval(path)[0]), None
  if fmt.startswith("heap:") and fmt[5:] in heap.HEAP_CRITERIA:
    return preference_heuristics.items_from_heap(heap.read_heap_comparisons(fmt[5:], path)[0], fmt[5:]), None
  raise app.UsageError(f"unknown --comparison_format {fmt!r}")


def _length_control_pairs(args, items) -> list[tuple[str, str]]:
  """--length_controlled, else each system against the human-written one (appendix F, Fig. 10a)."""
  from t5_tasks.analysis import agreement  # pylint: disable=g-import-not-at-top
  from t5_tasks.baselines import preference_heuristics  # pylint: disable=g-import-not-at-top
  if args.length_controlled:
    pairs = [tuple(p.split(",")) for p in args.length_controlled]
    bad = [",".join(p) for p in pairs if len(p) != 2]
    if bad:
      raise app.UsageError(f"--length_controlled takes A,B; got {bad[0]!r}")
    return pairs
  human = {"turingadvice": preference_heuristics.REDDIT_ADVICE,
           "summarize_feedback": agreement.REFERENCE_POLICY}.get(args.comparison_format)
  systems = dict.fromkeys(s for it in items for s in it.metadata.get("systems", ()))
  return [(s, human) for s in systems if s != human] if human in systems else []


def analyze_agreement(args):
  from t5_tasks.analysis import agreement  # pylint: disable=g-import-not-at-top
  items, comparisons = _comparison_items(args)
  judges = agreement.heuristic_scores(items)
  notes = []
  if comparisons is not None:
    references = agreement.reference_summaries(comparisons)
    rouge = agreement.rouge_scores(items, [references.get(c.id) for c in comparisons])
    if rouge["n_judged"]:
      judges["ROUGE"] = rouge["scores"]
    notes.append(f"ROUGE (mean F1 of {', '.join(agreement.ROUGE_TYPES)} against the post's reference summary, "
                 f"policy {agreement.REFERENCE_POLICY!r}) judged {rouge['n_judged']} of {len(items)} comparisons; "
                 f"left out: {rouge['n_without_reference']} whose post has no reference summary, "
                 f"{rouge['n_reference_is_a_candidate']} in which the reference is one of the two summaries")
  else:
    rouge = None
    notes.append(f"ROUGE: --comparison_format={args.comparison_format} has no reference summaries, so no ROUGE judge")
  for name, predictions in _named_predictions(args).items():
    judges[name] = agreement.scores_from_predictions(items, predictions, name)
  rates = agreement.agreement_rates(judges, seed=args.seed)
  labelers = agreement.labeler_agreement(comparisons, seed=args.seed) if comparisons is not None else None
  if labelers is not None and labelers["rate"] is None:
    notes.append(f"labelers: no comparison was labelled by two different workers "
                 f"({labelers['n_labels_without_worker']} labels name no worker)")
  elif labelers is None:
    notes.append(f"labelers: --comparison_format={args.comparison_format} names no workers")
  pairs = _length_control_pairs(args, items)
  controlled = None
  if pairs:
    try:
      controlled = agreement.length_controlled_preferences(items, pairs, seed=args.seed)
    except ValueError as e:
      if args.length_controlled:
        raise app.UsageError(f"--length_controlled: {e}") from e
      notes.append(f"{e}; no length-controlled preferences")
  result = {"n_comparisons": len(items), "agreement": rates, "labeler_agreement": labelers,
            "rouge": rouge and {k: v for k, v in rouge.items() if k != "scores"},
            "length_controlled": controlled, "notes": notes}
  se = lambda e: f"{e['value']:.3f} ± {e['se']:.3f}"
  names = list(rates["between"])
  with_humans = [(n, e["n"], se(e)) for n, e in rates["with_humans"].items()]
  if labelers is not None and labelers["rate"] is not None:
    with_humans.append(("labelers (another worker, same comparison)", labelers["rate"]["n"], se(labelers["rate"])))
  tables = [
      report.Table(f"Agreement with humans on {len(items)} comparisons (± bootstrap SE)",
                   ("judge", "n", "agreement"), with_humans),
      report.Table("Agreement between judges (± bootstrap SE)", ["judge"] + names,
                   [[a] + [se(rates["between"][a][b]) if b != a else "-" for b in names] for a in names]),
  ]
  if controlled:
    ci = lambda e: _ci(e) if e else "-"
    ratio = lambda r: f"{r:+.3f}" if r is not None else "-"
    tables.append(report.Table(
        f"Human preference for A over B, raw and at equal length (appendix F: one logistic regression over "
        f"{controlled['n_comparisons']} comparisons of {len(controlled['policies'])} policies, read at log length "
        f"ratio 0; 95% CI, {controlled['n_resamples_without_fit']} of {controlled['n_resamples']} resamples "
        f"without a finite fit left out)",
        ("A", "B", "n direct", "raw", "length-controlled", "mean log length ratio"),
        [(c["a"], c["b"], c["n_direct"], ci(c["raw"]), _ci(c["length_controlled"]),
          ratio(c["mean_log_length_ratio"])) for c in controlled["pairs"]]))
  tables.append(report.Table("Notes", ("note",), [(n,) for n in notes]))
  labeler_rate = {"labelers": labelers["rate"]} if labelers and labelers["rate"] else {}
  charts = [_rate_chart("Agreement with humans", {**rates["with_humans"], **labeler_rate})]
  return result, tables, charts


ANALYSES = {"turingadvice": analyze_turingadvice, "asq": analyze_asq, "agreement": analyze_agreement}


def run(command: str, args: flags.FlagValues) -> dict:
  """Runs one analysis with parsed flags `args`: prints its tables, writes its files."""
  if command not in ANALYSES:
    raise app.UsageError(f"give one analysis: {', '.join(ANALYSES)}")
  if not args.out:
    raise app.UsageError("--out is required")
  result, tables, charts = ANALYSES[command](args)
  for table in tables:
    _print_table(table)
  os.makedirs(args.out, exist_ok=True)
  outputs.atomic_write_text(os.path.join(args.out, "analysis.json"), json.dumps(result, indent=2) + "\n")
  page = report.write_report(args.out, title=f"{command} analysis", charts=charts, tables=tables)
  print(f"\nwrote {os.path.join(args.out, 'analysis.json')} and {page}")
  return result


def main(argv: Sequence[str]) -> None:
  if len(argv) != 2:
    raise app.UsageError(f"give one analysis: {', '.join(ANALYSES)}")
  console.quiet_libraries()
  run(argv[1], flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  app.run(main)
