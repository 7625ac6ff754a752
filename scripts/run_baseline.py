r"""Runs a lexical baseline as a model evaluation with another scorer.

The items are the registered seqio task's own examples of --eval_split (`task.source.examples`,
the items scripts.evaluate scores), read from --eval_file through the task's gin-bound data
files; each item becomes `runner.scoring_loop.item_record` and the metrics are the task's own
(`runner.eval_metrics.task_metrics`), so metrics.json has the model evaluation's names and groups.
Writes predictions.jsonl, metrics.json and report.html.

  python -m scripts.run_baseline --baseline=timedial_overlap --eval_file=timedial_test.json --out=/tmp/b
  python -m scripts.run_baseline --baseline=asq_similarity --eval_file=asq.json --train_fraction=0.7 \
      [--glove_file=glove.6B.300d.txt] --out=/tmp/b
  python -m scripts.run_baseline --baseline=length --eval_format=turingadvice --eval_file=eval.jsonl \
      --out=/tmp/b
  python -m scripts.run_baseline --baseline=tfidf_advice --train_file=advice.jsonl --eval_file=advice.jsonl \
      --out=/tmp/b
"""
from typing import Mapping, Sequence

from absl import app
from absl import flags
import gin

from runner import data
from runner import eval_metrics
from runner import outputs
from runner import report
from runner import scoring_loop
from scripts import console
from scripts import gin_cli  # one_line_errors: a bad record is one line, not a traceback

# seqio and t5_tasks (TensorFlow) are imported inside the functions, once absl has started:
# imported at the top of this file, TensorFlow's GPU probe would run in app.run with stderr open,
# printing `failed call to cuInit` on a CPU machine (scripts/analyze.py does the same).

BASELINES = ("tfidf_advice", "asq_similarity", "length", "copying", "timedial_overlap")
ASQ_TASK = "asq_intent_cloze"
TIMEDIAL_TASK = "timedial_cloze_full"


def preference_tasks() -> dict[str, str]:
  """--eval_format of the preference baselines -> the task whose items they score; TuringAdvice's
  evaluation file is HEAP's advice-helpfulness source (system advice vs the top Reddit advice)."""
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  return {"turingadvice": "heap_ah", "summarize_feedback": "summarize_feedback_preference",
          **{f"heap:{a.lower()}": heap.task_name(a) for a in heap.HEAP_CRITERIA}}


def single_file_datasets() -> dict[str, str]:
  """Task -> its dataset's key in t5_tasks.tasks.data_files; these files hold every split ("all")."""
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  return {"summarize_feedback_preference": "summarize_feedback",
          **{heap.task_name(a): f"heap/{c.source}" for a, c in heap.HEAP_CRITERIA.items()}}


DATA_FILES = "t5_tasks.tasks.data_files.files"


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the command line's flags (on `fv`; tests pass their own FlagValues)."""
  flags.DEFINE_enum("baseline", None, BASELINES, "Which baseline to run.", flag_values=fv)
  flags.DEFINE_string("eval_file", None, "Released file to evaluate on.", flag_values=fv)
  flags.DEFINE_string("train_file", None, "Training file (tfidf_advice, asq_similarity).", flag_values=fv)
  flags.DEFINE_string(
      "eval_format", None, "length and copying: the file's format, one of turingadvice, summarize_feedback, "
      "heap:<criterion> (heap:ah, heap:cng, ...); tfidf_advice: reddit_advice (default) or turingadvice.", flag_values=fv)
  flags.DEFINE_string(
      "eval_split", "test", "Split to evaluate, as scripts.evaluate's SPLIT (HEAP and summarize files are "
      "split as their tasks split them); tfidf_advice on RedditAdvice: the released split name.",
      flag_values=fv)
  flags.DEFINE_float(
      "train_fraction", None,
      "asq_similarity without --train_file: train on this leading share of the evaluated items, test on the "
      "rest.", flag_values=fv)
  flags.DEFINE_string(
      "glove_file", None,
      "asq_similarity: a GloVe text file (word, then numbers, per line) for the paper's two word-vector "
      "features (ASQ §5); without it the baseline runs on tf-idf and overlap only, and its name says so.",
      flag_values=fv)
  flags.DEFINE_list("annotation_files", [],
                    "asq_similarity: ASQ annotation rounds (pair types); default: the task's.",
                    flag_values=fv)
  flags.DEFINE_string("out", None, "Output directory.", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "tfidf_advice: bootstrap seed of its similarity intervals.", flag_values=fv)
  flags.mark_flags_as_required(["baseline", "eval_file", "out"], flag_values=fv)


def task_examples(task_name: str, split: str, files: Mapping[str, Mapping[str, str]]):
  """(task, its examples of `split`) with the task's datasets read from `files` (data_files keys)."""
  import seqio  # pylint: disable=g-import-not-at-top
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  gin.bind_parameter(DATA_FILES, dict(files))
  task = seqio.get_mixture_or_task(task_name)
  examples = task.source.examples(split)
  if not examples:
    raise ValueError(f"{task_name} has no {split!r} items in {dict(files)}")
  return task, examples


def evaluated(task, split: str, scores: Sequence[Sequence[float]], first: int = 0,
              notes: Sequence[str] = ()):
  """(records, metrics, notes) of the split's examples `first`, `first` + 1, ... scored `scores`.

  Records and metrics are runner.evaluate's. Each record's metadata is read back through the
  task's source dataset, as the model evaluation reads it (its dtypes: float32 human scores).
  """
  examples = task.source.examples(split)
  ids = scoring_loop.distinct_ids([example["id"] for example in examples], {})
  metadata = [data.example_metadata(example)
              for example in task.source.get_dataset(split, shuffle=False).as_numpy_iterator()]
  records = [scoring_loop.item_record(task.name, ids[i], metadata[i], item_scores,
                                  examples[i]["candidate_labels"], [True] * len(examples[i]["candidates"]))
             for i, item_scores in enumerate(scores, first)]
  notes = [f"{task.name}, split {split!r}: {len(records)} items"] + list(notes)
  return records, {task.name: eval_metrics.task_metrics(task, records)}, notes


def run_asq_similarity(args):
  from t5_tasks.baselines import asq_similarity  # pylint: disable=g-import-not-at-top
  if not args.train_file and not (args.train_fraction and 0 < args.train_fraction < 1):
    raise app.UsageError("asq_similarity needs --train_file or --train_fraction in (0, 1)")
  if args.train_file and args.eval_split == "train":
    raise app.UsageError("asq_similarity with --train_file evaluates a split other than 'train'")
  files = {"asq": {args.eval_split: args.eval_file}}
  if args.train_file:
    files["asq"]["train"] = args.train_file
  if args.annotation_files:
    files["asq_annotations"] = {f"round{n}": path for n, path in enumerate(args.annotation_files, 1)}
  task, examples = task_examples(ASQ_TASK, args.eval_split, files)
  if args.train_file:
    train, cut = task.source.examples("train"), 0
  else:
    cut = int(len(examples) * args.train_fraction)
    train = examples[:cut]
  glove = None
  if args.glove_file:
    # Only the words these items use are kept; every line of the file is checked.
    glove = asq_similarity.read_glove(args.glove_file, asq_similarity.words_of(list(train) + examples[cut:]))
  model = asq_similarity.AsqSimilarity(glove).fit(train)
  scores = model.score(examples[cut:])
  notes = [f"baseline: {model.name}",
           f"trained on {len(train)} items, tested on {len(examples) - cut}; weights {model.weights}"]
  provenance = {"baseline": model.name, "features": list(model.feature_names), "weights": model.weights,
                "glove_file": args.glove_file, "train_items": len(train), "test_items": len(examples) - cut}
  if glove is not None:
    coverage = model.glove_coverage(list(train) + examples[cut:])
    notes.append(f"GloVe file {args.glove_file}: {glove.lines} words of dimension {glove.dim}, "
                 f"{len(glove.vectors)} of them used; {coverage['texts_without_vector']} of "
                 f"{coverage['texts']} narratives and questions have no word with a vector (GloVe cosines 0)")
    provenance["glove"] = {"words": glove.lines, "dim": glove.dim, "words_used": len(glove.vectors), **coverage}
  return (*evaluated(task, args.eval_split, scores, cut, notes), provenance)


def run_preference(args):
  from t5_tasks.baselines import preference_heuristics  # pylint: disable=g-import-not-at-top
  tasks = preference_tasks()
  if args.eval_format not in tasks:
    raise ValueError(f"--eval_format must be one of {list(tasks)}, got {args.eval_format!r}")
  task_name = tasks[args.eval_format]
  task, examples = task_examples(task_name, args.eval_split,
                                 {single_file_datasets()[task_name]: {"all": args.eval_file}})
  scorer = preference_heuristics.SCORERS[args.baseline]
  scores = [preference_heuristics.score_example(example, scorer) for example in examples]
  return evaluated(task, args.eval_split, scores)


def run_timedial(args):
  from t5_tasks.baselines import timedial_overlap  # pylint: disable=g-import-not-at-top
  task, examples = task_examples(TIMEDIAL_TASK, args.eval_split,
                                 {"timedial": {args.eval_split: args.eval_file}})
  scores = [timedial_overlap.score(example) for example in examples]
  return evaluated(task, args.eval_split, scores)


def run_tfidf_advice(args):
  from t5_tasks.analysis import mean_interval  # pylint: disable=g-import-not-at-top
  from t5_tasks.baselines import tfidf_advice  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import reddit_advice  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import turingadvice  # pylint: disable=g-import-not-at-top
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
    raise ValueError(f"no situations to answer in {args.eval_file}")
  instances = [{f: getattr(s, f) for f in tfidf_advice.CONTEXT_FIELDS} for s in situations]
  generations = retriever.generate(instances)
  neighbours = retriever.retrieve(instances)
  similarity = retriever.advice_similarity(generations, references)
  records = [{"task": "advice_generation", "id": s.id, "generation": g, "retrieved_id": n[0],
              "retrieval_similarity": n[1], "reference_similarity": r}
             for s, g, n, r in zip(situations, generations, neighbours, similarity)]
  estimate = lambda v: {k: mean_interval(v, seed=args.seed)[k] for k in ("value", "low", "high")}
  metrics = {"advice_generation": {"retrieval_similarity": estimate([n[1] for n in neighbours]),
                                   "reference_similarity": estimate(similarity)}}
  return records, metrics, [f"indexed {len(train)} training situations; answered {len(situations)}"]


RUNNERS = {"tfidf_advice": run_tfidf_advice, "asq_similarity": run_asq_similarity, "length": run_preference,
           "copying": run_preference, "timedial_overlap": run_timedial}


def run(args: flags.FlagValues) -> None:
  """Runs the baseline that parsed flags `args` name and writes its outputs."""
  if args.glove_file and args.baseline != "asq_similarity":
    raise app.UsageError(f"--glove_file is asq_similarity's; {args.baseline} has no word-vector feature")
  # A runner may add a provenance record (what exactly ran: asq_similarity's features), which
  # metrics.json keeps under "provenance".
  records, metrics, notes, *provenance = RUNNERS[args.baseline](args)
  provenance = provenance[0] if provenance else None
  outputs.write_predictions(args.out, records)
  outputs.write_metrics(args.out, metrics, provenance=provenance)
  name = (provenance or {}).get("baseline", args.baseline)
  page = report.write_report(args.out, title=f"Baseline {name} on {args.eval_file}",
                             metrics=metrics, notes=notes)
  for task, by_name in metrics.items():
    for name, e in by_name.items():
      print(f"{task:28s} {name:32s} {e['value']:.4f}  [{e['low']:.4f}, {e['high']:.4f}]")
  for note in notes:
    print(note)
  print(f"wrote {len(records)} predictions and {page}")


def main(argv: Sequence[str]) -> None:
  del argv
  console.quiet_libraries()
  run(flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  console.run(gin_cli.one_line_errors(main))
