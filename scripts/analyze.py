r"""Recomputes the papers' tables from released human judgments.

  python -m scripts.analyze turingadvice --eval_file=feb-14-2020_first100.jsonl --out=/tmp/ta
  python -m scripts.analyze asq --annotation_dir=../shared/data/asq [--predictions=NAME=predictions.jsonl] \
      --out=/tmp/asq
  python -m scripts.analyze agreement --comparisons=comparisons.jsonl [--comparison_format=turingadvice] \
      --out=/tmp/ag
  python -m scripts.analyze heap --data_dir=../shared/data/heap [--output=counts.json]
  python -m scripts.analyze heap_runs --eval_dirs=runs/seed0/eval,runs/seed1/eval [--output=heap.json]

Each prints its tables, and writes analysis.json and report.html (with PNG plots) under --out;
heap counts each HEAP criterion's comparisons in the released files; heap_runs summarises
evaluations already made (their metrics.json); both write JSON to --output. Every file or folder
given may be local or `gs://...` (read and written through `storage`). Each analysis is a module of
scripts/analyses/, registered there by name.
"""
import json
from typing import Sequence

from absl import app
from absl import flags

from runner import report
from scripts import analyses
from scripts import console
from scripts import gin_cli
from scripts.analyses import common
import storage

# t5_tasks (seqio, TensorFlow) is imported inside the analyses, once app.run has started absl:
# TensorFlow registers a GPU probe to run when absl starts, and imported at the top of this file
# that probe would run in app.run with stderr open, printing `failed call to cuInit` on a CPU
# machine. Imported later, the probe runs during the import, which t5_tasks does with stderr
# silenced (as scripts/gin_cli.py's start does).

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
  flags.DEFINE_list("eval_dirs", [], "heap_runs: evaluation output directories (one metrics.json each), "
                    "one per seed.", flag_values=fv)
  flags.DEFINE_string("output", None, "heap, heap_runs: JSON file for the table.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "heap: folder of HEAP's released files (searched recursively).",
                      flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory for analysis.json and report.html.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=fv)


def run(command: str, args: flags.FlagValues) -> dict:
  """Runs one analysis with parsed flags `args`: prints its tables, writes its files."""
  if command not in analyses.ANALYSES:
    raise app.UsageError(f"give one analysis: {', '.join(analyses.ANALYSES)}")
  analysis = analyses.ANALYSES[command]
  if not analysis.WRITES_REPORT:
    return analysis.analyze(args)
  if not args.out:
    raise app.UsageError("--out is required")
  result, tables, charts = analysis.analyze(args)
  for table in tables:
    common.print_table(table)
  storage.makedirs(args.out)
  storage.write_text(storage.join(args.out, "analysis.json"), json.dumps(result, indent=2) + "\n")
  page = report.write_report(args.out, title=f"{command} analysis", charts=charts, tables=tables)
  print(f"\nwrote {storage.join(args.out, 'analysis.json')} and {page}")
  return result


def main(argv: Sequence[str]) -> None:
  if len(argv) != 2:
    raise app.UsageError(f"give one analysis: {', '.join(analyses.ANALYSES)}")
  console.quiet_libraries()
  run(argv[1], flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  console.run(gin_cli.one_line_errors(main))  # a missing file or a flag's wrong value: one line
