"""Dialogs with temporal spans a user tagged with SUTime, for TimeDial's weak supervision.

TimeDial tags its unlabeled dialogs with SUTime (Qin et al. 2021, §4.1.1 and §4.3); the project's
default is its own regex tagger (`t5_tasks.temporal_tagger`). A user who ran SUTime brings its
spans as JSON lines, one dialog a line (the unlabeled dialogs' format with the spans added):

    {"id": "dd-0017",
     "conversation": ["A: Are you home for Christmas?", "B: Yes, for two weeks."],
     "spans": [{"turn": 0, "start": 20, "end": 29, "text": "Christmas", "type": "DATE"},
               {"turn": 1, "start": 12, "end": 21, "text": "two weeks", "type": "DURATION"}]}

`turn` indexes `conversation` (from 0); `start` and `end` are character offsets in that turn
(Python string indices: Unicode code points, `end` exclusive), `text` is the turn's
`[start:end]`, checked, so that offsets counted in bytes or in another turn are caught; `type`
is the span's TIMEX3 type, as SUTime writes it: DATE, TIME, DURATION or SET. A dialog may have
no span (it makes no item). Spans of one turn may not overlap (SUTime's never do, and a masked
span must not hide part of another); the one thing normalised is their order, put in text order
(turn, then start) and counted, since the negatives are drawn in that order.
"""
import dataclasses

from t5_tasks.sources import records

TIMEX3_TYPES = ("DATE", "TIME", "DURATION", "SET")  # SUTime's TIMEX3 `type` values
SPANS_SORTED = "dialogs whose spans were put in text order"


@dataclasses.dataclass(frozen=True)
class Timex:
  turn: int
  start: int
  end: int
  text: str
  type: str  # one of TIMEX3_TYPES


@dataclasses.dataclass(frozen=True)
class TaggedDialog:
  id: str
  conversation: tuple[str, ...]
  spans: tuple[Timex, ...]  # in text order


def _span(where: records.Where, conversation: tuple[str, ...], row, k: int) -> Timex:
  field = f"spans[{k}]"
  turn = where.integer(row, "turn", f"{field}.turn")
  if not 0 <= turn < len(conversation):
    raise where.error(f"{field}.turn", f"no turn {turn} in a conversation of {len(conversation)} turns")
  start = where.integer(row, "start", f"{field}.start")
  end = where.integer(row, "end", f"{field}.end")
  if not 0 <= start < len(conversation[turn]):
    raise where.error(f"{field}.start", f"{start} is outside turn {turn} "
                                        f"({len(conversation[turn])} characters)")
  if not start < end <= len(conversation[turn]):
    raise where.error(f"{field}.end", f"{end} is not after start {start} within turn {turn} "
                                      f"({len(conversation[turn])} characters)")
  text = where.string(row, "text", f"{field}.text")
  if conversation[turn][start:end] != text:
    raise where.error(f"{field}.text", f"{text!r} is not turn {turn}'s [{start}:{end}], which "
                                       f"reads {conversation[turn][start:end]!r}")
  kind = where.choice(row, "type", TIMEX3_TYPES, f"{field}.type")
  return Timex(turn, start, end, text, kind)


def _parse(where: records.Where, row, normalised: dict) -> TaggedDialog:
  dialog_id = where.string(row, "id")
  turns = where.sequence(row, "conversation", min_length=1)
  for i, turn in enumerate(turns):
    if not isinstance(turn, str):
      raise where.error(f"conversation[{i}]", f"expected a string, got {type(turn).__name__}")
  conversation = tuple(turns)
  rows = where.sequence(row, "spans")
  for k, span in enumerate(rows):
    if not isinstance(span, dict):
      raise where.error(f"spans[{k}]", f"expected an object, got {type(span).__name__}")
  spans = [(k, _span(where, conversation, span, k)) for k, span in enumerate(rows)]
  ordered = sorted(spans, key=lambda ks: (ks[1].turn, ks[1].start, ks[1].end))
  for (j, before), (k, after) in zip(ordered, ordered[1:]):
    if before.turn == after.turn and after.start < before.end:
      raise where.error(f"spans[{k}]", f"overlaps spans[{j}] ({before.text!r} at "
                                       f"{before.start}:{before.end} of turn {before.turn})")
  if ordered != spans:
    normalised[SPANS_SORTED] = normalised.get(SPANS_SORTED, 0) + 1
  return TaggedDialog(dialog_id, conversation, tuple(span for _, span in ordered))


def read_tagged_dialogs(path, *, skip_invalid: bool = False
                        ) -> tuple[list[TaggedDialog], records.ReadReport]:
  """Every dialog of the file, each span checked against its turn; a bad record raises a
  RecordError naming file, line and field (or, with `skip_invalid`, is skipped and counted)."""
  normalised, seen = {}, set()

  def parse(where, row):
    counted = {}  # a record skipped as invalid does not count as normalised
    dialog = _parse(where, row, counted)
    if dialog.id in seen:  # it would merge two dialogs' items in one split
      raise where.error("id", f"duplicate id {dialog.id!r}")
    seen.add(dialog.id)
    for what, n in counted.items():
      normalised[what] = normalised.get(what, 0) + n
    return dialog

  dialogs, report = records.read_records(path, records.json_lines_rows(path), parse,
                                         skip_invalid=skip_invalid)
  report.normalised = normalised
  return dialogs, report
