"""truncation: what each paper recipe's TASK_FEATURE_LENGTHS cut of the released files under
--data_dir (../shared/data), task by task (issue 48); the numbers the recipes' comments give.

  python -m scripts.analyze truncation --data_dir=../shared/data [--output=truncation.json]

Each task is read through its own pipeline at the recipe's lengths with the byte vocabulary
(`runner.data.count_truncation`: exact for bytes). The recipes bind T5's SentencePiece model
(gs://t5-data/..., not reachable here; seqio's test model has 26 pieces, characters, no nearer to
T5's): a piece of it holds at most one whitespace-separated word and at least one byte (plus the
leading '▁'), so T5's count lies between the `words` columns (each word one piece, + EOS) and the
`bytes` ones. TimeDial's inputs drop the turns farthest from the mask to fit (their text depends
on the vocabulary): its `words` inputs count is of the dialog as fitted in bytes.
"""
import dataclasses
import json
from typing import Callable, Mapping

from absl import app
import gin

from runner import report
from scripts.analyses.common import print_table
import storage

FILES = "t5_tasks.tasks.data_files.files"
# The recipes' HEAP settings (gin/recipes/heap/reward_model.gin): §3's split, Table 5's instructions.
HEAP_BINDINGS = {"t5_tasks.families.heap_split.method": "paper", "t5_tasks.families.heap_split.seed": 0,
                 "t5_tasks.families.heap_instruction.template": "paper"}


@dataclasses.dataclass(frozen=True)
class Measurement:
  """A recipe's task and splits, its lengths, and the data files (relative to --data_dir) bound."""
  recipe: str
  task: str
  splits: tuple[str, ...]
  lengths: Mapping[str, int]
  files: Callable[[str], dict]  # data_dir -> t5_tasks.tasks.data_files.files
  bindings: Mapping[str, object] = dataclasses.field(default_factory=dict)


def _asq(data_dir: str) -> dict:
  asq = storage.join(data_dir, "asq")
  return {"asq": {"test": storage.join(asq, "asq_test_first1000.json"),
                  "annotation": storage.join(asq, "asq_annotation.json")},
          "asq_annotations": {"first": storage.join(asq, "annotation_first.json"),
                              "second": storage.join(asq, "annotation_second.json")}}


def _timedial(data_dir: str) -> dict:
  return {"timedial": {"test": storage.join(data_dir, "timedial", "test_first400.json")}}


def _heap_measurements(data_dir: str) -> list[Measurement]:
  """Each HEAP criterion with a released file under data_dir, all of its comparisons."""
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  measured = []
  for abbreviation, criterion in heap.HEAP_CRITERIA.items():
    paths = heap.find_source_files(data_dir, criterion.source)
    if paths:
      files = {f"heap/{criterion.source}": {"all": paths[0]}}
      measured.append(Measurement("heap/reward_model.gin", heap.task_name(abbreviation),
                                  ("train", "validation", "test"), {"inputs": 1024, "targets": 256},
                                  lambda _, files=files: files, HEAP_BINDINGS))
  return measured


def measurements(data_dir: str) -> list[Measurement]:
  """What the recipes of gin/recipes/ run on files ../shared/data holds (summarize-from-feedback's
  and RedditAdvice2019's are not there)."""
  span_corruption = {"t5_tasks.preprocessors.timedial_target_format.target_format": "span_corruption"}
  return [
      Measurement("asq/table4.gin (finetune.gin's lengths)", "asq_intent_cloze", ("annotation",),
                  {"inputs": 512, "targets": 128}, _asq),
      Measurement("gin/quickstart.gin", "asq_intent_cloze", ("test",), {"inputs": 256, "targets": 64}, _asq),
      Measurement("timedial/zero_shot.gin", "timedial_cloze_full", ("test",), {"inputs": 512, "targets": 32},
                  _timedial, span_corruption),
      *_heap_measurements(data_dir),
      # RedditAdvice2019 is not here: the advice of TuringAdvice's Feb 2020 round (heap_ah's file)
      # and its situations (as HEAP lays them out) stand in for the task's targets and inputs.
      *(dataclasses.replace(m, recipe="turingadvice/task.gin (heap_ah's file)", lengths={"inputs": 1280, "targets": 512})
        for m in _heap_measurements(data_dir) if m.task == "heap_ah"),
  ]


def _words_cut(texts, length: int) -> int:
  """Texts longer than `length` counted in words (+ EOS): fewer than any vocabulary of whole-word
  pieces at most cuts."""
  return sum(len(str(text).split()) + 1 > length for text in texts)


def measure(measurement: Measurement, data_dir: str) -> dict:
  """The bytes counts (`truncation.TaskCounter` record, summed over the splits) and the words ones."""
  from runner import data, truncation  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  with gin.unlock_config():
    for name, value in {FILES: measurement.files(data_dir), **measurement.bindings}.items():
      gin.bind_parameter(name, value)
  counter = truncation.TaskCounter(measurement.task, measurement.lengths)
  words = {"inputs": 0, "candidates": 0}
  candidate_length = measurement.lengths[truncation.length_key(measurement.lengths, "candidates")]
  try:
    for split in measurement.splits:
      examples, _ = data.candidate_examples(measurement.task, split, measurement.lengths, counter=counter)
      for example in examples:
        words["inputs"] += _words_cut([example["inputs_pretokenized"].decode()], measurement.lengths["inputs"])
        words["candidates"] += _words_cut([c.decode() for c in example["candidates_pretokenized"]], candidate_length)
  finally:
    gin.clear_config()
  return {"recipe": measurement.recipe, "task": measurement.task, "splits": list(measurement.splits),
          "bytes": counter.record(), "words": words}


def table(results) -> report.Table:
  rows = [(r["recipe"], r["task"], "+".join(r["splits"]), f"{r['bytes']['feature_lengths']}", r["bytes"]["items"],
           f"{r['words']['inputs']}-{r['bytes']['inputs']['cut']}",
           f"{r['words']['candidates']}-{r['bytes']['candidates']['cut']} of {r['bytes']['candidates']['count']}",
           r["bytes"]["candidates"]["items_cut"], r["bytes"]["inputs"]["longest"], r["bytes"]["candidates"]["longest"])
          for r in results]
  return report.Table("Cut by the recipes' lengths (words-bytes: T5's SentencePiece lies between; items with a "
                      "candidate cut, longest input and candidate: bytes with EOS)",
                      ("recipe", "task", "splits", "lengths", "items", "inputs cut", "candidates cut",
                       "items with a cut candidate", "longest input", "longest candidate"), rows)


def analyze(args) -> list[dict]:
  """Prints the table of `measurements(--data_dir)`; writes the counts as JSON to --output."""
  if not args.data_dir:
    raise app.UsageError("truncation needs --data_dir, the folder of the released files")
  if not storage.is_dir(args.data_dir):
    raise FileNotFoundError(f"--data_dir {args.data_dir}: no such folder (the released files)")
  results = [measure(m, args.data_dir) for m in measurements(args.data_dir)]
  print_table(table(results))
  if args.output:
    storage.write_text(args.output, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
  return results


WRITES_REPORT = False  # prints, and writes JSON to --output
