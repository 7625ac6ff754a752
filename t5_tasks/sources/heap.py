"""HEAP: released human judgments turned into (instruction, context, good, bad) comparisons.

The recipe (../shared/data/README.md): every judged output gets a score within
its context (several raters: the mean); every ordered pair of outputs with a
strictly higher score gives one comparison, ties give none. Sources judged in
pairs (CommonGen, story rewriting) are aggregated per pair instead: the mean
signed preference decides, and 0 gives none. Two outputs with the same text give
no comparison either: no model could tell them apart.
"""
import collections
import dataclasses
import hashlib
import itertools
import os
from typing import Callable

from t5_tasks.sources import heap_sources
from t5_tasks.sources import records
from t5_tasks.sources import turingadvice

Context = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
  task: str
  instruction: str
  context: Context  # (label, text) pairs in order
  good: str
  bad: str
  good_score: float
  bad_score: float
  id: str = ""      # "{task}-{n}", n counting from 0 in reading order


@dataclasses.dataclass(frozen=True)
class Criterion:
  source: str          # which released file it reads: a key of SOURCES
  instruction: str
  needs_context: bool  # HEAP's cross-cluster split: can the output be judged without the context?


_STORY = "a counterfactual rewrite of a story's ending"
HEAP_CRITERIA = {
    "advice_helpfulness": Criterion("turingadvice", "Which advice is more helpful for this situation?", True),
    "answer_validity": Criterion("tellmewhy", "Which answer better explains why, given the story?", True),
    "answer_grammaticality": Criterion("tellmewhy", "Which answer is more grammatical and fluent?", False),
    "question_answerability": Criterion("tellmewhy", "Which why-question can be answered from the story?", True),
    "commonsense_plausibility": Criterion(
        "commongen", "Which sentence using these concepts describes a more plausible everyday scene?", False),
    "update_attenuator": Criterion(
        "defeasible", "Which new fact more strongly weakens the hypothesis, given the premise?", True),
    "update_intensifier": Criterion(
        "defeasible", "Which new fact more strongly supports the hypothesis, given the premise?", True),
    "story_counterfactual": Criterion(
        "story_rewriting", f"Judging {_STORY}: which is more consistent with the counterfactual sentence?", True),
    "story_ending": Criterion(
        "story_rewriting", f"Judging {_STORY}: which keeps more of the original ending where it still fits?", True),
    "story_plot": Criterion(
        "story_rewriting", f"Judging {_STORY}: which keeps the plot of the original ending?", True),
    "story_premise": Criterion(
        "story_rewriting", f"Judging {_STORY}: which keeps the details of the premise in mind?", True),
    "story_second": Criterion(
        "story_rewriting", f"Judging {_STORY}: which better follows the change of the second sentence?", True),
}


def context_splits(contexts) -> dict:
  """{context: split}: contexts ordered by a hash, the last tenths to validation and test.

  HEAP releases no splits. All comparisons of one context share a split, so no test context
  is seen in training; the file tasks and the TFDS builder both split with this, so that their
  items agree. With 3 or more contexts each split gets at least one, so even the quickstart
  files evaluate.
  """
  ordered = sorted(set(contexts), key=lambda c: hashlib.sha256(repr(c).encode()).hexdigest())
  held_out = max(1, round(0.1 * len(ordered))) if len(ordered) >= 3 else 0
  train = len(ordered) - 2 * held_out
  return {c: "train" if i < train else "validation" if i < train + held_out else "test"
          for i, c in enumerate(ordered)}


def _ranked(task: str, groups: dict) -> list[Comparison]:
  """groups: {key: (context, [(text, score), ...])} -> every strictly ordered pair."""
  out = []
  for context, outputs in groups.values():
    for (a, sa), (b, sb) in itertools.combinations(outputs, 2):
      if sa == sb or a == b:
        continue
      (good, gs), (bad, bs) = ((a, sa), (b, sb)) if sa > sb else ((b, sb), (a, sa))
      out.append((context, good, bad, gs, bs))
  return _numbered(task, out)


def _paired(task: str, judgments: dict) -> list[Comparison]:
  """judgments: {key: (context, text1, text2, [preferences for text1 in -1..1])} -> the mean decides."""
  out = []
  for context, first, second, prefs in judgments.values():
    if not prefs or first == second:
      continue
    mean = sum(prefs) / len(prefs)
    if mean != 0:
      good, bad = (first, second) if mean > 0 else (second, first)
      out.append((context, good, bad, abs(mean), -abs(mean)))
  return _numbered(task, out)


def _numbered(task: str, rows) -> list[Comparison]:
  instruction = HEAP_CRITERIA[task].instruction
  return [Comparison(task, instruction, context, good, bad, float(gs), float(bs), f"{task}-{n}")
          for n, (context, good, bad, gs, bs) in enumerate(rows)]


def _mean(values) -> float:
  return sum(values) / len(values)


def advice_comparisons(task, situations) -> list[Comparison]:
  """Each system's advice against the top Reddit advice (score 0), by the Turk majority."""
  out = []
  for s in situations:
    context = (("Subreddit", f"r/{s.subreddit}"), ("Title", s.title), ("Situation", s.selftext))
    for system, advice in s.model_advice.items():
      score = s.ratings[system].preference_score()
      if advice == s.best_advice:
        continue
      if s.ratings[system].is_preferred:
        out.append((context, advice, s.best_advice, score, 0.0))
      else:
        out.append((context, s.best_advice, advice, 0.0, score))
  return _numbered(task, out)


def tellmewhy_comparisons(task, answers) -> list[Comparison]:
  groups = collections.OrderedDict()
  if task == "question_answerability":
    # A question is judged once but listed with each of its answers: one output per question.
    scores = collections.OrderedDict()
    for a in answers:
      scores.setdefault((a.narrative, a.question), []).append(1.0 if a.is_ques_answerable else 0.0)
    for (narrative, question), values in scores.items():
      groups.setdefault(narrative, ((("Story", narrative),), []))[1].append((question, _mean(values)))
    return _ranked(task, groups)
  ratings = "val_ann" if task == "answer_validity" else "gram_ann"
  for a in answers:
    context = (("Story", a.narrative), ("Question", a.question))
    groups.setdefault(context, (context, []))[1].append((a.answer, _mean(getattr(a, ratings))))
  return _ranked(task, groups)


def defeasible_comparisons(task, updates) -> list[Comparison]:
  label = "attenuator" if task == "update_attenuator" else "intensifier"
  sign = -1.0 if label == "attenuator" else 1.0  # a lower human label is a stronger weakener
  groups = collections.OrderedDict()
  for u in updates:
    if u.pred_label == label:
      context = (("Premise", u.premise), ("Hypothesis", u.hypothesis))
      groups.setdefault(context, (context, []))[1].append((u.update, sign * _mean(u.human_label)))
  return _ranked(task, groups)


def commongen_comparisons(task, judgments) -> list[Comparison]:
  """Judgments of all raters (sheets) of the same pair are pooled by block and sentences."""
  pairs = collections.OrderedDict()
  for j in judgments:
    key = (j.block, j.concepts) + j.sentences
    entry = pairs.setdefault(key, ((("Concepts", j.concepts),), *j.sentences, []))
    if j.score is not None:
      entry[3].append(j.score)
  return _paired(task, pairs)


_STORY_PREFERENCE = {"A": 1.0, "B": -1.0, "S": 0.0, "IR": 0.0}


def story_comparisons(task, judgments) -> list[Comparison]:
  """Pooled per story and pair of rewrites, whichever side each worker saw them on."""
  criterion = task[len("story_"):]
  pairs = collections.OrderedDict()
  for j in judgments:
    first, second = sorted(j.rewrites)
    context = (("Premise", j.premise), ("Original second sentence", j.second),
               ("Original ending", j.ending), ("Counterfactual second sentence", j.counterfactual))
    entry = pairs.setdefault((j.story_id, first, second), (context, first, second, []))
    answer = j.answers[criterion]
    if answer:  # blank: the worker skipped the question
      flip = 1.0 if j.rewrites[0] == first else -1.0
      entry[3].append(flip * _STORY_PREFERENCE[answer])
  return _paired(task, pairs)


def _read_commongen(path, *, skip_invalid=False):
  judgments, reports = [], []
  for sheet in heap_sources.commongen_sheets(path):
    sheet_judgments, report = heap_sources.read_commongen_sheet(sheet, skip_invalid=skip_invalid)
    judgments += sheet_judgments
    reports.append(report)
  return judgments, records.ReadReport(
      path=os.fspath(path), read=sum(r.read for r in reports), skipped=sum(r.skipped for r in reports),
      errors=[e for r in reports for e in r.errors])


# source name -> (reader of the released file, builder of comparisons from its records)
SOURCES: dict[str, tuple[Callable, Callable]] = {
    "turingadvice": (turingadvice.read_turingadvice_eval, advice_comparisons),
    "tellmewhy": (heap_sources.read_tellmewhy, tellmewhy_comparisons),
    "commongen": (_read_commongen, commongen_comparisons),
    "defeasible": (heap_sources.read_defeasible, defeasible_comparisons),
    "story_rewriting": (heap_sources.read_story_rewriting, story_comparisons),
}


def read_heap_comparisons(criterion: str, path, *, skip_invalid: bool = False
                          ) -> tuple[list[Comparison], records.ReadReport]:
  """Comparisons for one criterion of HEAP_CRITERIA; the report counts source records.

  `path` is the released file (for CommonGen: one sheet, or the folder of sheets).
  """
  if criterion not in HEAP_CRITERIA:
    raise ValueError(f"unknown HEAP criterion {criterion!r}; known: {sorted(HEAP_CRITERIA)}")
  read, compare = SOURCES[HEAP_CRITERIA[criterion].source]
  source_records, report = read(path, skip_invalid=skip_invalid)
  return compare(criterion, source_records), report
