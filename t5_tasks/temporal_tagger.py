"""A rule-based tagger of temporal expressions, and TimeDial-style items made from its spans.

The tagger finds durations ("two and a half hours"), clock times ("7:30 pm"), dates
("May 5th, 2019"), ages ("twenty-five years old") and frequencies ("twice a week"), written
with numerals or number words, and, as SUTime does (TimeDial §3.1 and §4.3 tag with it), the
non-numeric expressions: seasons ("summer"), parts of the day ("tonight", "this morning"),
relative dates ("tomorrow", "last week", weekdays) and the present ("right now").
Weak supervision as TimeDial §4.1.1 makes it (Qin et al. 2021): each tagged span of an
unlabeled dialog is masked in turn, and 3 negatives are drawn at random from the dialog's other
spans, topped up from the corpus's pool of spans when the dialog has fewer (Table 4's "# spans",
the pool negatives are drawn from); dialogs are split into train and validation, and those that
are TimeDial test dialogs are left out.

The paper tags with SUTime; this tagger is the project's own rules, the default. Spans a user
tagged with SUTime (`t5_tasks.sources.sutime_spans`) make the same items in its place: every
function below that takes dialogs takes `(id, conversation)`, tagged here, or
`(id, conversation, spans)`, spans already tagged as `(turn, TemporalSpan)` pairs.
"""
import collections
import dataclasses
import hashlib
import random
import re
from typing import Iterable, Sequence

from t5_tasks.sources import records

MASK = "<MASK>"
NUM_NEGATIVES = 3  # per positive, as TimeDial's Table 4
# Table 4, in-domain (DailyDialog) mask filling and generation: 14.5k train and 2.4k dev instances
# (classification's 58.0k and 9.6k are the same spans with 3 negatives each, the same share). The
# paper splits instances; whole dialogs are split here (a dialog's items stay in one split), this
# share of them chosen by a seeded hash of their ids, so the items' share is Table 4's on average.
TABLE4_IN_DOMAIN_TRAIN, TABLE4_IN_DOMAIN_DEV = 14_500, 2_400
VALIDATION_FRACTION = TABLE4_IN_DOMAIN_DEV / (TABLE4_IN_DOMAIN_TRAIN + TABLE4_IN_DOMAIN_DEV)  # 0.142

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
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
_PART_OF_DAY = r"(?:mornings?|afternoons?|evenings?|nights?)"

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
    # Non-numeric expressions (SUTime's seasons, parts of the day, relative dates, PRESENT_REF).
    ("frequency", rf"\bevery\s+(?:{_PART_OF_DAY}|{_WEEKDAY})\b"),
    ("season", rf"\b(?:(?:this|last|next|early|late)\s+)?(?:summer|winter|spring|autumn)s?\b"),
    ("season", r"\b(?:this|last|next)\s+fall\b"),  # a bare "fall" is nearly always the verb
    ("season", r"\b(?:in|during)\s+the\s+(?P<span>fall)\b"),
    ("part_of_day", r"\b(?:tonight|midnight|noon)\b"),
    # "Good morning" and "good night" are greetings, not times.
    ("part_of_day", rf"\b(?<!good )(?:(?:this|tomorrow|yesterday|last|{_WEEKDAY})\s+)?{_PART_OF_DAY}\b"),
    ("relative_date", r"\b(?:the\s+day\s+(?:after|before)\s+)?(?:today|tomorrow|yesterday)\b"),
    ("relative_date", rf"\b(?:this|last|next|coming|following|previous)\s+"
                      rf"(?:week|weekend|month|year|semester|{_WEEKDAY})\b"),
    ("relative_date", r"\bthe\s+weekend\b"),
    ("relative_date", rf"\b{_WEEKDAY}\b"),
    ("present", r"\b(?:right\s+|just\s+)?now\b"),
)
_COMPILED = tuple((category, re.compile(pattern, re.IGNORECASE)) for category, pattern in _PATTERNS)


@dataclasses.dataclass(frozen=True)
class TemporalSpan:
  start: int
  end: int
  text: str
  # duration, time, date, age, frequency; non-numeric: season, part_of_day, relative_date, present
  category: str


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


@dataclasses.dataclass(frozen=True)
class SpanPool:
  """The distinct spans (case-insensitive) of a corpus, in a fixed order: where a dialog with
  fewer than `num_negatives` other spans draws the rest of its negatives (TimeDial Table 4's
  "# spans": 2,153 for DailyDialog, 38,750 for Meena)."""
  spans: tuple[TemporalSpan, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "_texts", frozenset(span.text.lower() for span in self.spans))

  def __len__(self):
    return len(self.spans)

  def draw(self, count: int, taken: set[str], rng: random.Random) -> list[TemporalSpan]:
    """Up to `count` spans whose texts are not in `taken` (lower-case), each once, at random.
    Drawn by rejection: a pool holds thousands of spans and `taken` a few."""
    count = min(count, len(self.spans) - len(self._texts & taken))
    drawn, taken = [], set(taken)
    while len(drawn) < count:
      span = self.spans[rng.randrange(len(self.spans))]
      if span.text.lower() not in taken:
        taken.add(span.text.lower())
        drawn.append(span)
    return drawn


Spans = Sequence[tuple[int, TemporalSpan]]  # (turn, span) pairs of one dialog, in text order
# A dialog: (id, conversation), which `tag` tags, or (id, conversation, spans) tagged already.
Dialog = tuple[str, Sequence[str]] | tuple[str, Sequence[str], Spans]


def dialog_spans(conversation: Sequence[str]) -> tuple[tuple[int, TemporalSpan], ...]:
  """The (turn, span) pairs `tag` finds in each turn of `conversation`, in text order."""
  return tuple((turn, span) for turn, text in enumerate(conversation) for span in tag(text))


def _spans_of(dialog: Dialog) -> Spans:
  return dialog[2] if len(dialog) == 3 else dialog_spans(dialog[1])


def span_pool(dialogs: Iterable[Dialog]) -> SpanPool:
  """The pool of every span of `dialogs`: one span per lower-cased text (the first of its
  spellings in sorted order), sorted, so the pool does not depend on the dialogs' order."""
  spellings = {}
  for dialog in dialogs:
    for _, span in _spans_of(dialog):
      key = span.text.lower()
      spellings[key] = min(spellings.get(key, span), span, key=lambda s: (s.text, s.category))
  return SpanPool(tuple(TemporalSpan(0, len(s.text), s.text, s.category)
                        for _, s in sorted(spellings.items())))


def weak_supervision_items(dialog_id: str, conversation: Sequence[str], *, spans: Spans | None = None,
                           pool: SpanPool = SpanPool(), num_negatives: int = NUM_NEGATIVES,
                           seed: int = 0) -> list[MaskedDialog]:
  """One item per tagged span: the span masked, up to `num_negatives` of the dialog's other
  spans drawn at random as negatives (§4.1.1), and when the dialog has fewer, the rest drawn from
  `pool` (seeded by `seed` and the dialog's id, so reproducible).

  `spans` are the dialog's (turn, span) pairs when tagged elsewhere (SUTime's), else `tag`'s;
  either way the same draws. A span whose text repeats the answer (case-insensitive) is never a
  negative, nor are two negatives the same text; a span left with no negative at all (a dialog
  with one distinct span and an empty pool) makes no item. Negatives' rules read
  `weak/<category>`, from the pool `weak/pool/<category>`.
  """
  tagged = list(dialog_spans(conversation) if spans is None else spans)
  for turn, span in tagged:  # a span elsewhere than it says would mask the wrong text
    if not 0 <= turn < len(conversation) or conversation[turn][span.start:span.end] != span.text:
      raise ValueError(f"{dialog_id}: span {span.text!r} is not at turn {turn}, "
                       f"characters {span.start}:{span.end}")
  rng = random.Random(f"{seed}/{dialog_id}")
  items = []
  for turn, span in tagged:
    own, seen = [], {span.text.lower()}
    for _, other in tagged:
      if other.text.lower() not in seen:
        seen.add(other.text.lower())
        own.append(other)
    negatives = rng.sample(own, min(num_negatives, len(own)))
    taken = {span.text.lower()} | {n.text.lower() for n in negatives}
    from_pool = pool.draw(num_negatives - len(negatives), taken, rng)
    if not negatives and not from_pool:
      continue
    masked = list(conversation)
    masked[turn] = masked[turn][:span.start] + MASK + masked[turn][span.end:]
    items.append(MaskedDialog(
        id=f"{dialog_id}/{turn}:{span.start}",
        conversation=tuple(masked),
        mask_turn=turn,
        candidates=(span.text,) + tuple(n.text for n in negatives + from_pool),
        candidate_labels=(1,) + (0,) * (len(negatives) + len(from_pool)),
        candidate_rules=("",) + tuple(f"weak/{n.category}" for n in negatives)
        + tuple(f"weak/pool/{n.category}" for n in from_pool)))
  return items


def split_by_dialog(dialog_ids: Iterable[str], *, validation_fraction: float = VALIDATION_FRACTION,
                    seed: int = 0) -> dict[str, str]:
  """Dialog id -> "train" or "validation": the `validation_fraction` of the dialogs (rounded; at
  least one of two or more) whose seeded hash is lowest, so every item of a dialog stays in one."""
  order = sorted(set(dialog_ids), key=lambda i: hashlib.sha256(f"{seed}/{i}".encode()).digest())
  size = round(validation_fraction * len(order))
  if validation_fraction > 0 and len(order) > 1:
    size = max(1, size)
  return {dialog_id: "validation" if k < size else "train" for k, dialog_id in enumerate(order)}


def _words(text: str) -> str:
  """Lower-case words and numbers only: "A:We'll  leave at 6 p.m ." -> "a we ll leave at 6 p m"."""
  return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def normalise_turn(turn: str) -> str:
  """A turn's words without its speaker tag ("A:", "B :")."""
  return _words(re.sub(r"^\s*[A-Za-z]\s*:", "", turn))


class TimeDialTestDialogs:
  """TimeDial test dialogs, to recognise an unlabeled dialog that is one of them.

  A dialog is a test dialog when, after `normalise_turn`, it holds every turn of the test item
  but the masked one, and a turn that reads as the masked one with any span in place of <MASK>
  (the unlabeled copy has the original span there, or another).
  """

  def __init__(self, conversations: Iterable[Sequence[str]]):
    self._keys = []  # (other turns, masked turn's words before <MASK>, after it)
    self._by_turn = collections.defaultdict(set)  # a normalised turn -> keys holding it
    for conversation in conversations:
      mask = next(i for i, turn in enumerate(conversation) if MASK in turn)
      before, _, after = conversation[mask].partition(MASK)
      others = frozenset(filter(None, (normalise_turn(t) for i, t in enumerate(conversation)
                                       if i != mask)))
      if not others:
        continue  # a lone masked turn says too little to recognise its dialog
      for turn in others:
        self._by_turn[turn].add(len(self._keys))
      self._keys.append((others, normalise_turn(before), _words(after)))

  def __len__(self):
    return len(self._keys)

  def __contains__(self, conversation: Sequence[str]) -> bool:
    turns = [normalise_turn(t) for t in conversation]
    present = set(turns)
    for key in set().union(*(self._by_turn.get(t, ()) for t in present)):
      others, before, after = self._keys[key]
      if others <= present and any(
          t.startswith(before) and t.endswith(after) and len(t) > len(before) + len(after)
          for t in turns):
        return True
    return False


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


def weak_supervision_splits(dialogs: Iterable[Dialog], *,
                            validation_fraction: float = VALIDATION_FRACTION, seed: int = 0,
                            **kwargs) -> dict[str, list[MaskedDialog]]:
  """{"train": items, "validation": items} of `dialogs`, split by dialog (`split_by_dialog`);
  negatives a dialog lacks come from the pool of all their spans (`span_pool`)."""
  dialogs = [(dialog[0], dialog[1], tuple(_spans_of(dialog))) for dialog in dialogs]  # tagged once
  pool = span_pool(dialogs)
  splits = split_by_dialog((dialog_id for dialog_id, _, _ in dialogs),
                           validation_fraction=validation_fraction, seed=seed)
  out = {"train": [], "validation": []}
  for dialog_id, turns, spans in dialogs:
    out[splits[dialog_id]].extend(weak_supervision_items(dialog_id, turns, spans=spans, pool=pool,
                                                         seed=seed, **kwargs))
  return out
