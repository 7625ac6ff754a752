"""Readers of HEAP's hate-speech judgments: CHASM (a JSON object per file) and the counter
narratives of Tekiroğlu et al. 2022 (CSV without a fixed header)."""
import collections
import dataclasses
import functools
import json
import os
import re
from typing import Any, Iterator

import storage
from t5_tasks.heap.readers import INTEGRAL_TEXT
from t5_tasks.heap.readers import normalised_integer
from t5_tasks.heap.readers import normalised_text
from t5_tasks.heap.readers import records_and_normalised
from t5_tasks.sources import records


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
  return tuple(normalised_integer(where, v, f"{field}[{i}]", fixed, low=CHASM_SCALE[0], high=CHASM_SCALE[1])
               for i, v in enumerate(values))


def _chasm_narrative(where: records.Where, item: dict, system: str, fixed) -> ChasmNarrative:
  narrative = where.mapping(item, system)
  score = where.mapping(narrative, "score", f"{system}.score")

  def ratings(criterion):
    field = f"{system}.score.{criterion}"
    return _chasm_ratings(where, score, criterion, field, CHASM_NARRATIVE_RATERS, fixed)
  return ChasmNarrative(system=system, text=normalised_text(where, narrative, "text", f"{system}.text", fixed),
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
      post=normalised_text(where, post, "text", "post.text", fixed),
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
    posts += records_and_normalised(parsed, report)
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
        cell.strip() and not INTEGRAL_TEXT.fullmatch(cell) for cell in row[12:_COUNTER_NARRATIVE_COLUMNS])

  def __call__(self, where: records.Where, row: list) -> tuple[_AnnotatorRow, collections.Counter] | None:
    if not any(cell.strip() for cell in row):
      return None  # spreadsheets export blank rows
    first_row, self.first_row = self.first_row, False
    if first_row and self._is_header(row):
      return None
    if len(row) < _COUNTER_NARRATIVE_COLUMNS:
      raise where.error(None, f"expected {_COUNTER_NARRATIVE_COLUMNS} columns, got {len(row)}")
    fixed = collections.Counter()
    key = (normalised_text(where, row, 0, "column 0 (hate speech)", fixed),
           normalised_text(where, row, 1, "column 1 (target)", fixed))
    texts = tuple(normalised_text(where, row, 2 + i, f"column {2 + i} ({system} counter narrative)", fixed)
                  for i, system in enumerate(COUNTER_NARRATIVE_SYSTEMS))
    ratings = {system: tuple(normalised_integer(where, row[column], field, fixed, low=0, in_text=True)
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
  rows = records_and_normalised([p for p in parsed if p is not None], report)
  groups = collections.OrderedDict()
  for row in rows:
    groups.setdefault(row.key, []).append(row)
  narratives = [n for group in groups.values() for n in _merged(group)]
  report.read = len(narratives)
  return narratives, report
