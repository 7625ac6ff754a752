"""turingadvice: TuringAdvice's preference rates, improvements, diagnostics and domains (its Fig. 5, 7) from --eval_file."""
from runner import report
from scripts.analyses.common import with_interval, improvement_text, rate_chart


def _fig7_beside_the_paper(result) -> report.Table:
  """Fig. 7's shares stated in the paper's words (§5.1, caption), each over the paper's whole round,
  beside this file's, each over the situations it has (t5_tasks.analysis.turingadvice's docstring:
  no definition the paper's words allow reproduces them all)."""
  paper_round = result["population"]["paper_round_situations"]
  rows = []
  for system, by_category in result["paper_fig7"].items():
    here = result["diagnostics"].get(system)
    for category, figures in by_category.items():
      if not here:
        cell = "(not rated here)"
      elif not here["n"]:
        cell = f"(no advice lost of {here['n_situations']} situations)"
      else:
        cell = f"{with_interval(here['intervals'][category])} ({here['n']} lost of {here['n_situations']} situations)"
      paper = ", ".join(f"{f['percent']}% ({f['where']})" for f in figures)
      rows.append((system, category, cell, f"{paper}, over {paper_round} situations"))
  return report.Table(f"Fig. 7 beside the paper: here over {result['population']['text']}",
                      ("system", "category", "here (95% CI)", "paper (the whole round)"), rows)


def analyze(args):
  from t5_tasks.analysis import turingadvice as ta_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import turingadvice  # pylint: disable=g-import-not-at-top
  situations, _ = turingadvice.read_turingadvice_eval(args.eval_file)
  result = ta_analysis.analyze(situations, seed=args.seed)
  systems = result["systems"]
  over = result["population"]["text"]
  pairs = {(t["a"], t["b"]): t for t in result["improvements"]}
  categories = ta_analysis.DIAGNOSTIC_CATEGORIES
  tables = [
      report.Table(f"Preferred over the top Reddit advice (95% CI), over {over}",
                   ("system", "preference rate", "continuous score"),
                   [(s, with_interval(result["preference_rates"][s]), with_interval(result["continuous_scores"][s]))
                    for s in systems]),
      report.Table("Improvement (Fig. 5): preference rate of row minus column, in points (p: paired t-test "
                   f"on the continuous scores, appendix C), over {over}", ["system"] + systems,
                   [[a] + [improvement_text(pairs[(a, b)]) if a != b else "" for b in systems] for a in systems]),
      report.Table("Diagnostics of the system's advice where the Reddit advice won (Fig. 7: share of the "
                   f"n pieces of advice lost), over {over}", ["system", "n"] + list(categories),
                   [[s, d["n"]] + [f"{d['shares'][c]:.3f}" for c in categories]
                    for s, d in result["diagnostics"].items()]),
      _fig7_beside_the_paper(result),
      report.Table(f"Preference rate by domain, over {over}", ["domain", "n"] + systems,
                   [[d, v["n_situations"]] + [with_interval(v["rates"][s]) for s in systems]
                    for d, v in result["by_domain"].items()]),
  ]
  charts = [rate_chart("Preference rate over the top Reddit advice", result["preference_rates"]),
            rate_chart("Mean continuous score", result["continuous_scores"])]
  charts += [rate_chart(f"Preference rate, {d} ({v['n_situations']} situations)", v["rates"])
             for d, v in result["by_domain"].items()]
  return result, tables, charts


WRITES_REPORT = True
