"""Readers of the released human-judgment files that HEAP turns into comparisons.

Defeasible inference (JSON lines), TellMeWhy (CSV), CommonGen (CSV sheets with
an instruction preamble and blocks), counterfactual story rewriting (CSV),
HellaSwag (JSON lines); CHASM and the counter narratives are `hate_speech_readers`'. What a reader
normalised in a file (`normalised_text`, `normalised_integer`) is counted in its report.
`t5_tasks.heap.comparisons` aggregates these records into (good, bad) comparisons.
"""
import collections
import dataclasses
import os
import re

import storage
from t5_tasks.sources import records

UPDATE_LABELS = ("attenuator", "intensifier")
COMMONGEN_SCORES = {"-1": -1.0, "-0.5": -0.5, "0": 0.0, "0.5": 0.5, "1": 1.0}
# Story answers: A or B prefers that rewrite; S (same) and IR (irrelevant) prefer
# neither; an empty cell is a question the worker left unanswered.
STORY_ANSWERS = ("A", "B", "S", "IR", "")
STORY_CRITERIA = ("counterfactual", "ending", "plot", "premise", "second")


@dataclasses.dataclass(frozen=True)
class DefeasibleUpdate:
  premise: str
  hypothesis: str
  update: str
  model: str
  dataset: str
  pred_label: str                # the kind of update the model was asked to write
  human_label: tuple[int, ...]   # one per rater, -2 (weakens) .. 2 (strengthens)


@dataclasses.dataclass(frozen=True)
class TellMeWhyAnswer:
  narrative: str
  question: str
  answer: str
  is_ques_answerable: bool
  val_ann: tuple[int, ...]   # validity, one per rater
  gram_ann: tuple[int, ...]  # grammaticality, one per rater


@dataclasses.dataclass(frozen=True)
class CommonGenJudgment:
  block: int           # position of the concept-set block in its sheet
  concepts: str
  reference: str
  sentences: tuple[str, str]
  score: float | None  # > 0: sentence 1 more plausible; None: left blank by the rater


@dataclasses.dataclass(frozen=True)
class StoryJudgment:
  story_id: str
  premise: str                 # Input.X1
  second: str                  # Input.X2, the original second sentence
  ending: str                  # Input.Y, the original ending
  counterfactual: str          # Input.XX2
  rewrites: tuple[str, str]    # Input.YY1, Input.YY2 (shown as A and B)
  models: tuple[str, str]
  answers: dict[str, str]      # criterion -> one of STORY_ANSWERS


def _ratings(where: records.Where, values, field: str, low: int, high: int) -> tuple[int, ...]:
  if not isinstance(values, list) or not values:
    raise where.error(field, f"expected a non-empty list of ratings, got {values!r}")
  for v in values:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
      raise where.error(field, f"expected integers in {low}..{high}, got {values!r}")
  return tuple(values)


def _parse_update(where: records.Where, row) -> DefeasibleUpdate:
  return DefeasibleUpdate(
      premise=where.string(row, "premise"),
      hypothesis=where.string(row, "hypothesis"),
      update=where.string(row, "update"),
      model=where.string(row, "model"),
      dataset=where.string(row, "dataset"),
      pred_label=where.choice(row, "pred_label", UPDATE_LABELS),
      human_label=_ratings(where, where.child(row, "human_label", "human_label"), "human_label", -2, 2),
  )


def read_defeasible(path, *, skip_invalid: bool = False):
  return records.read_records(path, records.json_lines_rows(path), _parse_update,
                              skip_invalid=skip_invalid)


def _parse_tellmewhy(where: records.Where, row) -> TellMeWhyAnswer:
  answerable = where.choice(row, "is_ques_answerable", ("Answerable", "Not Answerable"))
  return TellMeWhyAnswer(
      narrative=where.string(row, "narrative"),
      question=where.string(row, "question"),
      answer=where.string(row, "answer"),
      is_ques_answerable=answerable == "Answerable",
      val_ann=_ratings(where, where.json_text(row, "val_ann"), "val_ann", -2, 2),
      gram_ann=_ratings(where, where.json_text(row, "gram_ann"), "gram_ann", -2, 2),
  )


def read_tellmewhy(path, *, skip_invalid: bool = False):
  return records.read_records(path, records.csv_rows(path), _parse_tellmewhy, skip_invalid=skip_invalid)


class _CommonGenSheet:
  """Parses a sheet row by row: rows before the first concept set are its instructions."""

  def __init__(self):
    self.block = -1
    self.concepts = None
    self.reference = None

  def __call__(self, where: records.Where, row: list) -> CommonGenJudgment | None:
    first = row[0].strip() if row else ""
    if first.startswith("Concept set:"):
      self.block += 1
      self.concepts, self.reference = first[len("Concept set:"):].strip(), None
      if not self.concepts:
        raise where.error("concept set", "empty")
      return None
    if first.startswith("Reference:"):
      if self.concepts is None:
        raise where.error("reference", "comes before any concept set")
      self.reference = " ".join(first[len("Reference:"):].split())
      return None
    if not any(cell.strip() for cell in row) or self.concepts is None:
      return None
    if self.reference is None:
      raise where.error("reference", f"missing before the sentence pairs of block {self.block}")
    if len(row) < 3 or any(cell.strip() for cell in row[3:]):
      raise where.error(None, f"expected 3 cells (sentence 1, sentence 2, score), got {row!r}")
    for i in (0, 1):
      if not row[i].strip():
        raise where.error(f"sentence {i + 1}", "empty string")
    score = row[2].strip()
    if score and score not in COMMONGEN_SCORES:
      raise where.error("score", f"expected one of {sorted(COMMONGEN_SCORES)} or blank, got {score!r}")
    return CommonGenJudgment(block=self.block, concepts=self.concepts, reference=self.reference,
                             sentences=(row[0].strip(), row[1].strip()),
                             score=COMMONGEN_SCORES[score] if score else None)


def read_commongen_sheet(path, *, skip_invalid: bool = False):
  judgments, report = records.read_records(path, records.csv_rows(path, header=False), _CommonGenSheet(),
                                           skip_invalid=skip_invalid)
  kept = [j for j in judgments if j is not None]
  report.read = len(kept)
  return kept, report


def commongen_sheets(path) -> list[str]:
  """The sheets of one CommonGen evaluation: `path` itself, or the sheet*.csv files in it."""
  path = os.fspath(path)
  if not storage.is_dir(path):
    return [path]
  sheets = sorted(storage.glob(path, "sheet*.csv"),
                  key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)])
  if not sheets:
    raise records.RecordError(path, None, None, "no sheet*.csv files in this folder")
  return sheets


def _parse_story(where: records.Where, row) -> StoryJudgment:
  return StoryJudgment(
      story_id=where.string(row, "Input.STORY"),
      premise=where.string(row, "Input.X1"),
      second=where.string(row, "Input.X2"),
      ending=where.string(row, "Input.Y"),
      counterfactual=where.string(row, "Input.XX2"),
      rewrites=(where.string(row, "Input.YY1"), where.string(row, "Input.YY2")),
      models=(where.string(row, "Input.YY1_MODEL"), where.string(row, "Input.YY2_MODEL")),
      answers={c: _story_answer(where, row, c) for c in STORY_CRITERIA},
  )


def _story_answer(where: records.Where, row, criterion: str) -> str:
  answer = where.string(row, f"Answer.{criterion}", allow_empty=True).strip()
  if answer not in STORY_ANSWERS:
    raise where.error(f"Answer.{criterion}", f"expected one of {list(STORY_ANSWERS)}, got {answer!r}")
  return answer


def read_story_rewriting(path, *, skip_invalid: bool = False):
  return records.read_records(path, records.csv_rows(path), _parse_story, skip_invalid=skip_invalid)


# What the readers below fix and count in their report's `normalised`.
TEXTS_STRIPPED = "texts stripped of surrounding spaces"
NUMBERS_FROM_TEXT = "numbers given as JSON strings read as integers"
NUMBERS_TIDIED = "numbers with spaces or decimals read as integers"
_NORMALISATIONS = (TEXTS_STRIPPED, NUMBERS_FROM_TEXT, NUMBERS_TIDIED)
INTEGRAL_TEXT = re.compile(r"\s*(-?[0-9]+)(?:\.0*)?\s*")  # " 3", "3.0": the same rating as "3"


def normalised_text(where: records.Where, obj, key: str | int, field: str, fixed: collections.Counter) -> str:
  text = where.string(obj, key, field)
  fixed[TEXTS_STRIPPED] += text != text.strip()
  return text.strip()


def normalised_integer(where: records.Where, value, field: str, fixed: collections.Counter, *,
             low: int | None = None, high: int | None = None, in_text: bool = False) -> int:
  """An integral number however written; `in_text`: the format writes numbers as text (CSV),
  so only other spellings than str(n) count as normalised."""
  number = None
  if isinstance(value, int) and not isinstance(value, bool):
    number = value
  elif isinstance(value, float) and value.is_integer():
    number = int(value)
  elif isinstance(value, str) and (match := INTEGRAL_TEXT.fullmatch(value)):
    number = int(match.group(1))
  if number is None:
    raise where.error(field, f"expected an integer, got {value!r}")
  if not in_text and isinstance(value, str):
    fixed[NUMBERS_FROM_TEXT] += 1
  elif isinstance(value, float) or (isinstance(value, str) and value != str(number)):
    fixed[NUMBERS_TIDIED] += 1
  if (low is not None and number < low) or (high is not None and number > high):
    bounds = f"in {low}..{high}" if high is not None else f"of at least {low}"
    raise where.error(field, f"expected an integer {bounds}, got {value!r}")
  return number


def records_and_normalised(parsed, report: records.ReadReport) -> list:
  """parsed: [(record, what was fixed in it)] -> the records; the fixes go to the report."""
  fixed = collections.Counter()
  for _, counts in parsed:
    fixed.update(counts)
  report.normalised = {what: fixed[what] for what in _NORMALISATIONS if fixed[what]}
  return [record for record, _ in parsed]



@dataclasses.dataclass(frozen=True)
class HellaSwagItem:
  ctx: str
  endings: tuple[str, ...]  # exactly HELLASWAG_ENDINGS
  label: int                # index of the true ending


HELLASWAG_ENDINGS = 4


def _parse_hellaswag(where: records.Where, row) -> tuple[HellaSwagItem, collections.Counter]:
  """The item and what was normalised in it; the release's other keys (ind, activity_label,
  ctx_a, ctx_b, split, ...) are not read."""
  fixed = collections.Counter()
  ctx = normalised_text(where, row, "ctx", "ctx", fixed)
  endings = where.sequence(row, "endings", length=HELLASWAG_ENDINGS)
  return HellaSwagItem(
      ctx=ctx,
      endings=tuple(normalised_text(where, endings, i, f"endings[{i}]", fixed) for i in range(HELLASWAG_ENDINGS)),
      # The unlabeled test file has no label: it cannot give comparisons.
      label=normalised_integer(where, where.child(row, "label", "label"), "label", fixed,
                     low=0, high=HELLASWAG_ENDINGS - 1),
  ), fixed


def read_hellaswag(path, *, skip_invalid: bool = False) -> tuple[list[HellaSwagItem], records.ReadReport]:
  """HellaSwag's labelled JSON lines (train or validation); a label may be an int or a digit string."""
  parsed, report = records.read_records(path, records.json_lines_rows(path), _parse_hellaswag,
                                        skip_invalid=skip_invalid)
  return records_and_normalised(parsed, report), report
