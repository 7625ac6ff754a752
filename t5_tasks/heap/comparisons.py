"""HEAP: released human judgments turned into (instruction, context, good, bad) comparisons.

The recipe (../shared/data/README.md): every judged output gets a score within
its context (several raters: the mean; CHASM and the counter-narrative ratings: the
integer mean, as HEAP's authors applied it); every ordered pair of outputs with a
strictly higher score gives one comparison, ties give none: HEAP §1 makes each
instance two generations "such that one ... was ranked better than the other", and §3
states no tie rule. Defeasible inference keeps its ties (its Table 1 count is every
pair). Sources judged in pairs (CommonGen, story rewriting) are aggregated per pair
instead: the mean signed preference decides, and 0 gives none (story rewriting:
unless `story_comparisons.keep_ties`). Two outputs with the same text are compared
like any others (HEAP counts them), though no model can tell them apart.

Table 1's "#Examples" is not one kind of count: HEAP's released loaders (its footnote 2's
repository, code/data_collection/) head some with "Total: N data points", the judged records
(AH 1,200; story rewriting 4,400; DIA and DII 7,176, the defeasible file's line count), and
others with "N Comparison Data points" (QA 1,917; AG and AV 598; CR; the hate-speech
criteria). docs/heap.md sets each criterion's count here beside Table 1's and says which rule
gives it.

The criteria are `t5_tasks.heap.criteria`'s; the readers of the released files
`t5_tasks.heap.readers` and `t5_tasks.heap.hate_speech_readers`. Table 5's inputs and the splits
are made here too.
"""
import collections
import dataclasses
import hashlib
import itertools
import json
import os
import random
from typing import Callable

import gin

import storage
from t5_tasks.heap import hate_speech_readers
from t5_tasks.heap import readers
from t5_tasks.heap.criteria import HEAP_CRITERIA
from t5_tasks.heap.criteria import criterion_of
from t5_tasks.sources import records
from t5_tasks.sources import turingadvice

Context = tuple[tuple[str, str], ...]
SEPARATOR = " <sep> "  # Table 5 joins the instruction, the (labelled) fields and the output with it


@dataclasses.dataclass(frozen=True)
class Comparison:
  task: str          # the criterion's abbreviation, e.g. "AH"
  context: Context   # (label, text) pairs in order; () for HSO, judged without context
  output_label: str  # what the compared outputs are, e.g. "answer" (Table 5's label of the output)
  good: str
  bad: str
  good_score: float
  bad_score: float
  id: str = ""       # "{abbreviation}-{n}", n counting from 0 in reading order



def render_inputs(instruction: str, context: Context, output_label: str, label_input: bool) -> str:
  """The encoder's text: Table 5's `<instruction> <context> <answer>` less the answer.

  HEAP feeds BART the whole string; a T5 reward model reads the output in its decoder, so the
  output's label (label-input criteria) closes the inputs and `inputs + SEPARATOR + output`
  is Table 5's layout, e.g. AG: `… <sep> narrative <sep> Tim was… <sep> question <sep> Why…
  <sep> answer <sep> Tim got the job…`.
  """
  parts = [instruction]
  for label, text in context:
    parts += [label, text] if label_input else [text]
  if label_input:
    parts.append(output_label)
  return SEPARATOR.join(parts)


def paper_splits(comparisons, seed: int = 0) -> dict[str, str]:
  """{comparison id: split}: HEAP §3 "randomly split into 80% train, 10% validation, and 10% test"
  per task, seeded. With 3 or more comparisons each split gets at least one."""
  ids = sorted(c.id for c in comparisons)
  random.Random(f"heap-{seed}").shuffle(ids)
  held_out = max(1, round(0.1 * len(ids))) if len(ids) >= 3 else 0
  train = len(ids) - 2 * held_out
  return {i: "train" if n < train else "validation" if n < train + held_out else "test"
          for n, i in enumerate(ids)}


def context_splits(contexts) -> dict:
  """{context: split}: contexts ordered by a hash, the last tenths to validation and test.

  The project's alternative to the paper's split: all comparisons of one context share a
  split, so no test context (or output) is seen in training. With 3 or more contexts each
  split gets at least one, so even the quickstart files evaluate.
  """
  ordered = sorted(set(contexts), key=lambda c: hashlib.sha256(repr(c).encode()).hexdigest())
  held_out = max(1, round(0.1 * len(ordered))) if len(ordered) >= 3 else 0
  train = len(ordered) - 2 * held_out
  return {c: "train" if i < train else "validation" if i < train + held_out else "test"
          for i, c in enumerate(ordered)}


SPLIT_METHODS = ("paper", "by_context")


def split_comparisons(comparisons, method: str = "paper", seed: int = 0) -> dict[str, str]:
  """{comparison id: split} by `method`: 'paper' (random 80/10/10, seeded) or 'by_context'."""
  if method == "paper":
    return paper_splits(comparisons, seed)
  if method == "by_context":
    splits = context_splits(c.context for c in comparisons)
    return {c.id: splits[c.context] for c in comparisons}
  raise ValueError(f"HEAP split method {method!r}; expected one of {SPLIT_METHODS}")


def context_id(context: Context) -> str:
  """A short stable id of a context, shared by every comparison made in it."""
  return hashlib.sha256(repr(context).encode()).hexdigest()[:16]


def read_instruction_templates(path) -> tuple[dict[str, list[str]], records.ReadReport]:
  """HEAP's instructions.json: {abbreviation: [phrasing, ...]} for every criterion.

  The file is `{"criteria": {abbreviation: {"templates": [str, ...], "paper_table5": index}}}`;
  a criterion missing, an empty phrasing or an index out of range is an error naming the field.
  """
  path = os.fspath(path)
  try:
    data = json.loads(storage.read_text(path))
  except json.JSONDecodeError as e:
    raise records.RecordError(path, e.lineno, None, f"not valid JSON: {e.msg}") from None
  where = records.Where(path, None)
  criteria = where.mapping(data, "criteria")
  out = {}
  for abbreviation in HEAP_CRITERIA:
    entry = where.mapping(criteria, abbreviation, f"criteria.{abbreviation}")
    field = f"criteria.{abbreviation}.templates"
    templates = where.child(entry, "templates", field)
    if not isinstance(templates, list) or not templates:
      raise where.error(field, "expected a non-empty list of phrasings")
    out[abbreviation] = [where.string(templates, i, f"{field}[{i}]") for i in range(len(templates))]
    where.integer(entry, "paper_table5", f"criteria.{abbreviation}.paper_table5",
                  choices=range(len(templates)))
  return out, records.ReadReport(path=path, read=len(out))


def _ranked(task: str, output_label: str, groups: dict, *, ties: bool = False) -> list[Comparison]:
  """groups: {key: (context, [(text, score), ...])} -> every strictly ordered pair; with `ties`,
  every pair, a tie in the order the outputs come.

  A pair of two identical texts is kept: its label is still its scores' order (the raters scored
  the same text differently, e.g. two systems' equal counter narratives), and HEAP counts such
  pairs (Table 1's CNI 783 and CNO 685 need them).
  """
  out = []
  for context, outputs in groups.values():
    for (a, sa), (b, sb) in itertools.combinations(outputs, 2):
      if sa == sb and not ties:
        continue
      (good, gs), (bad, bs) = ((a, sa), (b, sb)) if sa >= sb else ((b, sb), (a, sa))
      out.append((context, good, bad, gs, bs))
  return _numbered(task, output_label, out)


def _paired(task: str, output_label: str, judgments: dict, *, ties: bool = False) -> list[Comparison]:
  """judgments: {key: (context, text1, text2, [preferences for text1 in -1..1])} -> the mean decides;
  with `ties`, a mean of 0 gives text1 over text2 too (scores 0 and 0). A pair nobody answered
  gives none either way.

  As in `_ranked`, two identical texts keep the comparison their judges' mean preference gives."""
  out = []
  for context, first, second, prefs in judgments.values():
    if not prefs:
      continue
    mean = sum(prefs) / len(prefs)
    if mean != 0 or ties:
      good, bad = (first, second) if mean >= 0 else (second, first)
      out.append((context, good, bad, abs(mean), -abs(mean)))
  return _numbered(task, output_label, out)


def _numbered(task: str, output_label: str, rows) -> list[Comparison]:
  return [Comparison(task, context, output_label, good, bad, float(gs), float(bs), f"{task}-{n}")
          for n, (context, good, bad, gs, bs) in enumerate(rows)]


def _mean(values) -> float:
  return sum(values) / len(values)


def _integer_mean(values) -> int:
  """HEAP's reduction of CHASM's rating lists, as its authors applied it (data README)."""
  return sum(values) // len(values)


def advice_comparisons(task, situations) -> list[Comparison]:
  """Each system's advice against the top Reddit advice (score 0), by the Turk majority.
  Table 5's AH example is the post's title, then its text."""
  out = []
  for s in situations:
    context = (("situation", f"{s.title} {s.selftext}"),)
    for system, advice in s.model_advice.items():
      score = s.ratings[system].preference_score()
      if advice == s.best_advice:
        continue
      if s.ratings[system].is_preferred:
        out.append((context, advice, s.best_advice, score, 0.0))
      else:
        out.append((context, s.best_advice, advice, 0.0, score))
  return _numbered(task, "advice", out)


@gin.configurable(module="t5_tasks.heap")
def tellmewhy_comparisons(task, answers, qa_repeat_per_answer_row: bool = False) -> list[Comparison]:
  """AG, AV: the answers to one question, ranked by their mean rating (ties give none). QA: the
  questions of one narrative, ranked by their answerability.

  A question's answerability is judged once but the file lists it on each of its answer rows
  (3 here), so QA takes one output per question (its rows' mean) and compares questions of one
  narrative with a strictly different answerability: 213 comparisons in the release.

  qa_repeat_per_answer_row: HEAP's own construction instead, which Table 1's QA 1,917 counts
  (= 9 x 213; its released QuestionAnswerabilityDataLoader): every pair of the narrative's rows
  whose answerability differs, so each question pair comes once per pair of the two questions'
  answer rows (3 x 3 here), the same (good, bad) questions repeated. It leaks: §3's random
  80/10/10 split then puts copies of most test comparisons in training. Off by default.
  """
  groups = collections.OrderedDict()
  if task == "QA":
    if qa_repeat_per_answer_row:
      for a in answers:
        groups.setdefault(a.narrative, ((("narrative", a.narrative),), []))[1].append(
            (a.question, 1.0 if a.is_ques_answerable else 0.0))
      return _ranked(task, "question", groups)
    # A question is judged once but listed with each of its answers: one output per question.
    scores = collections.OrderedDict()
    for a in answers:
      scores.setdefault((a.narrative, a.question), []).append(1.0 if a.is_ques_answerable else 0.0)
    for (narrative, question), values in scores.items():
      groups.setdefault(narrative, ((("narrative", narrative),), []))[1].append((question, _mean(values)))
    return _ranked(task, "question", groups)
  ratings = "val_ann" if task == "AV" else "gram_ann"
  for a in answers:
    context = (("narrative", a.narrative), ("question", a.question))
    groups.setdefault(context, (context, []))[1].append((a.answer, _mean(getattr(a, ratings))))
  return _ranked(task, "answer", groups)


def defeasible_comparisons(task, updates) -> list[Comparison]:
  """Every pair of the three updates (two models' and the human's) written for one premise,
  hypothesis and update type, ties included, for both criteria.

  Table 1 gives DIA and DII 7,176 comparisons each, and §3's total of 229,104 instances counts
  both: that is every (premise, hypothesis, pred_label) group of the release (2,392) x its 3
  pairs, whichever update type the group asked for and whether or not the raters tied. DIA
  prefers the update that weakens more (lower human label), DII the one that strengthens more.
  """
  sign = -1.0 if task == "DIA" else 1.0
  groups = collections.OrderedDict()
  for u in updates:
    context = (("premise", u.premise), ("hypothesis", u.hypothesis))
    groups.setdefault((context, u.pred_label), (context, []))[1].append(
        (u.update, sign * _mean(u.human_label)))
  return _ranked(task, "update sentence", groups, ties=True)


def commongen_comparisons(task, judgments) -> list[Comparison]:
  """Judgments of all raters (sheets) of the same pair are pooled by block and sentences; the
  context is the concept set and its reference sentence (Table 5's CR example)."""
  pairs = collections.OrderedDict()
  for j in judgments:
    key = (j.block, j.concepts) + j.sentences
    context = (("concept set", j.concepts), ("reference sentence", j.reference))
    entry = pairs.setdefault(key, (context, *j.sentences, []))
    if j.score is not None:
      entry[3].append(j.score)
  return _paired(task, "sentence", pairs)


_STORY_PREFERENCE = {"A": 1.0, "B": -1.0, "S": 0.0, "IR": 0.0}
_STORY_ANSWER = {"SRC": "counterfactual", "SRE": "ending", "SRPl": "plot", "SRPr": "premise", "SRS": "second"}


@gin.configurable(module="t5_tasks.heap")
def story_comparisons(task, judgments, keep_ties: bool = False) -> list[Comparison]:
  """Pooled per story and pair of rewrites, whichever side each worker saw them on: A +1, B -1,
  S ("little to no difference") and IR ("both irrelevant") 0; the mean decides, 0 gives none.

  The context is the second story (the premise and the counterfactual sentence) whose ending was
  rewritten, as Table 5's SRE example reads: `story <sep> {premise} {counterfactual} <sep> ending
  <sep> {rewritten ending}`. SRPl's Table 5 instruction ("You are given a story, an original ending
  and a rewritten ending") also gives the original ending.

  keep_ties: a pair whose mean is 0 gives a comparison too, the rewrite first shown as A over the
  other (scores 0 and 0): every judged pair counts, the same number (664 here) for all five
  criteria, as Table 1's five equal 4,400s are. Off by default: a tied pair's label is arbitrary,
  and the equal 4,400s are no tie rule: HEAP's released loaders head them "Total: 4400" as they
  head DIA's and DII's 7,176 (the defeasible file's line count), records rather than comparisons
  (the released file holds 1,400 judgments), and they keep A and B answers only: ties dropped.
  """
  criterion = _STORY_ANSWER[task]
  pairs = collections.OrderedDict()
  for j in judgments:
    context = (("story", f"{j.premise} {j.counterfactual}"),)
    if task == "SRPl":
      context += (("original ending", j.ending),)
    # One entry per unordered pair; its texts in the order the pair was first shown (A, B).
    entry = pairs.setdefault((j.story_id, *sorted(j.rewrites)), (context, *j.rewrites, []))
    answer = j.answers[criterion]
    if answer:  # blank: the worker skipped the question
      flip = 1.0 if j.rewrites[0] == entry[1] else -1.0
      entry[3].append(flip * _STORY_PREFERENCE[answer])
  return _paired(task, "ending", pairs, ties=keep_ties)


_COUNTER_NARRATIVE_RATING = {"BCN": "best", "CCN": "choose", "CNG": "grammaticality",
                             "CNSp": "specificity", "CNSu": "suitability"}


def counter_narrative_comparisons(task, narratives) -> list[Comparison]:
  """The five systems' counter narratives to one (hate speech, target), ranked by the rating."""
  rating = _COUNTER_NARRATIVE_RATING[task]
  groups = collections.OrderedDict()
  for n in narratives:
    context = (("hate speech", n.hate_speech), ("target", n.target))
    groups.setdefault(context, (context, []))[1].append((n.text, float(getattr(n, rating))))
  return _ranked(task, "counter narrative", groups)


_CHASM_RATING = {"CNI": "informativeness", "CNO": "offensiveness", "CNSt": "stance"}


def chasm_comparisons(task, posts) -> list[Comparison]:
  """CNI, CNO, CNSt: the three systems' counter narratives of one post; HSO: the posts themselves,
  compared across the whole collection (no context)."""
  if task == "HSO":
    ranked = [(p.post, float(_integer_mean(p.offensiveness))) for p in posts]
    return _ranked(task, "hate speech", {(): ((), ranked)})
  groups = collections.OrderedDict()
  for p in posts:
    context = (("hate speech", p.post),)
    scored = [(n.text, float(_integer_mean(getattr(n, _CHASM_RATING[task])))) for n in p.narratives]
    groups.setdefault(p.id, (context, scored))
  return _ranked(task, "counter narrative", groups)


def hellaswag_comparisons(task, items) -> list[Comparison]:
  """Each item's true ending over each of its other endings (HEAP §3)."""
  out = []
  for item in items:
    context = (("context", item.ctx),)
    good = item.endings[item.label]
    out += [(context, good, bad, 1.0, 0.0) for bad in item.endings if bad != good]
  return _numbered(task, "follow up sentence", out)


def _read_commongen(path, *, skip_invalid=False):
  judgments, reports = [], []
  for sheet in readers.commongen_sheets(path):
    sheet_judgments, report = readers.read_commongen_sheet(sheet, skip_invalid=skip_invalid)
    judgments += sheet_judgments
    reports.append(report)
  return judgments, records.ReadReport.combined(os.fspath(path), reports)


# source name -> (reader of the released file, builder of comparisons from its records)
SOURCES: dict[str, tuple[Callable, Callable]] = {
    "turingadvice": (turingadvice.read_turingadvice_eval, advice_comparisons),
    "tellmewhy": (readers.read_tellmewhy, tellmewhy_comparisons),
    "hellaswag": (readers.read_hellaswag, hellaswag_comparisons),
    "commongen": (_read_commongen, commongen_comparisons),
    "counter_narratives": (hate_speech_readers.read_counter_narratives, counter_narrative_comparisons),
    "chasm": (hate_speech_readers.read_chasm, chasm_comparisons),
    "story_rewriting": (readers.read_story_rewriting, story_comparisons),
    "defeasible": (readers.read_defeasible, defeasible_comparisons),
}


# Source -> glob patterns of its released file under a data folder (../shared/data/heap's layout,
# and the quickstart files' names): CommonGen and CHASM are folders of files, or one file.
SOURCE_FILES = {
    "turingadvice": ("**/turingadvice*.jsonl", "**/turingadvice/*.jsonl"),
    "tellmewhy": ("**/tellmewhy*.csv", "**/tellmewhy/*.csv"),
    "hellaswag": ("**/*hellaswag*.jsonl",),
    "commongen": ("**/commongen",),
    "counter_narratives": ("**/*counter_narratives*.csv", "**/counter_narratives/*.csv"),
    "chasm": ("**/chasm", "**/*chasm*.json"),
    "defeasible": ("**/def_inf*.jsonl",),
    "story_rewriting": ("**/*comparison_eval*.csv",),
}


def find_source_files(folder, source: str) -> list[str]:
  """The released files (or folders) of `source` under `folder` (local or `gs://`), searched
  recursively, sorted."""
  return sorted({p for pattern in SOURCE_FILES[source] for p in storage.glob(folder, pattern)})


def read_heap_comparisons(criterion: str, path, *, skip_invalid: bool = False
                          ) -> tuple[list[Comparison], records.ReadReport]:
  """Comparisons for one criterion (abbreviation, or task name); the report counts source records.

  `path` is the released file (CommonGen: one sheet or the folder of sheets; CHASM: one file or
  the folder of its JSON files).
  """
  criterion = criterion_of(criterion)
  read, compare = SOURCES[HEAP_CRITERIA[criterion].source]
  source_records, report = read(path, skip_invalid=skip_invalid)
  return compare(criterion, source_records), report
