"""Evaluation outputs shared by model evaluation and baselines.

An output directory holds `predictions.jsonl` (one JSON object per item, with
at least "task" and "id"; candidate tasks add "scores", "prediction", "gold")
and `metrics.json` (`{task: {metric: {"value", "low", "high"}}}`, plus a top-level
"provenance" object saying what produced the numbers when the writer records one).
Whole files are written atomically; `PredictionsAppender` writes line by line
so that an interrupted evaluation can resume where it stopped.
"""
import json
import math
import os
import tempfile
from typing import Any, Iterable, Mapping

PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
RUN_CONFIG_FILE = "config.gin"  # the gin configuration a run was started with, as t5x keeps it
PROVENANCE_KEY = "provenance"  # metrics.json's record of checkpoint, data and settings
FILE_MODE = 0o644  # outputs are read by others (a report server, a colleague); mkstemp makes 0600


class OutputError(ValueError):
  """A prediction or metric record that does not follow the output format."""


def atomic_write_bytes(path: str, data: bytes) -> None:
  """Writes `data` to a temp file beside `path`, then renames it over `path`."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
  try:
    os.chmod(tmp, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def atomic_write_text(path: str, text: str) -> None:
  atomic_write_bytes(path, text.encode("utf-8"))


def write_run_config(directory: str, text: str) -> str:
  """Writes the run's gin configuration text to `directory/config.gin`; returns the path."""
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, RUN_CONFIG_FILE)
  atomic_write_text(path, text)
  return path


def _check_record(record: Mapping[str, Any], where: str) -> None:
  if not isinstance(record, Mapping):
    raise OutputError(f"{where}: expected a JSON object, got {type(record).__name__}")
  for field in ("task", "id"):
    if not isinstance(record.get(field), str) or not record[field]:
      raise OutputError(f"{where}: field '{field}' must be a non-empty string, got {record.get(field)!r}")
  if "scores" in record:
    scores = record["scores"]
    if not isinstance(scores, (list, tuple)) or not all(isinstance(s, (int, float)) for s in scores):
      raise OutputError(f"{where}: field 'scores' must be a list of numbers")
    if "prediction" in record and not 0 <= record["prediction"] < len(scores):
      raise OutputError(f"{where}: field 'prediction' {record['prediction']!r} is not a candidate index")


def _line(record: Mapping[str, Any], where: str) -> str:
  _check_record(record, where)
  # allow_nan=False: NaN is not JSON and breaks other readers of the file.
  return json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"


def write_predictions(out_dir: str, records: Iterable[Mapping[str, Any]]) -> str:
  """Writes all records to `out_dir/predictions.jsonl` atomically; returns the path."""
  lines = [_line(r, f"prediction {i}") for i, r in enumerate(records)]
  path = os.path.join(out_dir, PREDICTIONS_FILE)
  atomic_write_text(path, "".join(lines))
  return path


def interval(value: float, low: float, high: float) -> dict[str, float]:
  """One metric entry of metrics.json."""
  return {"value": float(value), "low": float(low), "high": float(high)}


def write_metrics(out_dir: str, metrics: Mapping[str, Mapping[str, Mapping[str, float]]],
                  provenance: Mapping[str, Any] | None = None) -> str:
  """Writes `{task: {metric: {"value", "low", "high"}}}` to `out_dir/metrics.json`, with
  `provenance` (what produced the numbers) under the top-level "provenance" key when given."""
  for task, by_name in metrics.items():
    for name, entry in by_name.items():
      missing = {"value", "low", "high"} - set(entry)
      if missing:
        raise OutputError(f"metrics[{task!r}][{name!r}]: missing {sorted(missing)}")
      for key in ("value", "low", "high"):
        if not isinstance(entry[key], (int, float)) or math.isnan(entry[key]):
          raise OutputError(f"metrics[{task!r}][{name!r}]['{key}']: expected a number, got {entry[key]!r}")
  if PROVENANCE_KEY in metrics:
    raise OutputError(f"metrics: {PROVENANCE_KEY!r} is reserved for the provenance record, not a task")
  content = dict(metrics) if provenance is None else {**metrics, PROVENANCE_KEY: provenance}
  path = os.path.join(out_dir, METRICS_FILE)
  atomic_write_text(path, json.dumps(content, indent=2, sort_keys=True) + "\n")
  return path


def _read_metrics_file(out_dir: str) -> dict:
  with open(os.path.join(out_dir, METRICS_FILE), encoding="utf-8") as f:
    return json.load(f)


def read_metrics(out_dir: str) -> dict:
  """`{task: {metric: {"value", "low", "high"}}}` of `out_dir/metrics.json` (provenance left out)."""
  return {k: v for k, v in _read_metrics_file(out_dir).items() if k != PROVENANCE_KEY}


def read_provenance(out_dir: str) -> dict | None:
  """The provenance recorded in `out_dir/metrics.json`, or None when the writer recorded none."""
  return _read_metrics_file(out_dir).get(PROVENANCE_KEY)


def read_predictions(path: str) -> list[dict]:
  """Reads a complete predictions file; a bad line raises OutputError naming it."""
  records = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      where = f"{path}:{number}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise OutputError(f"{where}: invalid JSON ({e.msg})") from e
      _check_record(record, where)
      records.append(record)
  return records


def _complete_prefix(path: str) -> tuple[int, list[dict]]:
  """Byte length and records of the file's complete, parseable lines."""
  with open(path, "rb") as f:
    data = f.read()
  records, end = [], 0
  for raw in data.splitlines(keepends=True):
    if not raw.endswith(b"\n"):
      break  # The last write was cut short.
    try:
      record = json.loads(raw)
      _check_record(record, f"{path}: byte {end}")
    except (json.JSONDecodeError, UnicodeDecodeError, OutputError):
      break
    records.append(record)
    end += len(raw)
  if end < len(data) and data[end:].count(b"\n") > 1:
    raise OutputError(f"{path}: corrupt line at byte {end} followed by more lines; refusing to resume")
  return end, records


def read_written_ids(path: str) -> set[tuple[str, str]]:
  """(task, id) of every complete line of a partially written predictions file.

  A truncated or unparseable last line (an interrupted write) is ignored.
  """
  if not os.path.exists(path):
    return set()
  _, records = _complete_prefix(path)
  return {(r["task"], r["id"]) for r in records}


def reorder_predictions(path: str, order: Iterable[tuple[str, str]]) -> bool:
  """Rewrites `path` (atomically) with its lines in `order` of (task, id), lines not named there
  after them as they were; each line byte for byte. Returns whether the file was out of order."""
  with open(path, "rb") as f:
    lines = f.read().splitlines(keepends=True)
  rank = {key: i for i, key in enumerate(order)}
  keys = [(r["task"], r["id"]) for r in map(json.loads, lines)]
  sorted_lines = [line for _, _, line in sorted(
      (rank.get(key, len(rank)), i, line) for i, (key, line) in enumerate(zip(keys, lines)))]
  if sorted_lines == lines:
    return False
  atomic_write_bytes(path, b"".join(sorted_lines))
  return True


class PredictionsAppender:
  """Appends prediction lines to `out_dir/predictions.jsonl`, resuming a partial file.

  On opening, a truncated last line is cut off so that new lines start clean;
  `done` holds the (task, id) pairs already written, to be skipped by the caller.
  """

  def __init__(self, out_dir: str):
    os.makedirs(out_dir, exist_ok=True)
    self.path = os.path.join(out_dir, PREDICTIONS_FILE)
    self.done: set[tuple[str, str]] = set()
    if os.path.exists(self.path):
      end, records = _complete_prefix(self.path)
      with open(self.path, "r+b") as f:
        f.truncate(end)
      self.done = {(r["task"], r["id"]) for r in records}
    self._file = open(self.path, "a", encoding="utf-8")

  def write(self, record: Mapping[str, Any]) -> None:
    key = (record.get("task"), record.get("id"))
    line = _line(record, f"prediction {key}")
    if key in self.done:
      raise OutputError(f"{self.path}: item {key} was already written")
    self._file.write(line)
    self._file.flush()
    self.done.add(key)

  def close(self) -> None:
    self._file.flush()
    os.fsync(self._file.fileno())
    self._file.close()

  def __enter__(self) -> "PredictionsAppender":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
