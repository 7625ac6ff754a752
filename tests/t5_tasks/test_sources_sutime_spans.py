"""SUTime's spans brought as a file (`t5_tasks.sources.sutime_spans`): every record checked, and
the weak-supervision items made at exactly those spans, including ones the regex tagger misses."""
import json
import re

import pytest

from t5_tasks import temporal_tagger
from t5_tasks.families import timedial as timedial_family
from t5_tasks.sources import records
from t5_tasks.sources import sutime_spans
from tests.conftest import PROJECT_ROOT

QUICKSTART_TEST = PROJECT_ROOT / "t5_tasks" / "data" / "timedial_test.json"

# Spans SUTime finds and the regex tagger does not (holidays, "Weekly"), but for "two weeks".
# Three distinct texts in d1 and one in d2 make a pool of 4, so every draw is known as a set:
# d1's items take the other two of d1 and "Weekly" (the pool's one text left); d2's, d1's three.
D1 = ["A: Are you home for Christmas?", "B: Yes, for two weeks.", "A: Back by New Year's Day then."]
D2 = ["A: How often do you swim?", "B: Weekly, in the lake."]
D3 = ["A: Hello there.", "B: Hi!"]  # no span: no item


def _span(conversation, turn, text, kind):
  start = conversation[turn].index(text)
  return {"turn": turn, "start": start, "end": start + len(text), "text": text, "type": kind}


def _rows():
  return [
      # Written out of order (a user's tool may list them by type): put in text order, counted.
      {"id": "d1", "conversation": list(D1), "spans": [_span(D1, 2, "New Year's Day", "DATE"),
                                                 _span(D1, 0, "Christmas", "DATE"),
                                                 _span(D1, 1, "two weeks", "DURATION")]},
      {"id": "d2", "conversation": list(D2), "spans": [_span(D2, 1, "Weekly", "SET")]},
      {"id": "d3", "conversation": list(D3), "spans": []},
  ]


def _write(tmp_path, rows):
  path = tmp_path / "sutime.jsonl"
  path.write_text("".join(json.dumps(row) + "\n" for row in rows))
  return path


def test_the_file_is_read_whole_and_its_reordering_said(tmp_path):
  dialogs, report = sutime_spans.read_tagged_dialogs(_write(tmp_path, _rows()))
  assert [d.id for d in dialogs] == ["d1", "d2", "d3"] and report.read == 3 and report.skipped == 0
  assert [(s.turn, s.start, s.end, s.text, s.type) for s in dialogs[0].spans] == [
      (0, 20, 29, "Christmas", "DATE"), (1, 12, 21, "two weeks", "DURATION"),
      (2, 11, 25, "New Year's Day", "DATE")]
  assert report.normalised == {sutime_spans.SPANS_SORTED: 1}
  assert "normalised: 1 dialogs whose spans were put in text order" in report.summary()


def test_items_are_made_at_the_files_spans_with_negatives_from_dialog_then_pool(tmp_path, capsys):
  path = _write(tmp_path, _rows())
  # The regex tagger finds one of these five spans: these items are SUTime's.
  assert [s.text for turn in D1 + D2 for s in temporal_tagger.tag(turn)] == ["two weeks"]
  built = timedial_family.weak_supervision_examples(
      {"dialogs": {"sutime": str(path)}, "timedial": {"test": str(QUICKSTART_TEST)}})
  assert (f"4 temporal spans in 3 dialogs (a pool of 4 distinct), tagged by SUTime (the 'sutime' "
          f"file {path})") in capsys.readouterr().out
  items = {ex["id"]: ex for split in built.values() for ex in split}
  rule = {"Christmas": "weak/date", "two weeks": "weak/duration", "New Year's Day": "weak/date",
          "Weekly": "weak/set"}
  expected = {  # id -> masked conversation, answer, {negative: rule}
      "d1/0:20": (["A: Are you home for <MASK>?", D1[1], D1[2]], "Christmas",
                  {"two weeks": rule["two weeks"], "New Year's Day": rule["New Year's Day"],
                   "Weekly": "weak/pool/set"}),
      "d1/1:12": ([D1[0], "B: Yes, for <MASK>.", D1[2]], "two weeks",
                  {"Christmas": rule["Christmas"], "New Year's Day": rule["New Year's Day"],
                   "Weekly": "weak/pool/set"}),
      "d1/2:11": ([D1[0], D1[1], "A: Back by <MASK> then."], "New Year's Day",
                  {"Christmas": rule["Christmas"], "two weeks": rule["two weeks"],
                   "Weekly": "weak/pool/set"}),
      "d2/1:3": ([D2[0], "B: <MASK>, in the lake."], "Weekly",
                 {"Christmas": "weak/pool/date", "two weeks": "weak/pool/duration",
                  "New Year's Day": "weak/pool/date"}),
  }
  assert {i: (ex["conversation"], ex["candidates"][0],
              dict(zip(ex["candidates"][1:], ex["candidate_rules"][1:])))
          for i, ex in items.items()} == expected
  assert all(ex["candidate_labels"] == [1, 0, 0, 0] and ex["candidate_rules"][0] == ""
             for ex in items.values())
  # A dialog's own spans are drawn before the pool's, as the regex path draws them.
  assert all(not r.startswith("weak/pool/") for ex in items.values() if ex["id"].startswith("d1/")
             for r in ex["candidate_rules"][1:3])


@pytest.mark.parametrize("change, field", [
    (lambda r: r["spans"][1].__setitem__("text", "Easter"), "spans[1].text"),
    (lambda r: r["spans"][1].update(start=19, end=28), "spans[1].text"),  # offsets one off
    (lambda r: r["spans"][0].__setitem__("turn", 3), "spans[0].turn"),
    (lambda r: r["spans"][0].__setitem__("end", 99), "spans[0].end"),
    (lambda r: r["spans"][0].update(start=5, end=5), "spans[0].end"),
    (lambda r: r["spans"][0].__setitem__("start", -1), "spans[0].start"),
    (lambda r: r["spans"][0].__setitem__("type", "duration"), "spans[0].type"),  # TIMEX3 is upper-case
    (lambda r: r["spans"][2].pop("type"), "spans[2].type"),
    (lambda r: r["spans"].append(_span(D1, 2, "Year's Day", "DATE")), "spans[3]"),  # overlaps
    (lambda r: r["conversation"].__setitem__(1, 7), "conversation[1]"),
    (lambda r: r.pop("spans"), "spans"),
    (lambda r: r.__setitem__("id", "d2"), "id"),  # the next line's id too
])
def test_a_broken_record_is_refused_with_its_line_and_field(tmp_path, change, field):
  rows = _rows()
  rows = [rows[1], rows[0], rows[2]]  # the broken record on line 2
  change(rows[1])
  path = _write(tmp_path, rows)
  with pytest.raises(records.RecordError, match=rf"sutime.jsonl:2: field {re.escape(repr(field))}"):
    sutime_spans.read_tagged_dialogs(path)
  dialogs, report = sutime_spans.read_tagged_dialogs(path, skip_invalid=True)
  assert [d.id for d in dialogs] == ["d2", "d3"] and report.skipped == 1
  assert report.normalised == {}  # the skipped record's reordering is not counted
