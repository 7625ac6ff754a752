r"""Runs a lexical baseline like a model evaluation: predictions.jsonl, metrics.json, report.html.

  python -m scripts.run_baseline --baseline=timedial_overlap --eval_file=timedial_test.json --out=/tmp/b
  python -m scripts.run_baseline --baseline=asq_similarity --eval_file=asq.json --train_fraction=0.7 --out=/tmp/b
  python -m scripts.run_baseline --baseline=length --eval_format=turingadvice --eval_file=eval.jsonl --out=/tmp/b
  python -m scripts.run_baseline --baseline=tfidf_advice --train_file=advice.jsonl --eval_file=advice.jsonl \
      --out=/tmp/b
"""
from typing import Sequence

from absl import app
from absl import flags

from runner import outputs
from runner import report
from t5_tasks import metrics as t5_metrics
from t5_tasks.analysis import mean_interval
from t5_tasks.baselines import asq_similarity
from t5_tasks.baselines import preference_heuristics
from t5_tasks.baselines import accuracy_metrics
from t5_tasks.baselines import prediction_record
from t5_tasks.baselines import tfidf_advice
from t5_tasks.baselines import timedial_overlap
from t5_tasks.sources import asq
from t5_tasks.sources import heap
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice

BASELINES = ("tfidf_advice", "asq_similarity", "length", "copying", "timedial_overlap")
PREFERENCE_FORMATS = ["turingadvice", "summarize_feedback"] + [f"heap:{c}" for c in heap.HEAP_CRITERIA]

def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the command line's flags (on `fv`; tests pass their own FlagValues)."""
  flags.DEFINE_enum("baseline", None, BASELINES, "Which baseline to run.", flag_values=fv)
  flags.DEFINE_string("eval_file", None, "Released file to evaluate on.", flag_values=fv)
  flags.DEFINE_string("train_file", None, "Training file (tfidf_advice, asq_similarity).", flag_values=fv)
  flags.DEFINE_string(
      "eval_format", None, "Preference baselines: one of " + ", ".join(PREFERENCE_FORMATS)
      + "; tfidf_advice: reddit_advice (default) or turingadvice.", flag_values=fv)
  flags.DEFINE_string("eval_split", "test", "tfidf_advice on RedditAdvice: split to answer.", flag_values=fv)
  flags.DEFINE_float(
      "train_fraction", None, "asq_similarity without --train_file: train on this leading share of the eval file.",
      flag_values=fv)
  flags.DEFINE_list("annotation_files", [], "asq_similarity: ASQ annotation rounds (pair types).",
                    flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "Bootstrap seed.", flag_values=fv)
  flags.mark_flags_as_required(["baseline", "eval_file", "out"], flag_values=fv)


def run_asq_similarity(args, seed: int):
  items, _ = asq.read_asq(args.eval_file)
  if args.train_file:
    train, test = asq.read_asq(args.train_file)[0], items
  elif args.train_fraction and 0 < args.train_fraction < 1:
    cut = int(len(items) * args.train_fraction)
    train, test = items[:cut], items[cut:]
  else:
    raise app.UsageError("asq_similarity needs --train_file or --train_fraction in (0, 1)")
  pair_types = asq.pair_types_by_id(*(asq.read_asq_annotations(f)[0] for f in args.annotation_files))
  model = asq_similarity.AsqSimilarity().fit(asq_similarity.items_from_asq(train))
  test_items = asq_similarity.items_from_asq(test, pair_types)
  records = [prediction_record(it, s) for it, s in zip(test_items, model.score(test_items))]
  notes = [f"trained on {len(train)} items, tested on {len(test)}; weights {model.weights}"]
  return records, {"asq": accuracy_metrics(records, by="pair_type", seed=seed)}, notes


def _preference_items(args):
  fmt = args.eval_format
  if fmt == "turingadvice":
    situations, _ = turingadvice.read_turingadvice_eval(args.eval_file)
    return preference_heuristics.items_from_turingadvice(situations)
  if fmt == "summarize_feedback":
    return preference_heuristics.items_from_summary_comparisons(
        summarize_feedback.read_comparisons(args.eval_file)[0])
  if fmt and fmt.startswith("heap:") and fmt[5:] in heap.HEAP_CRITERIA:
    criterion = fmt[5:]
    return preference_heuristics.items_from_heap(heap.read_heap_comparisons(criterion, args.eval_file)[0],
                                                 criterion)
  raise app.UsageError(f"--eval_format must be one of {PREFERENCE_FORMATS}, got {fmt!r}")


def run_preference(args, seed: int):
  items = _preference_items(args)
  scorer = preference_heuristics.SCORERS[args.baseline]
  scores = preference_heuristics.score_items(items, scorer)
  records = [prediction_record(it, s) for it, s in zip(items, scores)]
  task = items[0].task if items else args.eval_format
  good = [r["scores"][0] for r in records]
  bad = [r["scores"][1] for r in records]
  metrics = {task: {"pairwise_accuracy": t5_metrics.pairwise_accuracy(good, bad, seed=seed).as_dict()}}
  return records, metrics, []


def run_timedial(args, seed: int):
  items = timedial_overlap.items_from_timedial(timedial.read_timedial(args.eval_file)[0])
  records = timedial_overlap.predict(items)
  return records, timedial_overlap.metrics(records, seed=seed), []


def run_tfidf_advice(args, seed: int):
  if not args.train_file:
    raise app.UsageError("tfidf_advice needs --train_file (RedditAdvice2019 JSON lines)")
  train = [s for s in reddit_advice.read_reddit_advice(args.train_file)[0] if s.split == "train"]
  retriever = tfidf_advice.TfidfAdviceRetriever().fit(train)
  if args.eval_format == "turingadvice":
    situations = turingadvice.read_turingadvice_eval(args.eval_file)[0]
    references = [s.best_advice for s in situations]
  else:
    situations, _ = reddit_advice.read_reddit_advice(args.eval_file)
    situations = [s for s in situations if s.split == args.eval_split]
    references = [max(s.good_comments, key=lambda c: c.score).body for s in situations]
  if not situations:
    raise app.UsageError(f"no situations to answer in {args.eval_file}")
  instances = [{f: getattr(s, f) for f in tfidf_advice.CONTEXT_FIELDS} for s in situations]
  generations = retriever.generate(instances)
  neighbours = retriever.retrieve(instances)
  similarity = retriever.advice_similarity(generations, references)
  records = [{"task": "advice_generation", "id": s.id, "generation": g, "retrieved_id": n[0],
              "retrieval_similarity": n[1], "reference_similarity": r}
             for s, g, n, r in zip(situations, generations, neighbours, similarity)]
  estimate = lambda v: {k: mean_interval(v, seed=seed)[k] for k in ("value", "low", "high")}
  metrics = {"advice_generation": {"retrieval_similarity": estimate([n[1] for n in neighbours]),
                                   "reference_similarity": estimate(similarity)}}
  return records, metrics, [f"indexed {len(train)} training situations; answered {len(situations)}"]


RUNNERS = {"tfidf_advice": run_tfidf_advice, "asq_similarity": run_asq_similarity, "length": run_preference,
           "copying": run_preference, "timedial_overlap": run_timedial}


def run(args: flags.FlagValues) -> None:
  """Runs the baseline that parsed flags `args` name and writes its outputs."""
  records, metrics, notes = RUNNERS[args.baseline](args, args.seed)
  outputs.write_predictions(args.out, records)
  outputs.write_metrics(args.out, metrics)
  page = report.write_report(args.out, title=f"Baseline {args.baseline} on {args.eval_file}",
                             metrics=metrics, notes=notes)
  for task, by_name in metrics.items():
    for name, e in by_name.items():
      print(f"{task:28s} {name:32s} {e['value']:.4f}  [{e['low']:.4f}, {e['high']:.4f}]")
  for note in notes:
    print(note)
  print(f"wrote {len(records)} predictions and {page}")


def main(argv: Sequence[str]) -> None:
  del argv
  run(flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  app.run(main)
