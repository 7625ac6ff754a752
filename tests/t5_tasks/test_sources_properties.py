"""Property tests: damaged records give a RecordError naming file, row and field, or a counted skip."""
import copy
import csv
import io
import json
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from t5_tasks.sources import asq
from t5_tasks import heap
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice
from t5_tasks.sources.records import RecordError

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Values of the wrong type for each kind of field; none of them is accepted.
WRONG = {
    "str": [None, 3, 2.5, True, [], {}],
    "int": [None, "seven", 1.5, True, [], {}, float("nan")],
    "numstr": [None, "seven", "1.5", True, [], {}],  # ASQ annotations write numbers as strings
    "bool": [None, "true", 1, 0.0, []],
    "list": [None, "text", 5, {}],
    "dict": [None, "text", 5, []],
    "id": [None, 2.5, True, [], {}],
}


def _first(path):
  text = (DATA / path).read_text()
  return json.loads(text)[0] if path.endswith(".json") else json.loads(text.splitlines()[0])


def _field_name(path):
  name = ""
  for key in path:
    name += f"[{key}]" if isinstance(key, int) else (f".{key}" if name else key)
  return name


# reader, whether the file is a JSON array, a valid record, and (path, kind, may be absent) per field.
CASES = {
    "timedial": (timedial.read_timedial, True, _first("timedial_test.json"), [
        (("id",), "id", False), (("conversation",), "list", False), (("conversation", 0), "str", True),
        (("correct1",), "str", False), (("correct2",), "str", False), (("incorrect1",), "str", False),
        (("incorrect2_rule",), "str", False)]),
    "asq": (asq.read_asq, True, _first("asq_test.json"), [
        (("id",), "str", False), (("narrative",), "str", False), (("qn1",), "str", False),
        (("qn2",), "str", False), (("label",), "int", False)]),
    "asq_annotation": (asq.read_asq_annotations, True, _first("asq_human_annotation_first.json"), [
        (("id",), "str", False), (("true_label",), "numstr", False), (("annotated_label",), "numstr", False),
        (("true_qn_type",), "numstr", False), (("paired_qn_type",), "numstr", False)]),
    "reddit_advice": (reddit_advice.read_reddit_advice, False, _first("reddit_advice_2019.jsonl"), [
        (("id",), "str", True), (("subreddit",), "str", False), (("created_utc",), "int", False),
        (("title",), "str", False), (("selftext",), "str", False), (("split",), "str", False),
        (("good_comments",), "list", False), (("good_comments", 0), "dict", True),
        (("good_comments", 0, "body"), "str", False), (("good_comments", 0, "score"), "int", False)]),
    "turingadvice": (turingadvice.read_turingadvice_eval, False, _first("turingadvice_eval.jsonl"), [
        (("situation",), "dict", False), (("situation", "id"), "str", False),
        (("situation", "title"), "str", False), (("situation", "selftext"), "str", False),
        (("situation", "submitted_time"), "int", False), (("best_advice",), "dict", False),
        (("best_advice", "bestadvice_body"), "str", False), (("model_advice", "T5-11B"), "str", False),
        (("turk_ratings", "T5-11B"), "dict", False), (("turk_ratings", "T5-11B", "is_preferred"), "bool", False),
        (("turk_ratings", "T5-11B", "diagnostics"), "list", False),
        (("turk_ratings", "T5-11B", "diagnostics", 0, "q1_intensifier"), "int", False),
        (("turk_ratings", "T5-11B", "diagnostics", 0, "q2_helpful_or_not"), "str", False)]),
    "summarize": (summarize_feedback.read_comparisons, False, _first("summarize_comparisons.jsonl"), [
        (("info",), "dict", False), (("info", "id"), "str", False), (("info", "post"), "str", False),
        (("info", "subreddit"), "str", False), (("summaries",), "list", False),
        (("summaries", 1, "text"), "str", False), (("summaries", 0, "policy"), "str", False),
        (("choice",), "int", False), (("split",), "str", False), (("extra", "confidence"), "int", True)]),
    "defeasible": (heap.read_defeasible, False, {
        "premise": "A man walks a dog.", "hypothesis": "The man is outside.", "update": "It is raining.",
        "model": "human", "dataset": "snli", "pred_label": "attenuator", "human_label": [-1, -2, -1],
        "human_irrelevant": [0, 0, 0], "human_nonsensical": [0, 0, 0]}, [
        (("premise",), "str", False), (("update",), "str", False), (("pred_label",), "str", False),
        (("human_label",), "list", False)]),
}
FIELDS = [(name, path, kind, optional) for name, (_, _, _, fields) in CASES.items()
          for path, kind, optional in fields]


def _write(tmp_path, name, records, is_array, *, raw_lines=None):
  path = tmp_path / f"{name}.{'json' if is_array else 'jsonl'}"
  if is_array:
    path.write_text(json.dumps(records, indent=1))
  else:
    lines = raw_lines if raw_lines is not None else [json.dumps(r).encode() for r in records]
    path.write_bytes(b"\n".join(lines) + b"\n")
  return path


def _set(record, path, value):
  record = copy.deepcopy(record)
  target = record
  for key in path[:-1]:
    target = target[key]
  if value is _DELETE:
    del target[path[-1]]
  else:
    target[path[-1]] = value
  return record


_DELETE = object()


@settings(SETTINGS, max_examples=12)
@pytest.mark.parametrize("name,field_path,kind,optional", FIELDS,
                         ids=[f"{f[0]}:{_field_name(f[1])}" for f in FIELDS])
@given(data=st.data(), position=st.integers(0, 2), skip=st.booleans())
def test_damaged_field_is_named(tmp_path, name, field_path, kind, optional, data, position, skip):
  reader, is_array, base, _ = CASES[name]
  mutation = data.draw(st.sampled_from(["missing", "empty", *WRONG[kind]]), label="mutation")
  if mutation is None and optional:
    return  # a JSON null is how the release writes an absent optional field
  if mutation == "missing":
    bad = _set(base, field_path, _DELETE)
  elif mutation == "empty":
    bad = _set(base, field_path, " " if kind == "str" else "")
  else:
    bad = _set(base, field_path, mutation)
  records = [_with_id(r, n, name) for n, r in enumerate([bad if n == position else base for n in range(3)])]
  path = _write(tmp_path, name, records, is_array)
  if mutation == "missing" and optional:
    assert reader(path)[1].read == 3
    return
  expected_field = _field_name(field_path)
  if name == "turingadvice" and mutation == "missing" and field_path[-1] == "T5-11B":
    expected_field = "turk_ratings"  # the systems no longer match their ratings
  if skip:
    items, report = reader(path, skip_invalid=True)
    assert (report.read, report.skipped, len(items)) == (2, 1, 2)
    error = report.errors[0]
  else:
    with pytest.raises(RecordError) as info:
      reader(path)
    error = info.value
  row = position if is_array else position + 1
  assert error.path == str(path) and error.line == row and error.field == expected_field
  assert str(error).startswith(f"{path}: index {row}: field {expected_field!r}: " if is_array
                               else f"{path}:{row}: field {expected_field!r}: ")


def _with_id(record, n, name):
  """Copies of one record need distinct ids (a repeated id is itself an error)."""
  record = copy.deepcopy(record)
  holder = record.get("situation") if name == "turingadvice" else record
  if isinstance(holder, dict) and isinstance(holder.get("id"), str) and holder["id"].strip():
    holder["id"] = f"{holder['id']}-{n}"
  elif isinstance(holder, dict) and isinstance(holder.get("id"), int) and not isinstance(holder["id"], bool):
    holder["id"] = holder["id"] * 10 + n
  return record


JSONL = ["reddit_advice", "turingadvice", "summarize", "defeasible"]


@SETTINGS
@given(name=st.sampled_from(JSONL), cut=st.floats(0.0, 0.999), skip=st.booleans())
def test_truncated_json_line_is_named(tmp_path, name, cut, skip):
  reader, _, base, _ = CASES[name]
  lines = [json.dumps(_with_id(base, n, name)).encode() for n in range(3)]
  lines[1] = lines[1][:int(cut * len(lines[1]))]
  path = _write(tmp_path, name, None, False, raw_lines=lines)
  if not lines[1].strip():
    assert reader(path)[1].read == 2  # a blank line is no record
    return
  if skip:
    items, report = reader(path, skip_invalid=True)
    assert (len(items), report.skipped) == (2, 1)
    assert str(report.errors[0]).startswith(f"{path}:2: not valid JSON")
  else:
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:2: not valid JSON"):
      reader(path)


@SETTINGS
@given(name=st.sampled_from(JSONL), bad=st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82"]),
       at=st.floats(0.0, 1.0), skip=st.booleans())
def test_invalid_utf8_is_named(tmp_path, name, bad, at, skip):
  reader, _, base, _ = CASES[name]
  lines = [json.dumps(_with_id(base, n, name)).encode() for n in range(3)]
  cut = int(at * len(lines[2]))
  lines[2] = lines[2][:cut] + bad + lines[2][cut:]
  path = _write(tmp_path, name, None, False, raw_lines=lines)
  if skip:
    items, report = reader(path, skip_invalid=True)
    assert (len(items), report.skipped) == (2, 1)
    assert str(report.errors[0]).startswith(f"{path}:3: invalid UTF-8")
  else:
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:3: invalid UTF-8"):
      reader(path)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4),
                           max_leaves=12)


@SETTINGS
@given(name=st.sampled_from(list(CASES)), value=JSON_VALUES)
def test_any_json_value_is_a_record_error_or_a_record(tmp_path, name, value):
  reader, is_array, _, _ = CASES[name]
  path = _write(tmp_path, name, [value], is_array)
  try:
    reader(path)
  except RecordError as e:
    assert str(e).startswith(f"{path}: index 0: " if is_array else f"{path}:1: ")


@SETTINGS
@given(name=st.sampled_from(["timedial", "asq"]), cut=st.floats(0.05, 0.95), utf8=st.booleans())
def test_broken_json_array_fails_as_a_whole(tmp_path, name, cut, utf8):
  reader, _, base, _ = CASES[name]
  data = json.dumps([base]).encode()
  data = data[:int(cut * len(data))] + (b"\xff" if utf8 else b"")
  path = tmp_path / f"{name}.json"
  path.write_bytes(data)
  with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}(:\d+)?: (invalid UTF-8|not valid JSON)"):
    reader(path, skip_invalid=True)  # a broken array cannot be read past its damage


@SETTINGS
@given(name=st.sampled_from(JSONL + ["timedial", "asq"]), size=st.sampled_from([200_000, 1_000_000]))
def test_huge_fields_are_read_intact(tmp_path, name, size):
  reader, is_array, base, fields = CASES[name]
  field_path = next(path for path, kind, _ in fields if kind == "str" and path[-1] != "id" and "id" not in path)
  huge = ("word " * (size // 5)).strip()
  record = _set(_with_id(base, 0, name), field_path, huge)
  items, report = reader(_write(tmp_path, name, [record], is_array))
  assert report.read == 1
  assert huge in json.dumps(items[0], default=lambda o: o.__dict__)


# --- CSV sources --------------------------------------------------------------------------------

TELLMEWHY_HEADER = ["narrative", "question", "answer", "is_ques_answerable", "val_ann", "gram_ann"]
TELLMEWHY_ROW = ["Ann lost her keys. She found them in the fridge.", "Why were the keys in the fridge?",
                 "She put them there by mistake.", "Answerable", "[2, 1, 2]", "[2, 2, 2]"]


def _csv_bytes(header, rows):
  out = io.StringIO()
  csv.writer(out, quoting=csv.QUOTE_ALL).writerows([header, *rows])
  return out.getvalue().encode()


@SETTINGS
@given(column=st.sampled_from(TELLMEWHY_HEADER), data=st.data(), skip=st.booleans())
def test_tellmewhy_bad_cell_is_named(tmp_path, column, data, skip):
  text_column = column in ("narrative", "question", "answer")
  value = data.draw(st.sampled_from(["", "  "] if text_column else
                                    ["", "  ", "[3, 1]", "[2, 1", "yes", '["2"]', "[]", "{}"]), label="value")
  row = list(TELLMEWHY_ROW)
  row[TELLMEWHY_HEADER.index(column)] = value
  path = tmp_path / "tellmewhy.csv"
  path.write_bytes(_csv_bytes(TELLMEWHY_HEADER, [TELLMEWHY_ROW, row]))
  if skip:
    items, report = heap.read_tellmewhy(path, skip_invalid=True)
    assert (len(items), report.skipped) == (1, 1)
    error = report.errors[0]
  else:
    with pytest.raises(RecordError) as info:
      heap.read_tellmewhy(path)
    error = info.value
  assert str(error).startswith(f"{path}:3: field {column!r}")


@SETTINGS
@given(size=st.sampled_from([200_000, 2_000_000]), bad_utf8=st.booleans(), drop=st.sampled_from(TELLMEWHY_HEADER))
def test_tellmewhy_huge_cells_missing_columns_and_bad_bytes(tmp_path, size, bad_utf8, drop):
  row = list(TELLMEWHY_ROW)
  row[0] = "x" * size
  path = tmp_path / "tellmewhy.csv"
  path.write_bytes(_csv_bytes(TELLMEWHY_HEADER, [row]))
  items, _ = heap.read_tellmewhy(path)
  assert len(items[0].narrative) == size  # above the csv module's default 128 KiB field limit
  keep = [i for i, c in enumerate(TELLMEWHY_HEADER) if c != drop]
  path.write_bytes(_csv_bytes([TELLMEWHY_HEADER[i] for i in keep], [[TELLMEWHY_ROW[i] for i in keep]]))
  with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:2: field {drop!r}: missing"):
    heap.read_tellmewhy(path)
  if bad_utf8:
    path.write_bytes(_csv_bytes(TELLMEWHY_HEADER, [TELLMEWHY_ROW]).replace(b"Ann", b"A\xffn"))
    with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}: invalid UTF-8"):
      heap.read_tellmewhy(path, skip_invalid=True)


def test_csv_row_with_wrong_column_count_is_skipped_and_counted(tmp_path):
  path = tmp_path / "tellmewhy.csv"
  path.write_bytes(_csv_bytes(TELLMEWHY_HEADER, [TELLMEWHY_ROW, TELLMEWHY_ROW[:4], TELLMEWHY_ROW]))
  items, report = heap.read_tellmewhy(path, skip_invalid=True)
  assert (len(items), report.skipped) == (2, 1)
  assert str(report.errors[0]) == f"{path}:3: expected 6 columns, got 4"


def test_commongen_sheet_errors_name_the_row(tmp_path):
  path = tmp_path / "sheet1.csv"
  rows = [["instructions", "", ""], ["Sentence 1", "Sentence 2", "Score"], ["Concept set: dog run", "", ""],
          ["Reference: A dog runs.", "", ""], ["a dog runs", "dog run a", "1"], ["a dog is running", "run", "2"]]
  path.write_bytes(_csv_bytes(rows[0], rows[1:]))
  with pytest.raises(RecordError, match=rf"^{re.escape(str(path))}:6: field 'score': expected one of .* got '2'"):
    heap.read_commongen_sheet(path)
  judgments, report = heap.read_commongen_sheet(path, skip_invalid=True)
  assert [j.sentences for j in judgments] == [("a dog runs", "dog run a")] and report.skipped == 1
