"""Readers of the released human-judgment files that HEAP turns into comparisons.

Defeasible inference (JSON lines), TellMeWhy (CSV), CommonGen (CSV sheets with
an instruction preamble and blocks), counterfactual story rewriting (CSV),
CHASM (a JSON object per file), counter narratives (CSV without a fixed header),
HellaSwag (JSON lines). `heap.py` aggregates these records into (good, bad) comparisons.
"""
import collections
import dataclasses
import functools
import json
import os
import re
from typing import Any, Iterator

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
_INTEGRAL = re.compile(r"\s*(-?[0-9]+)(?:\.0*)?\s*")  # " 3", "3.0": the same rating as "3"


def _text(where: records.Where, obj, key: str | int, field: str, fixed: collections.Counter) -> str:
  text = where.string(obj, key, field)
  fixed[TEXTS_STRIPPED] += text != text.strip()
  return text.strip()


def _integer(where: records.Where, value, field: str, fixed: collections.Counter, *,
             low: int | None = None, high: int | None = None, in_text: bool = False) -> int:
  """An integral number however written; `in_text`: the format writes numbers as text (CSV),
  so only other spellings than str(n) count as normalised."""
  number = None
  if isinstance(value, int) and not isinstance(value, bool):
    number = value
  elif isinstance(value, float) and value.is_integer():
    number = int(value)
  elif isinstance(value, str) and (match := _INTEGRAL.fullmatch(value)):
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


def _records_and_normalised(parsed, report: records.ReadReport) -> list:
  """parsed: [(record, what was fixed in it)] -> the records; the fixes go to the report."""
  fixed = collections.Counter()
  for _, counts in parsed:
    fixed.update(counts)
  report.normalised = {what: fixed[what] for what in _NORMALISATIONS if fixed[what]}
  return [record for record, _ in parsed]


# CHASM (Ashida & Komachi 2022): hate-speech posts rated by 9 raters, and each system's
# counter narrative rated by 3 raters on three criteria, all on a 0..4 scale.
CHASM_SYSTEMS = ("GPT-2", "GPT-Neo", "GPT-3")
CHASM_POST_RATERS = 9
CHASM_NARRATIVE_RATERS = 3
CHASM_SCALE = (0, 4)


@dataclasses.dataclass(frozen=True)
class ChasmNarrative:
  system: str                       # one of CHASM_SYSTEMS
  text: str
  offensiveness: tuple[int, ...]    # score.off, one per rater
  stance: tuple[int, ...]           # score.stance
  informativeness: tuple[int, ...]  # score.info


@dataclasses.dataclass(frozen=True)
class ChasmPost:
  id: str                                 # "<file stem>/<JSON key>", e.g. "counter_conan/conan_17"
  post: str
  offensiveness: tuple[int, ...]          # post.score, one per rater
  narratives: tuple[ChasmNarrative, ...]  # in the order the systems appear in the file


@dataclasses.dataclass(frozen=True)
class _Entry(records.Where):
  """One entry of a JSON object, at the line of its key: errors name the key before the field."""
  key: str = ""

  def error(self, field: str | None, message: str) -> records.RecordError:
    return records.RecordError(self.path, self.line, f"{self.key}.{field}" if field else self.key, message,
                               kind=self.kind)


def _unique_keys(pairs):
  """json.loads keeps only the last of two equal keys: a repeated one would silently drop data."""
  keys = collections.Counter(key for key, _ in pairs)
  repeated = [key for key, n in keys.items() if n > 1]
  if repeated:
    raise ValueError(f"repeated key {repeated[0]!r}")
  return dict(pairs)


_SPACE = re.compile(r"[ \t\n\r]*")


def _after(text: str, pos: int, char: str) -> int:
  """The position after `char` and the spaces around it; a JSONDecodeError without it."""
  pos = _SPACE.match(text, pos).end()
  if not text.startswith(char, pos):
    raise json.JSONDecodeError(f"Expecting {char!r}", text, pos)
  return _SPACE.match(text, pos + 1).end()


def _json_object_entries(text: str) -> Iterator[tuple[int, str, Any]]:
  """(line of the key, key, value or its ValueError) for each entry of a top-level JSON object.

  Read entry by entry, so that each one knows its line: json.load would give no line to an
  error found in the value. A file that does not parse raises json.JSONDecodeError.
  """
  decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
  pos, line, counted = _after(text, 0, "{"), 1, 0
  closed = text.startswith("}", pos)
  while not closed:
    start = pos
    key, pos = decoder.raw_decode(text, pos)
    if not isinstance(key, str):
      raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, start)
    line, counted = line + text.count("\n", counted, start), start
    pos = _after(text, pos, ":")
    try:
      value, pos = decoder.raw_decode(text, pos)
    except json.JSONDecodeError:  # a ValueError too, but the file itself is broken
      raise
    except ValueError as e:  # a repeated key inside this value: only this entry is bad
      value, pos = e, json.JSONDecoder().raw_decode(text, pos)[1]
    yield line, key, value
    pos = _SPACE.match(text, pos).end()
    closed = text.startswith("}", pos)
    if not closed:
      pos = _after(text, pos, ",")
  end = _SPACE.match(text, pos + 1).end()
  if end != len(text):
    raise json.JSONDecodeError("Extra data", text, end)


def json_object_rows(path) -> Iterator[tuple[records.Where, Any]]:
  """The values of a file holding one JSON object, each at its key's line and named by its key.

  A broken file raises at once (as records.json_array_rows does); a repeated key, at the top
  or inside an entry, makes that entry a bad row.
  """
  path = os.fspath(path)
  data = storage.read_bytes(path)
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise records.RecordError(path, None, None, f"invalid UTF-8 at byte {e.start}") from None
  seen = set()
  try:
    for line, key, value in _json_object_entries(text):
      where = _Entry(path, line, key=key)
      if key in seen:
        value = where.error(None, "repeated key: json.load would keep only the last entry")
      elif isinstance(value, ValueError):
        value = where.error(None, str(value))
      seen.add(key)
      yield where, value
  except json.JSONDecodeError as e:
    raise records.RecordError(path, e.lineno, None, f"not valid JSON: {e.msg} (column {e.colno})") from None
  except RecursionError:
    raise records.RecordError(path, None, None, "JSON nested too deeply") from None


def _chasm_ratings(where: records.Where, obj, key: str, field: str, raters: int,
                   fixed: collections.Counter) -> tuple[int, ...]:
  values = where.sequence(obj, key, field, length=raters)
  return tuple(_integer(where, v, f"{field}[{i}]", fixed, low=CHASM_SCALE[0], high=CHASM_SCALE[1])
               for i, v in enumerate(values))


def _chasm_narrative(where: records.Where, item: dict, system: str, fixed) -> ChasmNarrative:
  narrative = where.mapping(item, system)
  score = where.mapping(narrative, "score", f"{system}.score")

  def ratings(criterion):
    field = f"{system}.score.{criterion}"
    return _chasm_ratings(where, score, criterion, field, CHASM_NARRATIVE_RATERS, fixed)
  return ChasmNarrative(system=system, text=_text(where, narrative, "text", f"{system}.text", fixed),
                        offensiveness=ratings("off"), stance=ratings("stance"),
                        informativeness=ratings("info"))


def _parse_chasm(stem: str, where: _Entry, item) -> tuple[ChasmPost, collections.Counter]:
  """The post and what was normalised in it."""
  fixed = collections.Counter()
  if not isinstance(item, dict):
    raise where.error(None, f"expected an object, got {type(item).__name__}")
  # Every post was answered by every system: another key is a system this reader would drop.
  for key in item:
    if key != "post" and key not in CHASM_SYSTEMS:
      raise where.error(key, f"unknown key; expected 'post' and {list(CHASM_SYSTEMS)}")
  for system in CHASM_SYSTEMS:
    where.child(item, system, system)
  post = where.mapping(item, "post")
  return ChasmPost(
      id=f"{stem}/{where.key}",
      post=_text(where, post, "text", "post.text", fixed),
      offensiveness=_chasm_ratings(where, post, "score", "post.score", CHASM_POST_RATERS, fixed),
      narratives=tuple(_chasm_narrative(where, item, key, fixed) for key in item if key != "post"),
  ), fixed


def chasm_files(path) -> list[str]:
  """The files of a CHASM release: `path` itself, or the *.json files in it, sorted."""
  path = os.fspath(path)
  if not storage.is_dir(path):
    return [path]
  files = storage.glob(path, "*.json")
  if not files:
    raise records.RecordError(path, None, None, "no *.json files in this folder")
  return files


def read_chasm(path, *, skip_invalid: bool = False) -> tuple[list[ChasmPost], records.ReadReport]:
  """CHASM's posts from one JSON file, or from every *.json file of a folder (one report for all).

  Each file is a JSON object keyed by item id; errors name the file, the line of the item's
  key, and the field after the key (e.g. "conan_1.GPT-2.score.off[2]").
  """
  posts, reports = [], []
  for file in chasm_files(path):
    stem = os.path.splitext(storage.name(file))[0]
    parsed, report = records.read_records(file, json_object_rows(file), functools.partial(_parse_chasm, stem),
                                          skip_invalid=skip_invalid)
    posts += _records_and_normalised(parsed, report)
    reports.append(report)
  return posts, records.ReadReport.combined(os.fspath(path), reports)


# Counter narratives against hate speech (Tekiroğlu et al. 2022): a CSV with no fixed header.
# Columns 2-6 hold the systems' narratives in this order; each system's five ratings follow
# from its own first column (columns 7-11 are not read).
COUNTER_NARRATIVE_SYSTEMS = ("DialoGPT", "BART", "BERT", "T5", "GPT-2")
COUNTER_NARRATIVE_RATINGS = ("suitability", "specificity", "grammaticality", "choose", "best")
COUNTER_NARRATIVE_RATING_COLUMNS = {"GPT-2": 12, "T5": 17, "BART": 22, "DialoGPT": 27, "BERT": 32}
_COUNTER_NARRATIVE_COLUMNS = 37


@dataclasses.dataclass(frozen=True)
class CounterNarrative:
  """One system's counter narrative to one (hate speech, target)."""
  hate_speech: str
  target: str
  system: str          # one of COUNTER_NARRATIVE_SYSTEMS
  text: str
  suitability: int     # each: the integer mean (sum // count) over the annotators' rows
  specificity: int
  grammaticality: int
  choose: int
  best: int


def _rating_fields(system: str) -> list[tuple[int, str]]:
  first = COUNTER_NARRATIVE_RATING_COLUMNS[system]
  return [(first + i, f"column {first + i} ({system} {rating})")
          for i, rating in enumerate(COUNTER_NARRATIVE_RATINGS)]


@dataclasses.dataclass(frozen=True)
class _AnnotatorRow:
  line: int
  key: tuple[str, str]               # (hate speech, target)
  texts: tuple[str, ...]             # in COUNTER_NARRATIVE_SYSTEMS order
  ratings: dict[str, tuple[int, ...]]  # system -> its five ratings


class _CounterNarrativeSheet:
  """Parses rows; the annotators' rows of one (hate speech, target) must show the same narratives."""

  def __init__(self):
    self.first_row = True
    self.seen = {}  # (hate speech, target) -> its first row

  def _is_header(self, row: list) -> bool:
    """A header names every rating column; a data row with blank ratings is an error, not one."""
    return len(row) >= _COUNTER_NARRATIVE_COLUMNS and all(
        cell.strip() and not _INTEGRAL.fullmatch(cell) for cell in row[12:_COUNTER_NARRATIVE_COLUMNS])

  def __call__(self, where: records.Where, row: list) -> tuple[_AnnotatorRow, collections.Counter] | None:
    if not any(cell.strip() for cell in row):
      return None  # spreadsheets export blank rows
    first_row, self.first_row = self.first_row, False
    if first_row and self._is_header(row):
      return None
    if len(row) < _COUNTER_NARRATIVE_COLUMNS:
      raise where.error(None, f"expected {_COUNTER_NARRATIVE_COLUMNS} columns, got {len(row)}")
    fixed = collections.Counter()
    key = (_text(where, row, 0, "column 0 (hate speech)", fixed),
           _text(where, row, 1, "column 1 (target)", fixed))
    texts = tuple(_text(where, row, 2 + i, f"column {2 + i} ({system} counter narrative)", fixed)
                  for i, system in enumerate(COUNTER_NARRATIVE_SYSTEMS))
    ratings = {system: tuple(_integer(where, row[column], field, fixed, low=0, in_text=True)
                             for column, field in _rating_fields(system))
               for system in COUNTER_NARRATIVE_SYSTEMS}
    earlier = self.seen.setdefault(key, _AnnotatorRow(where.line, key, texts, ratings))
    for i, system in enumerate(COUNTER_NARRATIVE_SYSTEMS):
      if texts[i] != earlier.texts[i]:
        raise where.error(f"column {2 + i} ({system} counter narrative)",
                          f"differs from the row of the same hate speech and target at line {earlier.line}")
    return _AnnotatorRow(where.line, key, texts, ratings), fixed


def _merged(rows: list[_AnnotatorRow]) -> list[CounterNarrative]:
  """One record per system, each rating the integer mean of the annotators' rows."""
  first = rows[0]
  out = []
  for i, system in enumerate(COUNTER_NARRATIVE_SYSTEMS):
    means = [sum(r.ratings[system][k] for r in rows) // len(rows)
             for k in range(len(COUNTER_NARRATIVE_RATINGS))]
    out.append(CounterNarrative(first.key[0], first.key[1], system, first.texts[i],
                                **dict(zip(COUNTER_NARRATIVE_RATINGS, means))))
  return out


def read_counter_narratives(path, *, skip_invalid: bool = False
                            ) -> tuple[list[CounterNarrative], records.ReadReport]:
  """Counter narratives with the annotators' ratings merged, per (hate speech, target) in file order.

  The release's layout (../shared/data/README.md): 0 hate speech, 1 target, 2-6 the narratives
  of COUNTER_NARRATIVE_SYSTEMS, each system's five ratings from its column in
  COUNTER_NARRATIVE_RATING_COLUMNS; extra columns are ignored. A header row is optional: the
  first row is one when each of its rating columns holds a name, not a number. Any number of
  annotators' rows (two in the release) are merged by integer mean. Ratings are integers of at
  least 0 (" 3" and "3.0" are read as 3 and counted in `normalised`; a blank or "x" is an
  error). The report's `read` counts the records returned (five per hate speech and target),
  `skipped` the bad rows.
  """
  parsed, report = records.read_records(path, records.csv_rows(path, header=False), _CounterNarrativeSheet(),
                                        skip_invalid=skip_invalid)
  rows = _records_and_normalised([p for p in parsed if p is not None], report)
  groups = collections.OrderedDict()
  for row in rows:
    groups.setdefault(row.key, []).append(row)
  narratives = [n for group in groups.values() for n in _merged(group)]
  report.read = len(narratives)
  return narratives, report


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
  ctx = _text(where, row, "ctx", "ctx", fixed)
  endings = where.sequence(row, "endings", length=HELLASWAG_ENDINGS)
  return HellaSwagItem(
      ctx=ctx,
      endings=tuple(_text(where, endings, i, f"endings[{i}]", fixed) for i in range(HELLASWAG_ENDINGS)),
      # The unlabeled test file has no label: it cannot give comparisons.
      label=_integer(where, where.child(row, "label", "label"), "label", fixed,
                     low=0, high=HELLASWAG_ENDINGS - 1),
  ), fixed


def read_hellaswag(path, *, skip_invalid: bool = False) -> tuple[list[HellaSwagItem], records.ReadReport]:
  """HellaSwag's labelled JSON lines (train or validation); a label may be an int or a digit string."""
  parsed, report = records.read_records(path, records.json_lines_rows(path), _parse_hellaswag,
                                        skip_invalid=skip_invalid)
  return _records_and_normalised(parsed, report), report
