"""TimeDial: temporal commonsense cloze over dialogs (a JSON array of items)."""
import dataclasses

from t5_tasks.sources import records

MASK = "<MASK>"


@dataclasses.dataclass(frozen=True)
class TimeDialItem:
  id: str
  conversation: tuple[str, ...]
  mask_turn: int                   # index of the one turn that holds MASK
  correct: tuple[str, str]
  incorrect: tuple[str, str]
  incorrect_rules: tuple[str, str]  # "Rule 1" phrase, "Rule 2" numeral, "Rule 3" open-ended matching


def _parse(where: records.Where, row) -> TimeDialItem:
  # The release numbers its items; ids are kept as strings so every source agrees.
  item_id = where.child(row, "id", "id")
  if isinstance(item_id, bool) or not isinstance(item_id, (int, str)) or not str(item_id).strip():
    raise where.error("id", f"expected a non-empty string or an integer, got {item_id!r}")
  turns = where.sequence(row, "conversation", min_length=1)
  # The release ends some dialogs with an empty turn (23 of its first 400 items): dropped.
  length = len(turns)
  while length > 1 and isinstance(turns[length - 1], str) and not turns[length - 1].strip():
    length -= 1
  conversation = tuple(where.string(turns, i, f"conversation[{i}]") for i in range(length))
  masked = [i for i, turn in enumerate(conversation) if MASK in turn]
  if len(masked) != 1 or conversation[masked[0]].count(MASK) != 1:
    raise where.error("conversation", f"expected exactly one {MASK}, found it in turns {masked}")
  return TimeDialItem(
      id=str(item_id),
      conversation=conversation,
      mask_turn=masked[0],
      correct=(where.string(row, "correct1"), where.string(row, "correct2")),
      incorrect=(where.string(row, "incorrect1"), where.string(row, "incorrect2")),
      incorrect_rules=(where.string(row, "incorrect1_rule"), where.string(row, "incorrect2_rule")),
  )


def read_timedial(path, *, skip_invalid: bool = False) -> tuple[list[TimeDialItem], records.ReadReport]:
  return records.read_records(path, records.json_array_rows(path), _parse,
                              skip_invalid=skip_invalid, unique_id=lambda item: item.id)
