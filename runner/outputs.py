"""Evaluation outputs shared by model evaluation and baselines.

An output directory holds `predictions.jsonl` (one JSON object per item, with
at least "task" and "id"; candidate tasks add "scores", "prediction", "gold")
and `metrics.json` (`{task: {metric: {"value", "low", "high"}}}`, plus a top-level
"provenance" object saying what produced the numbers when the writer records one, and a
"truncation" object saying what the feature lengths cut of each task's items).
Whole files are written with `storage.write_*` (a local one atomically); `PredictionsAppender`
writes line by line so that an interrupted evaluation can resume where it stopped.
"""
import json
import math
import os
from typing import Any, Iterable, Mapping

from runner import run_dir
import storage

PREDICTIONS_FILE = run_dir.PREDICTIONS
METRICS_FILE = run_dir.METRICS
RUN_CONFIG_FILE = run_dir.CONFIG_GIN
PROVENANCE_KEY = "provenance"  # metrics.json's record of checkpoint, data and settings
TRUNCATION_KEY = "truncation"  # metrics.json's {task: what the feature lengths cut} (runner/truncation.py)
RESERVED_KEYS = (PROVENANCE_KEY, TRUNCATION_KEY)  # metrics.json's keys that are not tasks
FILE_MODE = storage.FILE_MODE


class OutputError(ValueError):
  """A prediction or metric record that does not follow the output format."""


def write_run_config(directory: str, text: str) -> str:
  """Writes the run's gin configuration text to `directory/config.gin`; returns the path."""
  path = storage.join(directory, RUN_CONFIG_FILE)
  storage.write_text(path, text)
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
  path = run_dir.EvalDir(out_dir).predictions
  storage.write_text(path, "".join(lines))
  return path


def interval(value: float, low: float, high: float) -> dict[str, float]:
  """One metric entry of metrics.json."""
  return {"value": float(value), "low": float(low), "high": float(high)}


def write_metrics(out_dir: str, metrics: Mapping[str, Mapping[str, Mapping[str, float]]],
                  provenance: Mapping[str, Any] | None = None, truncation: Mapping[str, Any] | None = None) -> str:
  """Writes `{task: {metric: {"value", "low", "high"}}}` to `out_dir/metrics.json`, with
  `provenance` (what produced the numbers) under the top-level "provenance" key and `truncation`
  ({task: what the feature lengths cut}) under "truncation", each when given."""
  for task, by_name in metrics.items():
    for name, entry in by_name.items():
      missing = {"value", "low", "high"} - set(entry)
      if missing:
        raise OutputError(f"metrics[{task!r}][{name!r}]: missing {sorted(missing)}")
      for key in ("value", "low", "high"):
        if not isinstance(entry[key], (int, float)) or math.isnan(entry[key]):
          raise OutputError(f"metrics[{task!r}][{name!r}]['{key}']: expected a number, got {entry[key]!r}")
  for key in RESERVED_KEYS:
    if key in metrics:
      raise OutputError(f"metrics: {key!r} is reserved for the {key} record, not a task")
  records = {PROVENANCE_KEY: provenance, TRUNCATION_KEY: truncation}
  content = {**metrics, **{key: record for key, record in records.items() if record is not None}}
  path = run_dir.EvalDir(out_dir).metrics
  storage.write_text(path, json.dumps(content, indent=2, sort_keys=True) + "\n")
  return path


def _read_metrics_file(out_dir: str) -> dict:
  return json.loads(storage.read_text(run_dir.EvalDir(out_dir).metrics))


def read_metrics(out_dir: str) -> dict:
  """`{task: {metric: {"value", "low", "high"}}}` of `out_dir/metrics.json` (provenance and
  truncation left out)."""
  return {k: v for k, v in _read_metrics_file(out_dir).items() if k not in RESERVED_KEYS}


def read_provenance(out_dir: str) -> dict | None:
  """The provenance recorded in `out_dir/metrics.json`, or None when the writer recorded none."""
  return _read_metrics_file(out_dir).get(PROVENANCE_KEY)


def read_truncation(out_dir: str) -> dict | None:
  """{task: what the feature lengths cut} of `out_dir/metrics.json`, or None when none was recorded."""
  return _read_metrics_file(out_dir).get(TRUNCATION_KEY)


def read_predictions(path: str) -> list[dict]:
  """Reads a complete predictions file; a bad line raises OutputError naming it."""
  records = []
  with storage.open_file(path) as f:
    for number, line in enumerate(f, start=1):
      where = f"{path}:{number}"
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise OutputError(f"{where}: invalid JSON ({e.msg})") from e
      _check_record(record, where)
      records.append(record)
  return records


def _complete_prefix(path: str) -> tuple[list[bytes], list[dict]]:
  """The file's complete, parseable lines (as read) and their records."""
  data = storage.read_bytes(path)
  lines, records, end = [], [], 0
  for raw in data.splitlines(keepends=True):
    if not raw.endswith(b"\n"):
      break  # The last write was cut short.
    try:
      record = json.loads(raw)
      _check_record(record, f"{path}: byte {end}")
    except (json.JSONDecodeError, UnicodeDecodeError, OutputError):
      break
    lines.append(raw)
    records.append(record)
    end += len(raw)
  if end < len(data) and data[end:].count(b"\n") > 1:
    raise OutputError(f"{path}: corrupt line at byte {end} followed by more lines; refusing to resume")
  return lines, records


def read_written_ids(path: str) -> set[tuple[str, str]]:
  """(task, id) of every complete line of a partially written predictions file.

  A truncated or unparseable last line (an interrupted write) is ignored.
  """
  if not storage.exists(path):
    return set()
  _, records = _complete_prefix(path)
  return {(r["task"], r["id"]) for r in records}


def reorder_predictions(path: str, order: Iterable[tuple[str, str]]) -> bool:
  """Rewrites `path` (atomically) with its lines in `order` of (task, id), lines not named there
  after them as they were; each line byte for byte. Returns whether the file was out of order."""
  lines = storage.read_bytes(path).splitlines(keepends=True)
  rank = {key: i for i, key in enumerate(order)}
  keys = [(r["task"], r["id"]) for r in map(json.loads, lines)]
  sorted_lines = [line for _, _, line in sorted(
      (rank.get(key, len(rank)), i, line) for i, (key, line) in enumerate(zip(keys, lines)))]
  if sorted_lines == lines:
    return False
  storage.write_bytes(path, b"".join(sorted_lines))
  return True


class PredictionsAppender:
  """Appends prediction lines to a local `out_dir/predictions.jsonl`, resuming a partial file.

  On opening, a truncated last line is cut off so that new lines start clean;
  `done` holds the (task, id) pairs already written, to be skipped by the caller.
  """

  def __init__(self, out_dir: str):
    storage.makedirs(out_dir)
    self.path = run_dir.EvalDir(out_dir).predictions
    self.done: set[tuple[str, str]] = set()
    if storage.exists(self.path):
      lines, records = _complete_prefix(self.path)
      with open(self.path, "r+b") as f:
        f.truncate(sum(map(len, lines)))
      self.done = {(r["task"], r["id"]) for r in records}
    self._file = open(self.path, "a", encoding="utf-8")

  def write(self, record: Mapping[str, Any]) -> None:
    key = (record.get("task"), record.get("id"))
    line = _line(record, f"prediction {key}")
    if key in self.done:
      raise OutputError(f"{self.path}: item {key} was already written")
    self._put(line)
    self.done.add(key)

  def _put(self, line: str) -> None:
    self._file.write(line)
    self._file.flush()

  def flush(self) -> None:
    """Each line is written when it is given."""

  def close(self) -> None:
    self._file.flush()
    os.fsync(self._file.fileno())
    self._file.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc) -> None:
    self.close()


class PredictionParts(PredictionsAppender):
  """PredictionsAppender's bucket twin: a bucket has no append, so the lines given since the last
  `flush` (the end of a batch) become one whole object `predictions.parts/<n>.jsonl`; a resume
  reads the parts (and a finished `predictions.jsonl`) back. `close` writes `predictions.jsonl`
  whole, every line of every part in the order given, and deletes the parts: the files a local
  evaluation leaves."""

  def __init__(self, out_dir: str):  # pylint: disable=super-init-not-called  # no local file
    layout = run_dir.EvalDir(out_dir)
    self.path, self._parts = layout.predictions, layout.prediction_parts
    self._lines: list[bytes] = []
    if storage.exists(self.path):  # an earlier evaluation finished (or its parts were gathered)
      self._lines = storage.read_bytes(self.path).splitlines(keepends=True)
    self.done = {(r["task"], r["id"]) for r in map(json.loads, self._lines)}
    part_names = [name for name in storage.list_names(self._parts) if name.endswith(".jsonl")]
    for name in sorted(part_names):
      lines, records = _complete_prefix(storage.join(self._parts, name))
      for line, record in zip(lines, records):
        if (record["task"], record["id"]) not in self.done:  # a part gathered before a stop is not new
          self.done.add((record["task"], record["id"]))
          self._lines.append(line)
    self._next_part = len(part_names)
    self._pending: list[bytes] = []

  def _put(self, line: str) -> None:
    self._pending.append(line.encode("utf-8"))

  def flush(self) -> None:
    """Writes the lines given since the last flush as the next part."""
    if not self._pending:
      return
    storage.write_bytes(storage.join(self._parts, f"{self._next_part:06d}.jsonl"), b"".join(self._pending))
    self._lines += self._pending
    self._pending, self._next_part = [], self._next_part + 1

  def close(self) -> None:
    self.flush()
    if self._next_part:
      storage.write_bytes(self.path, b"".join(self._lines))
      storage.remove_tree(self._parts)


class CollectedRecords:
  """What `scoring_loop.score_task` writes to, kept in memory (evaluation during training, the
  benchmark): the records in the order batches were scored, `in_order` in the task's."""

  def __init__(self):
    self.done: set[tuple[str, str]] = set()
    self.records: list[dict] = []

  def write(self, record: Mapping[str, Any]) -> None:
    self.done.add((record["task"], record["id"]))
    self.records.append(dict(record))

  def flush(self) -> None:
    """Kept in memory."""

  def in_order(self, ids: list[str]) -> list[dict]:
    """The records in the order of `ids` (score_task's `stats.ids`: the task's)."""
    rank = {item_id: i for i, item_id in enumerate(ids)}
    return sorted(self.records, key=lambda record: rank[record["id"]])


def written_ids(out_dir: str) -> set[tuple[str, str]]:
  """(task, id) of every item `out_dir`'s predictions hold so far, read without writing."""
  if storage.is_bucket(out_dir):
    return PredictionParts(out_dir).done
  return read_written_ids(run_dir.EvalDir(out_dir).predictions)


def predictions_appender(out_dir: str) -> PredictionsAppender:
  """The writer of `out_dir`'s predictions: appended lines on a disk, whole parts in a bucket."""
  return (PredictionParts if storage.is_bucket(out_dir) else PredictionsAppender)(out_dir)
