"""turingadvice: TuringAdvice's preference rates, improvements, diagnostics and domains (its Fig. 5, 7) from --eval_file."""
from runner import report
from scripts.analyses.common import with_interval, improvement_text, rate_chart


def analyze(args):
  from t5_tasks.analysis import turingadvice as ta_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import turingadvice  # pylint: disable=g-import-not-at-top
  situations, _ = turingadvice.read_turingadvice_eval(args.eval_file)
  result = ta_analysis.analyze(situations, seed=args.seed)
  systems = result["systems"]
  pairs = {(t["a"], t["b"]): t for t in result["improvements"]}
  categories = ta_analysis.DIAGNOSTIC_CATEGORIES
  tables = [
      report.Table(f"Preferred over the top Reddit advice ({result['n_situations']} situations, 95% CI)",
                   ("system", "preference rate", "continuous score"),
                   [(s, with_interval(result["preference_rates"][s]), with_interval(result["continuous_scores"][s]))
                    for s in systems]),
      report.Table("Improvement (Fig. 5): preference rate of row minus column, in points (p: paired t-test "
                   "on the continuous scores, appendix C)", ["system"] + systems,
                   [[a] + [improvement_text(pairs[(a, b)]) if a != b else "" for b in systems] for a in systems]),
      report.Table("Diagnostics of the system's advice where the Reddit advice won (Fig. 7: share of the "
                   "pieces of advice, n)", ["system", "n"] + list(categories),
                   [[s, d["n"]] + [f"{d['shares'][c]:.3f}" for c in categories]
                    for s, d in result["diagnostics"].items()]),
      report.Table("Preference rate by domain", ["domain", "n"] + systems,
                   [[d, v["n_situations"]] + [with_interval(v["rates"][s]) for s in systems]
                    for d, v in result["by_domain"].items()]),
  ]
  charts = [rate_chart("Preference rate over the top Reddit advice", result["preference_rates"]),
            rate_chart("Mean continuous score", result["continuous_scores"])]
  charts += [rate_chart(f"Preference rate, {d} ({v['n_situations']} situations)", v["rates"])
             for d, v in result["by_domain"].items()]
  return result, tables, charts


WRITES_REPORT = True
