"""agreement: how often heuristics, ROUGE and scorers agree with human comparisons, and with each other (appendices F, G.7)."""
import numpy as np
from absl import app

from runner import report
from scripts.analyses.common import with_interval, rate_chart, named_predictions


def _comparison_items(args):
  """The comparisons as `CandidateItem`s, and the summarize-from-feedback records (else None)."""
  # pylint: disable=g-import-not-at-top
  from t5_tasks.baselines import preference_heuristics
  from t5_tasks import heap
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
  raise ValueError(f"unknown --comparison_format {fmt!r}: summarize_feedback, turingadvice or heap:<criterion>")


def _length_control_pairs(args, items) -> list[tuple[str, str]]:
  """--length_controlled, else each system against the human-written one (appendix F, Fig. 10a)."""
  from t5_tasks.analysis import agreement  # pylint: disable=g-import-not-at-top
  from t5_tasks.baselines import preference_heuristics  # pylint: disable=g-import-not-at-top
  if args.length_controlled:
    pairs = [tuple(p.split(",")) for p in args.length_controlled]
    bad = [",".join(p) for p in pairs if len(p) != 2]
    if bad:
      raise ValueError(f"--length_controlled takes A,B; got {bad[0]!r}")
    return pairs
  human = {"turingadvice": preference_heuristics.REDDIT_ADVICE,
           "summarize_feedback": agreement.REFERENCE_POLICY}.get(args.comparison_format)
  systems = dict.fromkeys(s for it in items for s in it.metadata.get("systems", ()))
  return [(s, human) for s in systems if s != human] if human in systems else []


def analyze(args):
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
  for name, predictions in named_predictions(args).items():
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
        raise ValueError(f"--length_controlled: {e}") from e
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
    ci = lambda e: with_interval(e) if e else "-"
    ratio = lambda r: f"{r:+.3f}" if r is not None else "-"
    tables.append(report.Table(
        f"Human preference for A over B, raw and at equal length (appendix F: one logistic regression over "
        f"{controlled['n_comparisons']} comparisons of {len(controlled['policies'])} policies, read at log length "
        f"ratio 0; 95% CI, {controlled['n_resamples_without_fit']} of {controlled['n_resamples']} resamples "
        f"without a finite fit left out)",
        ("A", "B", "n direct", "raw", "length-controlled", "mean log length ratio"),
        [(c["a"], c["b"], c["n_direct"], ci(c["raw"]), with_interval(c["length_controlled"]),
          ratio(c["mean_log_length_ratio"])) for c in controlled["pairs"]]))
  if comparisons is not None:
    result["by_policy"], result["confidence_thresholds"] = _g7_tables(comparisons, judges, tables, notes, args.seed)
  tables.append(report.Table("Notes", ("note",), [(n,) for n in notes]))
  labeler_rate = {"labelers": labelers["rate"]} if labelers and labelers["rate"] else {}
  charts = [rate_chart("Agreement with humans", {**rates["with_humans"], **labeler_rate})]
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


WRITES_REPORT = True
