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
given may be local or `gs://...` (read and written through `storage`).
"""
import collections
import json
import os
import re
from typing import Mapping, Sequence

import numpy as np

from absl import app
from absl import flags

from runner import outputs
from runner import report
from scripts import console
import storage

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
  flags.DEFINE_list("eval_dirs", [], "heap_runs: evaluation output directories (one metrics.json each), "
                    "one per seed.", flag_values=fv)
  flags.DEFINE_string("output", None, "heap, heap_runs: JSON file for the table.", flag_values=fv)
  flags.DEFINE_string("data_dir", None, "heap: folder of HEAP's released files (searched recursively).",
                      flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory for analysis.json and report.html.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=fv)


def _ci(e: dict) -> str:
  return f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def _improvement(test: dict) -> str:
  return f"{test['improvement']:+.1f} (p={test['p']:.2g})"


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
  pairs = {(t["a"], t["b"]): t for t in result["improvements"]}
  categories = ta_analysis.DIAGNOSTIC_CATEGORIES
  tables = [
      report.Table(f"Preferred over the top Reddit advice ({result['n_situations']} situations, 95% CI)",
                   ("system", "preference rate", "continuous score"),
                   [(s, _ci(result["preference_rates"][s]), _ci(result["continuous_scores"][s]))
                    for s in systems]),
      report.Table("Improvement (Fig. 5): preference rate of row minus column, in points (p: paired t-test "
                   "on the continuous scores, appendix C)", ["system"] + systems,
                   [[a] + [_improvement(pairs[(a, b)]) if a != b else "" for b in systems] for a in systems]),
      report.Table("Diagnostics of the system's advice where the Reddit advice won (Fig. 7: share of the "
                   "pieces of advice, n)", ["system", "n"] + list(categories),
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
    found = storage.glob(args.annotation_dir, f"*annotation_{round_name}.json")
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
    folder = storage.parent(path if storage.is_bucket(path) else os.path.abspath(path))
    named[name or storage.name(folder)] = outputs.read_predictions(path)
  return named


def analyze_asq(args):
  from t5_tasks.analysis import asq as asq_analysis  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import asq  # pylint: disable=g-import-not-at-top
  rounds = [asq.read_asq_annotations(f)[0] for f in _annotation_files(args)]
  result = asq_analysis.analyze(*rounds, system_predictions=_named_predictions(args), seed=args.seed)
  for warning in result["warnings"]:
    print(f"WARNING: {warning}", flush=True)
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
  # Table 4's layout: a row per pair type, a column per judge (humans: the first round), then
  # "% in data" (the first round's instances in the group; the groups overlap).
  judges = list(result["by_pair_type"])
  shares = result["pair_type_shares"]
  rows = [[g] + [f"{_ci(b[g])} n={b[g]['n']}" if g in b else "" for b in result["by_pair_type"].values()]
          + [f"{100 * shares[g]['share']:.1f}%" if g in shares else ""] for g in ["all", *asq.PAIR_GROUPS]]
  tables.append(report.Table("Accuracy by pair type (Table 4; humans: the first round)",
                             ["pair type"] + judges + ["% in data"], rows))
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
  if fmt.startswith("heap:") and fmt[5:].lower() in {a.lower() for a in heap.HEAP_CRITERIA}:
    criterion = heap.criterion_of(fmt[5:])
    return preference_heuristics.items_from_heap(heap.read_heap_comparisons(criterion, path)[0],
                                                 heap.task_name(criterion)), None
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
  pooled = ", pooled across policies; G.7's tables, one policy at one temperature each, follow" if comparisons else ""
  tables = [
      report.Table(f"Agreement with humans on {len(items)} comparisons{pooled} (± bootstrap SE)",
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
  if comparisons is not None:
    result["by_policy"], result["confidence_thresholds"] = _g7_tables(comparisons, judges, tables, notes, args.seed)
  tables.append(report.Table("Notes", ("note",), [(n,) for n in notes]))
  labeler_rate = {"labelers": labelers["rate"]} if labelers and labelers["rate"] else {}
  charts = [_rate_chart("Agreement with humans", {**rates["with_humans"], **labeler_rate})]
  return result, tables, charts


def _g7_tables(comparisons, judges, tables, notes, seed: int) -> tuple[list, dict]:
  """Appendix G.7's agreement, one table per (policy, temperature) whose samples both summaries
  of a comparison are, with the labeler ensemble as a judge; and each labeler's high-confidence
  threshold (C.1, step 4). Appends the tables and notes; returns (per-group results, thresholds)."""
  from t5_tasks.analysis import agreement  # pylint: disable=g-import-not-at-top
  se = lambda e: f"{e['value']:.3f} ± {e['se']:.3f} (n={e['n']})" if e else "-"
  groups = agreement.same_policy_groups(comparisons)
  if not groups:
    notes.append("G.7: no comparison has two summaries of one policy at one temperature, so no G.7 table "
                 "(the tables above pool comparisons of different policies)")
  by_policy = []
  for (policy, temperature), indices in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or 0.0)):
    subset = [comparisons[i] for i in indices]
    group_judges = {name: [scores[i] for i in indices] for name, scores in judges.items()}
    group_judges = {name: s for name, s in group_judges.items() if not np.isnan(np.asarray(s, float)).all()}
    rates = agreement.agreement_rates(group_judges, seed=seed)
    labelers = agreement.labeler_agreement(subset, seed=seed)
    ensemble = agreement.labeler_ensemble(subset, group_judges, seed=seed)
    by_policy.append({"policy": policy, "temperature": temperature, "n_comparisons": len(indices),
                      "agreement": rates, "labeler_agreement": labelers, "labeler_ensemble": ensemble})
    rows = [("labeler", se(labelers["rate"]), se(ensemble["with_labelers"]))]
    rows += [(name, se(rates["with_humans"][name]), se(ensemble["with_judges"].get(name))) for name in group_judges]
    at = f"T={temperature:g}" if temperature is not None else "temperature not recorded"
    tables.append(report.Table(
        f"G.7: {policy} at {at}, {len(indices)} comparisons of two of its summaries (± bootstrap SE; the "
        f"ensemble: the modal label of >= 3 workers, leaving out the labeler it is compared with; "
        f"{ensemble['n_comparisons']} comparisons have one)",
        ("judge", "agreement with a labeler", "agreement with the labeler ensemble"), rows))
  thresholds = agreement.confidence_thresholds(comparisons)
  if thresholds:
    tables.append(report.Table(
        "High-confidence thresholds per labeler (C.1 step 4: the lowest confidence at or above which the "
        "labeler's labels agree 80% of the time with the majority of the other workers on the same comparison)",
        ("worker", "threshold", "agreement at it", "labels at or above it", "labels with a reference"),
        [(w, t["threshold"] if t["threshold"] is not None else "none reaches 80%", f"{t['agreement']:.3f}",
          t["n"], t["n_labels"]) for w, t in thresholds.items()]))
    reached = {w: t["threshold"] for w, t in thresholds.items() if t["threshold"] is not None}
    notes.append(f"to select on these labels (C.1), bind t5_tasks.families.comparison_filter.min_confidence = "
                 f"{reached!r} (a labeler it does not name keeps no label)")
  else:
    notes.append("confidence thresholds: no label with a confidence has two other workers on its comparison")
  return by_policy, thresholds


def _spread(values: Sequence[float]) -> dict:
  """Mean and sample standard deviation (ddof=1; None for one run) over runs, and the values."""
  return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
          "n": len(values), "values": [float(v) for v in values]}


def _criterion_entry(metrics: Mapping[str, dict], task: str) -> dict | None:
  """A criterion's metrics in one run: its task's, or its `_tfds` twin's."""
  return metrics.get(task) or metrics.get(f"{task}_tfds")


def heap_run_summary(runs: Mapping[str, Mapping[str, dict]], criteria: Sequence[str],
                     clusters: Mapping[str, Sequence[str]], task_name) -> dict:
  """Table 2 and 3 over several runs (seeds): per criterion and per cluster, mean ± std over runs.

  runs: {eval dir: its metrics.json}. A criterion's pairwise accuracy and Spearman (where the
  run has one) are taken from each run that evaluated it; a cluster's value in a run is the
  unweighted mean accuracy of its criteria that run evaluated (Table 3's Average), "all" over
  every criterion (Table 2's Average), as scripts/evaluate.py writes them.
  """
  per_run = [{a: e for a in criteria if (e := _criterion_entry(metrics, task_name(a)))}
             for metrics in runs.values()]
  table = {"runs": list(runs), "criteria": {}, "clusters": {}}
  for a in criteria:
    entries = [found[a] for found in per_run if a in found]
    if entries:
      table["criteria"][a] = {"runs": len(entries)}
      table["criteria"][a].update({name: _spread([e[name]["value"] for e in entries if name in e])
                                   for name in ("pairwise_accuracy", "spearman")
                                   if any(name in e for e in entries)})
  for cluster, members in {**clusters, "all": tuple(criteria)}.items():
    averages, sizes = [], set()
    for found in per_run:
      accuracy = [found[a]["pairwise_accuracy"]["value"] for a in members
                  if a in found and "pairwise_accuracy" in found[a]]
      if accuracy:
        averages.append(np.mean(accuracy))
        sizes.add(len(accuracy))
    if averages:
      table["clusters"][cluster] = {"criteria": sorted(sizes), "pairwise_accuracy": _spread(averages)}
  return table


def _mean_std(e: dict | None, scale: float, digits: int) -> str:
  if not e:
    return "-"
  std = "" if e["std"] is None else f" ± {scale * e['std']:.{digits}f}"
  return f"{scale * e['mean']:.{digits}f}{std}"


def _training_mixture(eval_dir: str) -> str | None:
  """What the evaluated checkpoint trained on: MIXTURE_OR_TASK_NAME of its run's config.gin
  (None when the checkpoint is not a training run's MODEL_DIR)."""
  checkpoint = (outputs.read_provenance(eval_dir) or {}).get("checkpoint_path")
  config = checkpoint and storage.join(checkpoint, "config.gin")
  if not config or not storage.exists(config):
    return None
  found = re.search(r"^MIXTURE_OR_TASK_NAME = '([^']+)'", storage.read_text(config), re.M)
  return found and found.group(1)


def _check_one_model(eval_dirs: Sequence[str]) -> None:
  """Refuses runs trained on different mixtures: they are different models (protocols, targets),
  not seeds of one, and averaging a criterion over them mixes held-out and trained-on figures."""
  mixtures = {directory: mixture for directory in dict.fromkeys(eval_dirs)
              if (mixture := _training_mixture(directory))}
  if len(set(mixtures.values())) > 1:
    raise app.UsageError("runs trained on different mixtures are not seeds of one model: "
                         + ", ".join(f"{d} ({m})" for d, m in mixtures.items())
                         + "; a protocol's tables, each criterion from its own run: python -m scripts.heap")


def heap_runs(args) -> dict:
  """Prints HEAP's Table 2 and 3 shapes over the runs of --eval_dirs (each one seed of one model, a
  distinct checkpoint); writes JSON to --output. A protocol's tables, each criterion's figure from
  the run that held it out, are `python -m scripts.heap`'s."""
  from t5_tasks.sources import heap  # pylint: disable=g-import-not-at-top
  if not args.eval_dirs:
    raise app.UsageError("heap_runs needs --eval_dirs=DIR1,DIR2,... (evaluation output directories)")
  runs, checkpoints = {}, {}
  for directory in dict.fromkeys(args.eval_dirs):  # a folder named twice is one run
    if not storage.exists(storage.join(directory, outputs.METRICS_FILE)):
      raise app.UsageError(f"{directory}: no {outputs.METRICS_FILE} (evaluate the run first)")
    # Seeds are different models: two evaluations of one checkpoint would count as two runs that
    # agree exactly (a spread of 0.00), so they are refused by the parameters' fingerprint.
    fingerprint = (outputs.read_provenance(directory) or {}).get("params_fingerprint")
    if fingerprint in checkpoints:
      raise app.UsageError(f"{directory} and {checkpoints[fingerprint]} evaluated the same parameters "
                           f"({fingerprint[:23]}...): give one evaluation per seed's run")
    if fingerprint:
      checkpoints[fingerprint] = directory
    runs[directory] = outputs.read_metrics(directory)
  _check_one_model(args.eval_dirs)
  table = heap_run_summary(runs, tuple(heap.HEAP_CRITERIA), heap.CLUSTERS, heap.task_name)
  if not table["criteria"]:
    raise app.UsageError(f"no HEAP criterion is evaluated in {', '.join(args.eval_dirs)}")
  n = len(runs)
  _print_table(report.Table(
      f"HEAP per criterion over {n} runs (Table 2): accuracy in %, mean ± std (ddof=1); each folder "
      "one seed of one model (per-protocol tables: python -m scripts.heap)",
      ("criterion", "runs", "accuracy", "Spearman"),
      [(a, e["runs"], _mean_std(e.get("pairwise_accuracy"), 100, 2),
        _mean_std(e.get("spearman"), 1, 3)) for a, e in table["criteria"].items()]))
  _print_table(report.Table(
      f"HEAP average accuracy per cluster over {n} runs (Table 3; all: Table 2's Average), in %",
      ("cluster", "criteria", "runs", "accuracy"),
      [(c, "/".join(map(str, e["criteria"])), e["pairwise_accuracy"]["n"],
        _mean_std(e["pairwise_accuracy"], 100, 2)) for c, e in table["clusters"].items()]))
  if args.output:
    storage.write_text(args.output, json.dumps(table, indent=2) + "\n")
    print(f"\nwrote {args.output}")
  return table


def _relative(path: str, folder: str) -> str:
  """`path` as found under `folder` (a local folder or a `gs://` prefix), relative to it."""
  if storage.is_bucket(folder):
    return path[len(folder.rstrip("/")) + 1:] if path.startswith(folder.rstrip("/") + "/") else path
  return os.path.relpath(path, folder)


def heap_counts(args) -> dict:
  """Prints each HEAP criterion's comparisons from the released files under --data_dir, and how
  §3's random 80/10/10 split divides them; writes JSON to --output."""
  from t5_tasks.sources import heap  # pylint: disable=g-import-not-at-top
  if not args.data_dir or not storage.is_dir(args.data_dir):
    raise app.UsageError(f"heap needs --data_dir, a folder of HEAP's released files (got {args.data_dir!r})")
  counts, reports = {}, {}
  for abbreviation, criterion in heap.HEAP_CRITERIA.items():
    paths = heap.find_source_files(args.data_dir, criterion.source)
    entry = {"name": criterion.name, "source": criterion.source, "files": paths, "comparisons": None}
    if paths:
      splits = collections.Counter()
      for path in paths:
        comparisons, read = heap.read_heap_comparisons(abbreviation, path)
        splits.update(heap.split_comparisons(comparisons, "paper", seed=0).values())
        if read.normalised:
          reports[path] = read.summary()
      entry.update(comparisons=sum(splits.values()), **{s: splits[s] for s in ("train", "validation", "test")})
    counts[abbreviation] = entry
  for line in reports.values():
    print(f"NOTE: {line}")
  _print_table(report.Table(
      f"HEAP comparisons under {args.data_dir} (split: §3's random 80/10/10, seed 0)",
      ("criterion", "name", "comparisons", "train", "validation", "test", "file"),
      [(a, e["name"], e["comparisons"] if e["files"] else "bring your own file",
        *(e.get(s, "") for s in ("train", "validation", "test")),
        ", ".join(_relative(p, args.data_dir) for p in e["files"])) for a, e in counts.items()]))
  total = sum(e["comparisons"] or 0 for e in counts.values())
  print(f"\n{sum(bool(e['files']) for e in counts.values())} of {len(counts)} criteria have a file here; "
        f"{total} comparisons")
  if args.output:
    storage.write_text(args.output, json.dumps(counts, indent=2) + "\n")
    print(f"wrote {args.output}")
  return counts


ANALYSES = {"turingadvice": analyze_turingadvice, "asq": analyze_asq, "agreement": analyze_agreement}
# Summaries of evaluations already made: they print, and write JSON to --output (no report).
SUMMARIES = {"heap": heap_counts, "heap_runs": heap_runs}


def run(command: str, args: flags.FlagValues) -> dict:
  """Runs one analysis with parsed flags `args`: prints its tables, writes its files."""
  if command in SUMMARIES:
    return SUMMARIES[command](args)
  if command not in ANALYSES:
    raise app.UsageError(f"give one analysis: {', '.join([*ANALYSES, *SUMMARIES])}")
  if not args.out:
    raise app.UsageError("--out is required")
  result, tables, charts = ANALYSES[command](args)
  for table in tables:
    _print_table(table)
  storage.makedirs(args.out)
  storage.write_text(storage.join(args.out, "analysis.json"), json.dumps(result, indent=2) + "\n")
  page = report.write_report(args.out, title=f"{command} analysis", charts=charts, tables=tables)
  print(f"\nwrote {storage.join(args.out, 'analysis.json')} and {page}")
  return result


def main(argv: Sequence[str]) -> None:
  if len(argv) != 2:
    raise app.UsageError(f"give one analysis: {', '.join([*ANALYSES, *SUMMARIES])}")
  console.quiet_libraries()
  run(argv[1], flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  app.run(main)
