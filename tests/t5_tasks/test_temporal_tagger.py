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
    ("Meet me at 7:30 pm tomorrow.", [("7:30 pm", "time")]),
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


def test_weak_supervision_skips_dialogs_without_a_negative():
  assert temporal_tagger.weak_supervision_items("d", ["Wait two days.", "Two days?"]) == []


def test_read_dialogs_names_the_bad_field(tmp_path):
  path = tmp_path / "dialogs.jsonl"
  path.write_text(json.dumps({"id": "a", "conversation": ["hi", "wait 2 days"]}) + "\n" +
                  json.dumps({"id": "b", "conversation": ["hi", 3]}) + "\n")
  with pytest.raises(records.RecordError, match=r"dialogs.jsonl:2: field 'conversation\[1\]'"):
    temporal_tagger.read_dialogs(path)
  dialogs, report = temporal_tagger.read_dialogs(path, skip_invalid=True)
  assert dialogs == [("a", ("hi", "wait 2 days"))] and report.skipped == 1
