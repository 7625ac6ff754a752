"""Readers on the quickstart files and on the real releases: counts against an independent parse."""
import json
import pathlib

import pytest

from t5_tasks.sources import asq
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"


def _json_lines(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def test_timedial_quickstart_matches_raw_items():
  raw = json.loads((DATA / "timedial_test.json").read_text())
  items, report = timedial.read_timedial(DATA / "timedial_test.json")
  assert (len(items), report.read, report.skipped) == (len(raw), len(raw), 0)
  for item, r in zip(items, raw):
    assert item.correct == (r["correct1"], r["correct2"])
    assert item.incorrect_rules == (r["incorrect1_rule"], r["incorrect2_rule"])
    assert "<MASK>" in r["conversation"][item.mask_turn]
    assert sum("<MASK>" in turn for turn in r["conversation"]) == 1


@pytest.mark.parametrize("name", ["asq_train.json", "asq_test.json"])
def test_asq_quickstart_matches_raw_items(name):
  raw = json.loads((DATA / name).read_text())
  items, _ = asq.read_asq(DATA / name)
  assert [i.id for i in items] == [r["id"] for r in raw]
  assert [i.questions[i.label] for i in items] == [(r["qn1"], r["qn2"])[r["label"]] for r in raw]


def test_asq_quickstart_annotations_refer_to_test_items():
  test_ids = {r["id"] for r in json.loads((DATA / "asq_test.json").read_text())}
  for name in ("asq_human_annotation_first.json", "asq_human_annotation_second.json"):
    raw = json.loads((DATA / name).read_text())
    annotations, _ = asq.read_asq_annotations(DATA / name)
    assert len(annotations) == len(raw) and {a.id for a in annotations} <= test_ids
    assert [a.paired_qn_type for a in annotations] == [int(r["paired_qn_type"]) for r in raw]


def test_reddit_advice_quickstart_has_every_split_in_date_order():
  raw = _json_lines(DATA / "reddit_advice_2019.jsonl")
  situations, _ = reddit_advice.read_reddit_advice(DATA / "reddit_advice_2019.jsonl")
  assert len(situations) == len(raw)
  by_split = {split: [s.created_utc for s in situations if s.split == split] for split in reddit_advice.SPLITS}
  assert all(by_split.values())
  assert max(by_split["train"]) < min(by_split["val"]) <= max(by_split["val"]) < min(by_split["test"])
  assert sum(len(s.good_comments) for s in situations) == sum(len(r["good_comments"]) for r in raw)


def test_turingadvice_quickstart_matches_raw_ratings():
  raw = _json_lines(DATA / "turingadvice_eval.jsonl")
  situations, _ = turingadvice.read_turingadvice_eval(DATA / "turingadvice_eval.jsonl")
  assert len(situations) == len(raw)
  preferred = sum(r["is_preferred"] for line in raw for r in line["turk_ratings"].values())
  assert sum(r.is_preferred for s in situations for r in s.ratings.values()) == preferred
  reddit_ids = {r["id"] for r in _json_lines(DATA / "reddit_advice_2019.jsonl") if r["split"] != "train"}
  assert {s.id for s in situations} <= reddit_ids  # evaluated on held-out situations only


def test_summarize_quickstart_matches_raw_choices():
  raw = _json_lines(DATA / "summarize_comparisons.jsonl")
  comparisons, _ = summarize_feedback.read_comparisons(DATA / "summarize_comparisons.jsonl")
  assert [c.summaries[c.choice] for c in comparisons] == [r["summaries"][r["choice"]]["text"] for r in raw]
  assert {c.split for c in comparisons} == {"train", "valid1", "valid2"}


def test_preference_score_is_the_mean_signed_intensity():
  d = lambda q1: turingadvice.Diagnostic(q1, "helpful", "meaning")
  assert turingadvice.TurkRating(True, 1.0, (d(2), d(1))).preference_score() == pytest.approx((1.0 + 0.5) / 2)
  assert turingadvice.TurkRating(False, 0.0, (d(1), d(1), d(2))).preference_score() == pytest.approx(-2.0 / 3)


@pytest.mark.parametrize("true_type,paired_type,groups,narrowest", [
    (1, 3, ("C+E",), "C+E"),
    (2, 3, ("C+E",), "C+E"),
    (1, 2, ("C+{C,I}", "C+C", "L+{U,I}"), "L+{U,I}"),
    (1, 4, ("C+{C,I}", "L+{U,I}"), "L+{U,I}"),
    (1, 1, ("C+{C,I}", "C+C"), "C+C"),
    (2, 4, ("C+{C,I}",), "C+{C,I}"),
    (1, 0, (), None),
    (3, 1, (), None),
])
def test_pair_types(true_type, paired_type, groups, narrowest):
  assert asq.pair_groups(true_type, paired_type) == groups
  assert asq.pair_type(true_type, paired_type) == narrowest


def test_pair_types_by_id_takes_the_first_round_that_annotated_the_item():
  """Even when it typed the pair in no group ("b"): the item's pair groups are that round's too,
  so a later round must not move it into a row (8 real items did)."""
  first = [asq.AsqAnnotation("a", 0, 0, 1, 3), asq.AsqAnnotation("b", 1, 1, 0, 1)]
  second = [asq.AsqAnnotation("a", 0, 0, 1, 1), asq.AsqAnnotation("b", 1, 1, 1, 1), asq.AsqAnnotation("c", 1, 1, 1, 1)]
  assert asq.pair_types_by_id(first, second) == {"a": "C+E", "b": "", "c": "C+C"}


def test_asq_real_files(shared_data):
  for name, expected in (("asq_test_first1000.json", 1000), ("asq_annotation.json", 500)):
    raw = json.loads((shared_data / "asq" / name).read_text())
    items, report = asq.read_asq(shared_data / "asq" / name)
    assert len(raw) == len(items) == report.read == expected
    assert [i.label for i in items] == [r["label"] for r in raw]
  annotated = {i.id for i in asq.read_asq(shared_data / "asq" / "asq_annotation.json")[0]}
  for name, expected in (("annotation_first.json", 200), ("annotation_second.json", 75)):
    raw = json.loads((shared_data / "asq" / name).read_text())
    annotations, _ = asq.read_asq_annotations(shared_data / "asq" / name)
    assert len(raw) == len(annotations) == expected
    assert {a.id for a in annotations} <= annotated
    assert [a.true_qn_type for a in annotations] == [int(r["true_qn_type"]) for r in raw]


def test_turingadvice_real_file(shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  raw = _json_lines(path)
  situations, report = turingadvice.read_turingadvice_eval(path)
  assert len(raw) == len(situations) == report.read == 100
  assert all(len(s.model_advice) == len(s.ratings) == 6 for s in situations)
  assert sum(len(s.ratings) for s in situations) == sum(len(r["turk_ratings"]) for r in raw) == 600
  assert [s.best_advice for s in situations] == [r["best_advice"]["bestadvice_body"] for r in raw]
  preferred = sum(v["is_preferred"] for r in raw for v in r["turk_ratings"].values())
  assert sum(r.is_preferred for s in situations for r in s.ratings.values()) == preferred
