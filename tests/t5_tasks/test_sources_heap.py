"""HEAP comparisons: counts against the recipe recomputed here from the raw files."""
import collections
import csv
import itertools
import json
import pathlib
from fractions import Fraction

import pytest

from t5_tasks.sources import heap

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"
QUICK_TELLMEWHY = DATA / "tellmewhy_test_caters_sample.csv"


def _ranked_pairs(groups):
  """groups: {context: [(text, exact score)]} -> number of strictly ordered pairs of different texts."""
  return sum(1 for outputs in groups.values() for (a, sa), (b, sb) in itertools.combinations(outputs, 2)
             if sa != sb and a != b)


def _tellmewhy_expected(path):
  with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  validity, grammar, questions = (collections.defaultdict(list) for _ in range(3))
  for r in rows:
    key = (r["narrative"], r["question"])
    validity[key].append((r["answer"], Fraction(sum(json.loads(r["val_ann"])), len(json.loads(r["val_ann"])))))
    grammar[key].append((r["answer"], Fraction(sum(json.loads(r["gram_ann"])), len(json.loads(r["gram_ann"])))))
    questions[r["narrative"]].append((r["question"], r["is_ques_answerable"] == "Answerable"))
  answerable = {n: list(dict(qs).items()) for n, qs in questions.items()}  # one entry per question
  return {"answer_validity": _ranked_pairs(validity), "answer_grammaticality": _ranked_pairs(grammar),
          "question_answerability": _ranked_pairs(answerable)}


def _check(comparisons, task):
  assert all(c.task == task and c.good_score > c.bad_score and c.good != c.bad for c in comparisons)
  assert len({c.id for c in comparisons}) == len(comparisons)
  assert all(c.instruction == heap.HEAP_CRITERIA[task].instruction for c in comparisons)


@pytest.mark.parametrize("task", ["answer_validity", "answer_grammaticality", "question_answerability"])
def test_tellmewhy_quickstart(task):
  comparisons, report = heap.read_heap_comparisons(task, QUICK_TELLMEWHY)
  assert len(comparisons) == _tellmewhy_expected(QUICK_TELLMEWHY)[task] > 0
  assert report.skipped == 0
  _check(comparisons, task)


def test_advice_quickstart_good_side_follows_the_majority():
  path = DATA / "turingadvice_eval.jsonl"
  lines = [json.loads(line) for line in path.read_text().splitlines()]
  comparisons, _ = heap.read_heap_comparisons("advice_helpfulness", path)
  expected = sorted((r["model_advice"][s] if v["is_preferred"] else r["best_advice"]["bestadvice_body"])
                    for r in lines for s, v in r["turk_ratings"].items())
  assert sorted(c.good for c in comparisons) == expected
  _check(comparisons, "advice_helpfulness")


def test_attenuator_prefers_the_lower_human_label(tmp_path):
  rows = [{"premise": "P", "hypothesis": "H", "update": u, "model": m, "dataset": "snli", "pred_label": label,
           "human_label": h, "human_irrelevant": [0, 0, 0], "human_nonsensical": [0, 0, 0]}
          for u, m, label, h in [("weak", "a", "attenuator", [-1, -1, 0]), ("strong", "b", "attenuator", [-2, -2, -2]),
                                 ("tie", "c", "attenuator", [-1, 0, -1]), ("other", "a", "intensifier", [2, 2, 2])]]
  path = tmp_path / "def_inf.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  comparisons, _ = heap.read_heap_comparisons("update_attenuator", path)
  # strong (-2) beats weak and tie (both -2/3); weak and tie are tied: no comparison between them.
  assert sorted((c.good, c.bad) for c in comparisons) == [("strong", "tie"), ("strong", "weak")]
  assert comparisons[0].context == (("Premise", "P"), ("Hypothesis", "H"))
  assert heap.read_heap_comparisons("update_intensifier", path)[0] == []


def test_unknown_criterion_is_named():
  with pytest.raises(ValueError, match="unknown HEAP criterion 'helpfulness'"):
    heap.read_heap_comparisons("helpfulness", QUICK_TELLMEWHY)


def test_every_criterion_has_a_source_and_instruction():
  assert len(heap.HEAP_CRITERIA) == 12
  for name, criterion in heap.HEAP_CRITERIA.items():
    assert criterion.source in heap.SOURCES and criterion.instruction.endswith("?"), name
  assert {n for n, c in heap.HEAP_CRITERIA.items() if not c.needs_context} == {
      "answer_grammaticality", "commonsense_plausibility"}


# --- real files ---------------------------------------------------------------------------------


def test_tellmewhy_real(shared_data):
  path = shared_data / "heap" / "tellmewhy" / "test_caters_subset.csv"
  expected = _tellmewhy_expected(path)
  for task, count in expected.items():
    comparisons, report = heap.read_heap_comparisons(task, path)
    assert report.read == 1392 and len(comparisons) == count, task
    _check(comparisons, task)


def test_advice_real(shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  lines = [json.loads(line) for line in path.read_text().splitlines()]
  pairs = [(r["model_advice"][s], r["best_advice"]["bestadvice_body"], v["is_preferred"])
           for r in lines for s, v in r["turk_ratings"].items()]
  comparisons, _ = heap.read_heap_comparisons("advice_helpfulness", path)
  assert len(comparisons) == sum(system != best for system, best, _ in pairs)
  assert sum(c.good_score > 0 for c in comparisons) == sum(p for s, b, p in pairs if s != b)
  _check(comparisons, "advice_helpfulness")


@pytest.mark.parametrize("task,label,sign", [("update_attenuator", "attenuator", -1),
                                             ("update_intensifier", "intensifier", 1)])
def test_defeasible_real(shared_data, task, label, sign):
  path = shared_data / "heap" / "defeasible_inference" / "def_inf_eval_results.jsonl"
  groups = collections.defaultdict(list)
  with open(path, encoding="utf-8") as f:
    for line in f:
      r = json.loads(line)
      if r["pred_label"] == label:
        groups[(r["premise"], r["hypothesis"])].append((r["update"], sign * Fraction(sum(r["human_label"]), 3)))
  comparisons, report = heap.read_heap_comparisons(task, path)
  assert report.read == 7176
  assert len(comparisons) == _ranked_pairs(groups)
  _check(comparisons, task)


def test_commongen_real(shared_data):
  folder = shared_data / "heap" / "commongen"
  votes = collections.defaultdict(list)
  for sheet in sorted(folder.glob("sheet*.csv")):
    with open(sheet, newline="", encoding="utf-8") as f:
      block = -1
      for cells in csv.reader(f):
        if cells[0].startswith("Concept set:"):
          block += 1
        elif block >= 0 and cells[0] and not cells[0].startswith("Reference:") and cells[2].strip():
          votes[(block, cells[0].strip(), cells[1].strip())].append(Fraction(cells[2]))
  expected = sum(1 for (_, s1, s2), v in votes.items() if sum(v) != 0 and s1 != s2)
  comparisons, report = heap.read_heap_comparisons("commonsense_plausibility", folder)
  assert report.read == 6000  # 4 sheets x 100 concept sets x 15 pairs
  assert len(comparisons) == expected
  _check(comparisons, "commonsense_plausibility")


@pytest.mark.parametrize("criterion", ["counterfactual", "ending", "plot", "premise", "second"])
def test_story_rewriting_real(shared_data, criterion):
  path = shared_data / "heap" / "story_rewriting" / "test_comparison_eval.csv"
  votes = collections.defaultdict(list)
  with open(path, newline="", encoding="utf-8") as f:
    for r in csv.DictReader(f):
      a, b = r["Input.YY1"], r["Input.YY2"]
      answer = r[f"Answer.{criterion}"]
      if answer:
        vote = {"A": 1, "B": -1}.get(answer, 0) * (1 if a <= b else -1)
        votes[(r["Input.STORY"], min(a, b), max(a, b))].append(vote)
  expected = sum(1 for (_, a, b), v in votes.items() if sum(v) != 0 and a != b)
  comparisons, report = heap.read_heap_comparisons(f"story_{criterion}", path)
  assert report.read == 1400
  assert len(comparisons) == expected
  _check(comparisons, f"story_{criterion}")
