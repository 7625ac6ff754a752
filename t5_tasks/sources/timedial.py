"""TimeDial: temporal commonsense cloze over dialogs (a JSON array of items).

The release is read as it is: its known quirks are fixed and counted in the read report's
`normalised` (options with surrounding spaces, "A:We" turns without a space after the speaker
tag, empty trailing turns); anything else that breaks the format fails with file, index and field.
"""
import collections
import dataclasses
import re
from typing import Iterable

from t5_tasks.sources import records

MASK = "<MASK>"
RULES = ("Rule 1", "Rule 2", "Rule 3")  # phrase matching, numeral matching, open-ended
OPTIONS_STRIPPED = "options stripped of surrounding spaces"
SPEAKER_SPACED = "turns given a space after the speaker tag"
EMPTY_TURNS_DROPPED = "empty trailing turns dropped"
_TIGHT_SPEAKER_TAG = re.compile(r"^([A-Z]):(?=\S)")


@dataclasses.dataclass(frozen=True)
class TimeDialItem:
  id: str
  conversation: tuple[str, ...]
  mask_turn: int                   # index of the one turn that holds MASK
  correct: tuple[str, str]
  incorrect: tuple[str, str]
  incorrect_rules: tuple[str, str]  # "Rule 1" phrase, "Rule 2" numeral, "Rule 3" open-ended matching


def _parse(where: records.Where, row) -> tuple[TimeDialItem, collections.Counter]:
  """The item and what was normalised in it."""
  fixed = collections.Counter()
  # The release numbers its items; ids are kept as strings so every source agrees.
  item_id = where.child(row, "id", "id")
  if isinstance(item_id, bool) or not isinstance(item_id, (int, str)) or not str(item_id).strip():
    raise where.error("id", f"expected a non-empty string or an integer, got {item_id!r}")
  turns = where.sequence(row, "conversation", min_length=1)
  # The release ends some dialogs with an empty turn (23 of its first 400 items): dropped.
  length = len(turns)
  while length > 1 and isinstance(turns[length - 1], str) and not turns[length - 1].strip():
    length -= 1
  fixed[EMPTY_TURNS_DROPPED] += len(turns) - length
  conversation = []
  for i in range(length):
    turn = where.string(turns, i, f"conversation[{i}]")
    spaced = _TIGHT_SPEAKER_TAG.sub(r"\1: ", turn)  # "A:We need" -> "A: We need"
    fixed[SPEAKER_SPACED] += spaced != turn
    conversation.append(spaced)
  masked = [i for i, turn in enumerate(conversation) if MASK in turn]
  if len(masked) != 1 or conversation[masked[0]].count(MASK) != 1:
    raise where.error("conversation", f"expected exactly one {MASK}, found it in turns {masked}")

  def option(key):
    text = where.string(row, key)
    fixed[OPTIONS_STRIPPED] += text != text.strip()  # the release's options end in a space
    return text.strip()
  item = TimeDialItem(
      id=str(item_id),
      conversation=tuple(conversation),
      mask_turn=masked[0],
      correct=(option("correct1"), option("correct2")),
      incorrect=(option("incorrect1"), option("incorrect2")),
      incorrect_rules=(where.string(row, "incorrect1_rule"), where.string(row, "incorrect2_rule")),
  )
  return item, +fixed


def read_timedial(path, *, skip_invalid: bool = False) -> tuple[list[TimeDialItem], records.ReadReport]:
  parsed, report = records.read_records(path, records.json_array_rows(path), _parse,
                                        skip_invalid=skip_invalid, unique_id=lambda p: p[0].id)
  normalised = collections.Counter()
  for _, fixed in parsed:
    normalised.update(fixed)
  report.normalised = {what: normalised[what] for what in
                       (OPTIONS_STRIPPED, SPEAKER_SPACED, EMPTY_TURNS_DROPPED) if normalised[what]}
  return [item for item, _ in parsed], report


def count_per_rule(items: Iterable[TimeDialItem]) -> dict[str, dict[str, int]]:
  """Per incorrect-option rule: its incorrect options (the denominator of the metric's
  `error_rate/<rule>`) and the items holding at least one (as the paper's Table 3 counts)."""
  options, holding = collections.Counter(), collections.Counter()
  for item in items:
    options.update(item.incorrect_rules)
    holding.update(set(item.incorrect_rules))
  return {rule: {"options": options[rule], "items": holding[rule]}
          for rule in sorted(set(RULES) | set(options))}
