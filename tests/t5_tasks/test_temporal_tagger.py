"""The temporal tagger on hand-written sentences, and the weak-supervision items it makes."""
import json

import pytest

from t5_tasks import temporal_tagger
from t5_tasks.sources import records

POSITIVES = [
    ("We waited two and a half hours at the station.", [("two and a half hours", "duration")]),
    ("It took 3 weeks to hear back.", [("3 weeks", "duration")]),
    ("Give me a few minutes to get ready.", [("a few minutes", "duration")]),
    ("Hold on, one second.", [("one second", "duration")]),
    ("Meet me at 7:30 pm tomorrow.", [("7:30 pm", "time"), ("tomorrow", "relative_date")]),
    ("The store opens at 9am.", [("9am", "time")]),
    ("See you at seven o'clock.", [("seven o'clock", "time")]),
    ("The bus leaves at quarter past six.", [("quarter past six", "time")]),
    ("She was born on May 5th, 2019 in Ohio.", [("May 5th, 2019", "date")]),
    ("The party is on the 5th of June.", [("the 5th of June", "date")]),
    ("We moved here in 2015.", [("2015", "date")]),
    ("The deadline is 10/12/2021.", [("10/12/2021", "date")]),
    ("My son is twenty-five years old.", [("twenty-five years old", "age")]),
    ("Her 8-year-old daughter loves it.", [("8-year-old", "age")]),
    ("He retired at the age of 60.", [("at the age of 60", "age")]),
    ("I was in my early thirties then.", [("in my early thirties", "age")]),
    ("I go to the gym twice a week.", [("twice a week", "frequency")]),
    ("Take the pill three times a day.", [("three times a day", "frequency")]),
    ("We call every two weeks.", [("every two weeks", "frequency")]),
    ("I waited 45 minutes, then left at 6 pm for two days away.",
     [("45 minutes", "duration"), ("6 pm", "time"), ("two days", "duration")]),
    # Non-numeric expressions, as SUTime tags them (TimeDial §3.1: "summer", "right now").
    ("No, not all summer.", [("summer", "season")]),
    ("We met last winter and again this spring.", [("last winter", "season"), ("this spring", "season")]),
    ("The leaves turn red in the fall.", [("fall", "season")]),
    ("I'm afraid I can't come tonight.", [("tonight", "part_of_day")]),
    ("Let's talk tomorrow morning, not at midnight.",
     [("tomorrow morning", "part_of_day"), ("midnight", "part_of_day")]),
    ("I only work in the afternoon.", [("afternoon", "part_of_day")]),
    ("I saw him yesterday, and the day after tomorrow we leave.",
     [("yesterday", "relative_date"), ("the day after tomorrow", "relative_date")]),
    ("It was raining all last week.", [("last week", "relative_date")]),
    ("The shop is closed on Sundays, so come on Monday evening.",
     [("Sundays", "relative_date"), ("Monday evening", "part_of_day")]),
    ("I'm busy right now.", [("right now", "present")]),
    ("We jog every morning.", [("every morning", "frequency")]),
    ("She stayed two nights last weekend.", [("two nights", "duration"), ("last weekend", "relative_date")]),
]

NEGATIVES = [
    "I have two dogs and 3 cats.",
    "Give me a second chance.",
    "You may 2 go first.",
    "Room 405 is on the second floor.",
    "I scored 10 points in the game.",
    "One of my friends called.",
    "March forward, soldiers.",
    "It costs $20 and weighs 5 kg.",
    "Good morning, sir. Good night!",  # greetings
    "I know you will fall for it.",  # "fall" the verb, "know" holding "now"
    "A snowfall, knowingly, by the nightstand.",  # "fall", "now", "night" inside words
]


@pytest.mark.parametrize("sentence, expected", POSITIVES)
def test_finds_temporal_expressions(sentence, expected):
  spans = temporal_tagger.tag(sentence)
  assert [(s.text, s.category) for s in spans] == expected
  for s in spans:
    assert sentence[s.start:s.end] == s.text


@pytest.mark.parametrize("sentence", NEGATIVES)
def test_finds_nothing_in_negatives(sentence):
  assert temporal_tagger.tag(sentence) == []


def test_weak_supervision_masks_each_span_with_other_spans_as_negatives():
  dialog = ["A: How long have you lived here?",
            "B: About three years. I moved in 2019.",
            "A: I only stay for two weeks, then fly out at 6 pm."]
  items = temporal_tagger.weak_supervision_items("d", dialog)
  spans = ["three years", "2019", "two weeks", "6 pm"]
  assert [item.candidates[0] for item in items] == spans
  for item in items:
    answer = item.candidates[0]
    turn = item.conversation[item.mask_turn]
    assert turn.count(temporal_tagger.MASK) == 1
    assert turn.replace(temporal_tagger.MASK, answer) == dialog[item.mask_turn]
    assert sorted(item.candidates[1:]) == sorted(s for s in spans if s != answer)
    assert item.candidate_labels == (1, 0, 0, 0)
    assert item.candidate_rules[0] == ""
  # Negatives are drawn at random (TimeDial §4.1.1), seeded by the dialog: the same draw again.
  assert temporal_tagger.weak_supervision_items("d", dialog) == items
  categories = {s.text: s.category for turn in dialog for s in temporal_tagger.tag(turn)}
  assert all(rule == f"weak/{categories[text]}"
             for item in items for text, rule in zip(item.candidates[1:], item.candidate_rules[1:]))


def test_weak_supervision_skips_a_span_without_any_negative():
  assert temporal_tagger.weak_supervision_items("d", ["Wait two days.", "Two days?"]) == []


POOL_DIALOGS = [("a", ["A: Wait two days.", "B: Two days?"]),
                ("b", ["A: See you tomorrow.", "B: Or next week, at 6 pm."]),
                ("c", ["A: It lasted 3 hours last summer."]),
                ("d", ["A: I called TOMORROW... I mean yesterday, twice a week."])]


def test_span_pool_is_each_text_once_in_a_fixed_order():
  pool = temporal_tagger.span_pool(POOL_DIALOGS)
  texts = [span.text for span in pool.spans]
  # "Two days"/"two days" and "tomorrow"/"TOMORROW" once each, the sorted first spelling kept.
  assert texts == ["3 hours", "6 pm", "last summer", "next week", "TOMORROW", "twice a week",
                   "Two days", "yesterday"]  # sorted by lower-cased text
  assert temporal_tagger.span_pool(POOL_DIALOGS[::-1]) == pool


def test_a_dialog_short_of_negatives_draws_them_from_the_pool():
  pool = temporal_tagger.span_pool(POOL_DIALOGS)
  items = temporal_tagger.weak_supervision_items("a", POOL_DIALOGS[0][1], pool=pool)
  assert len(items) == 2  # one item per span, though the dialog has one distinct span
  pool_texts = {span.text.lower(): span.category for span in pool.spans}
  for item in items:
    assert item.candidate_labels == (1, 0, 0, 0) and item.candidates[0].lower() == "two days"
    negatives = [c.lower() for c in item.candidates[1:]]
    assert len(set(negatives)) == 3 and "two days" not in negatives and set(negatives) <= set(pool_texts)
    assert list(item.candidate_rules[1:]) == [f"weak/pool/{pool_texts[n]}" for n in negatives]
  assert temporal_tagger.weak_supervision_items("a", POOL_DIALOGS[0][1], pool=pool) == items  # seeded
  # Random, not the pool's order: over many dialogs every other text of the pool is drawn.
  drawn = {c.lower() for i in range(40)
           for item in temporal_tagger.weak_supervision_items(f"a{i}", POOL_DIALOGS[0][1], pool=pool)
           for c in item.candidates[1:]}
  assert drawn == set(pool_texts) - {"two days"}
  # The dialog's own spans come first: "b" has 2 others for each span, the pool adds one.
  for item in temporal_tagger.weak_supervision_items("b", POOL_DIALOGS[1][1], pool=pool):
    rules = item.candidate_rules[1:]
    assert [r.startswith("weak/pool/") for r in rules] == [False, False, True]
    assert set(c.lower() for c in item.candidates) == {"tomorrow", "next week", "6 pm"} | {item.candidates[3].lower()}
  # A pool with too few texts left gives what it has.
  small = temporal_tagger.span_pool(POOL_DIALOGS[:1] + POOL_DIALOGS[2:3])
  assert [len(i.candidates) for i in temporal_tagger.weak_supervision_items("a", POOL_DIALOGS[0][1],
                                                                            pool=small)] == [3, 3]


def test_weak_supervision_splits_give_every_span_an_item():
  splits = temporal_tagger.weak_supervision_splits(POOL_DIALOGS, validation_fraction=0.0)
  spans = sum(len(temporal_tagger.tag(turn)) for _, dialog in POOL_DIALOGS for turn in dialog)
  assert splits["validation"] == [] and len(splits["train"]) == spans == 10
  assert all(len(item.candidates) == 4 for item in splits["train"])


def test_spans_tagged_elsewhere_make_the_items_tagging_here_would():
  dialogs = [(i, c, temporal_tagger.dialog_spans(c)) for i, c in POOL_DIALOGS]
  assert (temporal_tagger.weak_supervision_splits(dialogs, validation_fraction=0.0)
          == temporal_tagger.weak_supervision_splits(POOL_DIALOGS, validation_fraction=0.0))
  # A span given elsewhere than its text is refused: it would mask the wrong characters.
  conversation = POOL_DIALOGS[0][1]
  moved = [(1, temporal_tagger.TemporalSpan(0, 3, "Two", "duration"))]
  with pytest.raises(ValueError, match="span 'Two' is not at turn 1, characters 0:3"):
    temporal_tagger.weak_supervision_items("a", conversation, spans=moved)


def test_read_dialogs_names_the_bad_field(tmp_path):
  path = tmp_path / "dialogs.jsonl"
  path.write_text(json.dumps({"id": "a", "conversation": ["hi", "wait 2 days"]}) + "\n" +
                  json.dumps({"id": "b", "conversation": ["hi", 3]}) + "\n")
  with pytest.raises(records.RecordError, match=r"dialogs.jsonl:2: field 'conversation\[1\]'"):
    temporal_tagger.read_dialogs(path)
  dialogs, report = temporal_tagger.read_dialogs(path, skip_invalid=True)
  assert dialogs == [("a", ("hi", "wait 2 days"))] and report.skipped == 1
