"""What every reader shares: the error type, the read report, and typed field access.

A reader turns one file into rows (`json_array_rows`, `json_lines_rows`,
`csv_rows`), parses each row into a frozen dataclass with the `Where` helpers,
and lets `read_records` decide whether a bad row raises or is skipped and counted.
Errors always name the file, the row (line or index) and the field. A file may be local or in a
bucket (`gs://...`): every read goes through `storage`, and messages name the path as given.
"""
import collections
import csv
import dataclasses
import json
import math
import os
import re
import sys
from typing import Any, Callable, Iterable, Iterator, TypeVar

import storage

T = TypeVar("T")

# Words used in messages for where a row sits in its file.
LINE = "line"    # 1-based line of a JSON lines file, or of a CSV file's physical row
INDEX = "index"  # 0-based position in a JSON array


class RecordError(ValueError):
  """A record that does not match its released format."""

  def __init__(self, path, line: int | None, field: str | None, message: str, *, kind: str = LINE):
    self.path = os.fspath(path)
    self.line = line
    self.field = field
    self.kind = kind
    where = self.path if line is None else (
        f"{self.path}:{line}" if kind == LINE else f"{self.path}: index {line}")
    what = f"field {field!r}: " if field else ""
    super().__init__(f"{where}: {what}{message}")


@dataclasses.dataclass
class ReadReport:
  """What reading one file gave; `normalised` counts the release's known quirks a reader fixed
  (what was fixed -> how many times), so that the user is told of them."""
  path: str
  read: int = 0
  skipped: int = 0
  errors: list[RecordError] = dataclasses.field(default_factory=list)
  normalised: dict[str, int] = dataclasses.field(default_factory=dict)

  def summary(self) -> str:
    line = f"{self.path}: {self.read} records read, {self.skipped} skipped"
    if self.normalised:
      line += "; normalised: " + ", ".join(f"{n} {what}" for what, n in self.normalised.items())
    return line

  @classmethod
  def combined(cls, path: str, reports) -> "ReadReport":
    """One report for the files read as one dataset (a folder of sheets or JSON files)."""
    normalised = collections.Counter()
    for r in reports:
      normalised.update(r.normalised)
    return cls(path=path, read=sum(r.read for r in reports), skipped=sum(r.skipped for r in reports),
               errors=[e for r in reports for e in r.errors], normalised=dict(normalised))


def _describe(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


@dataclasses.dataclass(frozen=True)
class Where:
  """One row of one file; its methods read typed fields or raise a RecordError."""
  path: str
  line: int
  kind: str = LINE

  def error(self, field: str | None, message: str) -> RecordError:
    return RecordError(self.path, self.line, field, message, kind=self.kind)

  def child(self, obj: Any, key: str | int, field: str) -> Any:
    if isinstance(key, int):
      return obj[key]  # callers index lists they have already checked
    if not isinstance(obj, dict):
      raise self.error(field.rpartition(".")[0] or None, f"expected an object, got {_describe(obj)}")
    if key not in obj:
      raise self.error(field, "missing")
    return obj[key]

  def string(self, obj: Any, key: str, field: str | None = None, *, allow_empty: bool = False) -> str:
    field = field or key
    value = self.child(obj, key, field)
    if not isinstance(value, str):
      raise self.error(field, f"expected a string, got {_describe(value)}")
    if not allow_empty and not value.strip():
      raise self.error(field, "empty string")
    return value

  def integer(self, obj: Any, key: str, field: str | None = None, *, choices=None,
              from_string: bool = False) -> int:
    """An int (a bool is not one); a float only when integral; a string only if `from_string`."""
    field = field or key
    value = self.child(obj, key, field)
    number = value
    if from_string and isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
      number = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
      number = int(value)
    if isinstance(number, bool) or not isinstance(number, int):
      raise self.error(field, f"expected an integer, got {_describe(value)}")
    if choices is not None and number not in choices:
      raise self.error(field, f"expected one of {sorted(choices)}, got {_describe(value)}")
    return number

  def number(self, obj: Any, key: str, field: str | None = None) -> float:
    field = field or key
    value = self.child(obj, key, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise self.error(field, f"expected a finite number, got {_describe(value)}")
    return float(value)

  def boolean(self, obj: Any, key: str, field: str | None = None) -> bool:
    field = field or key
    value = self.child(obj, key, field)
    if not isinstance(value, bool):
      raise self.error(field, f"expected true or false, got {_describe(value)}")
    return value

  def choice(self, obj: Any, key: str, choices, field: str | None = None) -> str:
    field = field or key
    value = self.string(obj, key, field)
    if value not in choices:
      raise self.error(field, f"expected one of {sorted(choices)}, got {_describe(value)}")
    return value

  def mapping(self, obj: Any, key: str, field: str | None = None) -> dict:
    field = field or key
    value = self.child(obj, key, field)
    if not isinstance(value, dict):
      raise self.error(field, f"expected an object, got {_describe(value)}")
    return value

  def sequence(self, obj: Any, key: str, field: str | None = None, *, length: int | None = None,
               min_length: int = 0) -> list:
    field = field or key
    value = self.child(obj, key, field)
    if not isinstance(value, list):
      raise self.error(field, f"expected a list, got {_describe(value)}")
    if length is not None and len(value) != length:
      raise self.error(field, f"expected {length} entries, got {len(value)}")
    if len(value) < min_length:
      raise self.error(field, f"expected at least {min_length} entries, got {len(value)}")
    return value

  def json_text(self, obj: Any, key: str, field: str | None = None) -> Any:
    """A field that holds JSON inside a string (as CSV columns do)."""
    field = field or key
    text = self.string(obj, key, field)
    try:
      return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
      raise self.error(field, f"not valid JSON ({e})") from None


_CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


def _decode(path: str, data: bytes, line: int | None) -> str:
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise RecordError(path, line, None, f"invalid UTF-8 at byte {e.start}") from None


def json_array_rows(path) -> Iterator[tuple[Where, Any]]:
  """The entries of a file holding one JSON array; a broken file raises at once."""
  path = os.fspath(path)
  text = _decode(path, storage.read_bytes(path), None)
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise RecordError(path, e.lineno, None, f"not valid JSON: {e.msg} (column {e.colno})") from None
  except RecursionError:
    raise RecordError(path, None, None, "JSON nested too deeply") from None
  if not isinstance(data, list):
    raise RecordError(path, None, None, f"expected a JSON array, got {type(data).__name__}")
  for index, entry in enumerate(data):
    yield Where(path, index, INDEX), entry


def json_lines_rows(path) -> Iterator[tuple[Where, Any]]:
  """One JSON value per non-blank line; a line that does not parse yields its RecordError."""
  path = os.fspath(path)
  with storage.open_file(path, "rb") as f:
    for number, raw in enumerate(f, start=1):
      where = Where(path, number)
      try:
        text = _decode(path, raw, number)
        if not text.strip():
          continue
        yield where, json.loads(text)
      except RecordError as e:
        yield where, e
      except json.JSONDecodeError as e:
        yield where, where.error(None, f"not valid JSON: {e.msg} (column {e.colno})")
      except RecursionError:
        yield where, where.error(None, "JSON nested too deeply")


def csv_rows(path, *, header: bool = True) -> Iterator[tuple[Where, Any]]:
  """CSV rows as dicts (header) or lists; the line is where the row starts in the file.

  A file the csv module cannot tokenise fails as a whole: after such an error
  the row boundaries that follow cannot be trusted, so it is never skipped.
  """
  path = os.fspath(path)
  text = _decode(path, storage.read_bytes(path), None)
  reader = csv.reader(text.splitlines(keepends=True))
  columns = None
  while True:
    start = reader.line_num + 1
    limit = csv.field_size_limit(_CSV_FIELD_LIMIT)  # long texts are valid; the default caps at 128 KiB
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise RecordError(path, start, None, f"bad CSV: {e}") from None
    finally:
      csv.field_size_limit(limit)
    if header and columns is None:
      columns = row
      if len(set(columns)) != len(columns):
        raise RecordError(path, start, None, f"duplicate column names in header {columns}")
      continue
    where = Where(path, start)
    if columns is None:
      yield where, row
    elif len(row) != len(columns):
      yield where, where.error(None, f"expected {len(columns)} columns, got {len(row)}")
    else:
      yield where, dict(zip(columns, row))


def read_records(path, rows: Iterable[tuple[Where, Any]], parse: Callable[[Where, Any], T],
                 *, skip_invalid: bool = False, unique_id: Callable[[T], str] | None = None
                 ) -> tuple[list[T], ReadReport]:
  """Parses every row; the first bad one raises unless `skip_invalid`, which counts it.

  With `unique_id`, a repeated id is a bad row: it would silently shadow the first.
  """
  report = ReadReport(path=os.fspath(path))
  records = []
  seen = set()
  for where, row in rows:
    try:
      if isinstance(row, RecordError):
        raise row
      record = parse(where, row)
      if unique_id is not None:
        if unique_id(record) in seen:
          raise where.error("id", f"duplicate id {unique_id(record)!r}")
        seen.add(unique_id(record))
      records.append(record)
      report.read += 1
    except RecordError as e:
      if not skip_invalid:
        raise
      report.skipped += 1
      report.errors.append(e)
  return records, report

