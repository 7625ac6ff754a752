"""asq: ASQ's human accuracy, agreement between rounds and accuracy by pair type (Table 4) from its annotation rounds."""
from absl import app

from runner import report
from scripts.analyses.common import with_interval, rate_chart, named_predictions
import storage


def _annotation_files(args) -> list[str]:
  if args.annotation_files:
    return args.annotation_files
  if not args.annotation_dir:
    raise app.UsageError("asq needs --annotation_dir or --annotation_files")
  files = []
  for round_name in ("first", "second"):
    found = storage.glob(args.annotation_dir, f"*annotation_{round_name}.json")
    if len(found) > 1:
      raise ValueError(f"several {round_name}-round files in {args.annotation_dir}: {found}")
    files += found
  if not files:
    raise FileNotFoundError(f"no *annotation_first.json in {args.annotation_dir}")
  return files


def analyze(args):
  from t5_tasks.analysis import asq as asq_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import asq  # pylint: disable=g-import-not-at-top
  rounds = [asq.read_asq_annotations(f)[0] for f in _annotation_files(args)]
  result = asq_analysis.analyze(*rounds, system_predictions=named_predictions(args), seed=args.seed)
  for warning in result["warnings"]:
    print(f"WARNING: {warning}", flush=True)
  tables = [report.Table("Human accuracy (95% CI)", ("round", "n", "accuracy"),
                         [(r, e["n"], with_interval(e)) for r, e in result["human_accuracy"].items()])]
  if "agreement" in result:
    g = result["agreement"]
    tables.append(report.Table("Agreement between rounds on shared items",
                               ("n shared", "Cohen's kappa", "raw agreement"),
                               [(g["n_shared"], f"{g['kappa']:.3f}", f"{g['raw_agreement']:.3f}")]))
  for name, table in result["qn_type_pairs"].items():
    tables.append(report.Table(f"Question types, {name} round: actual (rows) x alternative (columns)",
                               ["actual"] + table["qn_types"],
                               [[t] + row for t, row in zip(table["qn_types"], table["counts"])]))
  # Table 4's layout: a row per pair type, a column per judge (humans: the first round), then
  # "% in data" (the first round's instances in the group; the groups overlap). The two overall
  # rows are over different items, and their labels say which: the annotated items (as the
  # paper's OVERALL), and every item a system scored (its metrics.json's `accuracy`; the humans
  # judged only the annotated ones). The intervals are metrics.json's (metrics.asq_group_accuracy).
  judges = list(result["by_pair_type"])
  shares = result["pair_type_shares"]
  cell = lambda e: f"{with_interval(e)} n={e['n']}" if e else ""
  label = lambda g: result["overall_rows"]["all"] if g == "all" else g
  rows = [[label(g)] + [cell(b.get(g)) for b in result["by_pair_type"].values()]
          + [f"{100 * shares[g]['share']:.1f}%" if g in shares else ""] for g in ["all", *asq.PAIR_GROUPS]]
  if result["system_accuracy"]:
    rows.append([result["overall_rows"]["system_accuracy"]]
                + [cell(result["system_accuracy"].get(j)) for j in judges] + [""])
  tables.append(report.Table("Accuracy by pair type (Table 4; humans: the first round)",
                             ["pair type"] + judges + ["% in data"], rows))
  charts = [rate_chart(f"Accuracy by pair type: {j}", b) for j, b in result["by_pair_type"].items()]
  return result, tables, charts


WRITES_REPORT = True
