"""A rule-based tagger of temporal expressions, and TimeDial-style items made from its spans.

The tagger finds durations ("two and a half hours"), clock times ("7:30 pm"), dates
("May 5th, 2019"), ages ("twenty-five years old") and frequencies ("twice a week"), written
with numerals or number words. Weak supervision (TimeDial, Qin et al. 2021) masks each tagged
span of an unlabeled dialog and uses the other spans of that dialog as negatives.
"""
import dataclasses
import re
from typing import Iterable, Sequence

from t5_tasks.sources import records

MASK = "<MASK>"

_SMALL = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORD_NUMBER = (rf"(?:(?:{'|'.join(_TENS)})(?:[- ](?:{'|'.join(_SMALL[1:10])}))?"
                rf"|{'|'.join(reversed(_SMALL))}|a hundred|hundreds of|a thousand|thousands of)")
_DIGITS = r"\d+(?:[.,]\d+)?"
_QUANTITY = rf"(?:{_DIGITS}|{_WORD_NUMBER}|a few|a couple(?: of)?|several|a|an|half an?|half a)"
_AND_HALF = r"(?:\s+and\s+a\s+half)?"
# "a second" is left out: it is nearly always the ordinal ("a second chance").
_UNIT = (r"(?:seconds|minutes?|mins?|hours?|hrs?|days?|nights?|weeks?|weekends?|fortnights?"
         r"|months?|years?|yrs?|decades?|century|centuries)")
# Month names count only when capitalised: "you may 2 ..." is not a date.
_MONTH = (r"(?-i:January|February|March|April|May|June|July|August|September|October|November"
          r"|December|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?)")
_ORDINAL_WORD = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh"
                 r"|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth"
                 r"|nineteenth|twentieth|(?:twenty|thirty)[- ]?(?:first|second|third|fourth|fifth"
                 r"|sixth|seventh|eighth|ninth)|thirtieth)")
_DAY = rf"(?:\d{{1,2}}(?:st|nd|rd|th)?|{_ORDINAL_WORD})"
_YEAR = r"(?:1[89]\d\d|20\d\d)"
_CLOCK_WORD = rf"(?:\d{{1,2}}|{'|'.join(reversed(_SMALL[1:13]))})"
_AMPM = r"(?:a\.m\.|p\.m\.|am\b|pm\b)"

# Ordered by priority: on overlapping matches the longest wins, then the earliest rule here.
# A group named "span" marks the expression inside a wider match (a bare year needs a cue).
_PATTERNS = (
    ("age", rf"\b{_QUANTITY}[\s-]+years?[\s-]+old\b"),
    ("age", rf"\b(?:aged?|at the age of)\s+(?:{_DIGITS}|{_WORD_NUMBER})\b"),
    ("age", rf"\bin (?:my|his|her|their|our|your) (?:early |mid |late )?"
            rf"(?:(?:twent|thirt|fort|fift|sixt|sevent|eight|ninet)ies|\d0s|\d0's)"),
    ("frequency", rf"\b(?:once|twice|thrice|{_QUANTITY}\s+times)\s+(?:a|an|per|every|each)\s+"
                  rf"(?:{_QUANTITY}\s+)?{_UNIT}\b"),
    ("frequency", rf"\bevery\s+(?:other\s+|{_QUANTITY}\s+)?{_UNIT}\b"),
    ("time", rf"\b\d{{1,2}}:\d{{2}}(?:\s*{_AMPM})?"),
    ("time", rf"\b\d{{1,2}}\s*{_AMPM}"),
    ("time", rf"\b{_CLOCK_WORD}\s+o'clock\b"),
    ("time", rf"\b(?:half past|quarter past|quarter to)\s+{_CLOCK_WORD}\b"),
    ("date", rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b"),
    ("date", rf"\b(?:the\s+)?{_DAY}\s+of\s+{_MONTH}(?:,?\s+{_YEAR})?"),
    ("date", rf"\b{_MONTH}\s+{_YEAR}\b"),
    ("date", r"\b\d{1,2}/\d{1,2}/(?:\d{4}|\d{2})\b"),
    ("date", rf"\b(?:in|since|by|until|of|from|before|after)\s+(?P<span>(?:the\s+)?{_YEAR}s?)\b"),
    ("duration", rf"\b{_QUANTITY}{_AND_HALF}[\s-]+{_UNIT}{_AND_HALF}\b"),
    ("duration", rf"\b(?:{_DIGITS}|{_WORD_NUMBER})\s+second\b"),
)
_COMPILED = tuple((category, re.compile(pattern, re.IGNORECASE)) for category, pattern in _PATTERNS)


@dataclasses.dataclass(frozen=True)
class TemporalSpan:
  start: int
  end: int
  text: str
  category: str  # duration, time, date, age or frequency


def tag(text: str) -> list[TemporalSpan]:
  """The temporal expressions in `text`, left to right, never overlapping."""
  found = []
  for priority, (category, pattern) in enumerate(_COMPILED):
    for match in pattern.finditer(text):
      start, end = match.span("span") if "span" in pattern.groupindex else match.span()
      found.append((start - end, priority, start, end, category))
  spans, taken = [], []
  for _, _, start, end, category in sorted(found):
    if all(end <= s or start >= e for s, e in taken):
      taken.append((start, end))
      spans.append(TemporalSpan(start, end, text[start:end], category))
  return sorted(spans, key=lambda span: span.start)


@dataclasses.dataclass(frozen=True)
class MaskedDialog:
  """A dialog with one `<MASK>` and the candidate fillers (the TimeDial cloze shape)."""
  id: str
  conversation: tuple[str, ...]
  mask_turn: int
  candidates: tuple[str, ...]
  candidate_labels: tuple[int, ...]
  candidate_rules: tuple[str, ...]  # "" for a correct candidate


def weak_supervision_items(dialog_id: str, conversation: Sequence[str], *,
                           max_negatives: int = 3) -> list[MaskedDialog]:
  """One item per tagged span: the span masked, other spans of the dialog as negatives.

  Negatives of the masked span's own category come first (they are the hard ones), then
  the others in dialog order; a span whose text repeats the answer is never a negative.
  """
  tagged = [(turn, span) for turn, text in enumerate(conversation) for span in tag(text)]
  items = []
  for turn, span in tagged:
    answer = span.text.lower()
    others, seen = [], {answer}
    for _, other in tagged:
      if other.text.lower() not in seen:
        seen.add(other.text.lower())
        others.append(other)
    others.sort(key=lambda other: other.category != span.category)
    negatives = others[:max_negatives]
    if not negatives:
      continue
    masked = list(conversation)
    masked[turn] = masked[turn][:span.start] + MASK + masked[turn][span.end:]
    items.append(MaskedDialog(
        id=f"{dialog_id}/{turn}:{span.start}",
        conversation=tuple(masked),
        mask_turn=turn,
        candidates=(span.text,) + tuple(n.text for n in negatives),
        candidate_labels=(1,) + (0,) * len(negatives),
        candidate_rules=("",) + tuple(f"weak/{n.category}" for n in negatives)))
  return items


def read_dialogs(path, *, skip_invalid: bool = False):
  """Unlabeled dialogs, JSON lines of `{"id": str, "conversation": [turn, ...]}`."""
  def parse(where: records.Where, row) -> tuple[str, tuple[str, ...]]:
    dialog_id = where.string(row, "id")
    turns = where.sequence(row, "conversation", min_length=1)
    for i, turn in enumerate(turns):
      if not isinstance(turn, str):
        raise where.error(f"conversation[{i}]", f"expected a string, got {type(turn).__name__}")
    return dialog_id, tuple(turns)
  return records.read_records(path, records.json_lines_rows(path), parse,
                              skip_invalid=skip_invalid, unique_id=lambda d: d[0])


def weak_supervision_from_dialogs(dialogs: Iterable[tuple[str, Sequence[str]]],
                                  **kwargs) -> list[MaskedDialog]:
  return [item for dialog_id, turns in dialogs
          for item in weak_supervision_items(dialog_id, turns, **kwargs)]
