"""HEAP comparisons: counts against the recipe recomputed here from the raw files."""
import collections
import csv
import dataclasses
import itertools
import json
import pathlib
import re
import statistics
import types
from fractions import Fraction

import gin
import pytest

from t5_tasks import heap

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"
QUICK_TELLMEWHY = DATA / "tellmewhy_test_caters_sample.csv"
STORY = {"counterfactual": "SRC", "ending": "SRE", "plot": "SRPl", "premise": "SRPr", "second": "SRS"}


def _ranked_pairs(groups):
  """groups: {context: [(text, exact score)]} -> number of strictly ordered pairs (identical texts too)."""
  return sum(1 for outputs in groups.values() for (_, sa), (_, sb) in itertools.combinations(outputs, 2)
             if sa != sb)


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
  return {"AV": _ranked_pairs(validity), "AG": _ranked_pairs(grammar),
          "QA": _ranked_pairs(answerable)}


def _check(comparisons, task, ties=False):
  # Defeasible inference keeps tied pairs (Table 1's counts), as story rewriting does with
  # `keep_ties`: good's score is then equal, not higher.
  assert all(c.task == task and (c.good_score >= c.bad_score if ties or task in ("DIA", "DII") else
                                 c.good_score > c.bad_score) for c in comparisons)
  assert len({c.id for c in comparisons}) == len(comparisons)
  assert all(c.id.startswith(f"{task}-") for c in comparisons)


@pytest.mark.parametrize("task", ["AV", "AG", "QA"])
def test_tellmewhy_quickstart(task):
  comparisons, report = heap.read_heap_comparisons(task, QUICK_TELLMEWHY)
  assert len(comparisons) == _tellmewhy_expected(QUICK_TELLMEWHY)[task] > 0
  assert report.skipped == 0
  _check(comparisons, task)


@pytest.fixture
def gin_bindings():
  """Parses gin bindings for one test and clears them after it."""
  gin.clear_config()
  yield gin.parse_config
  gin.clear_config()


def _write_tellmewhy(path, rows):
  """rows: (narrative, question, answerable); each row one answer with the same ratings."""
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["narrative", "question", "answer", "is_ques_answerable", "val_ann", "gram_ann"])
    for n, (narrative, question, answerable) in enumerate(rows):
      writer.writerow([narrative, question, f"answer {n}", "Answerable" if answerable else "Not Answerable",
                       "[1, 1, 1]", "[2, 2, 2]"])


def test_qa_one_output_per_question_or_the_papers_row_pairs(tmp_path, gin_bindings):
  """Three questions of one narrative (q1 and q3 answerable, q2 not), each on 3 answer rows: the
  project compares questions (2 comparisons); HEAP's construction compares rows, each question
  pair 3 x 3 times (18); a narrative of one question gives none either way."""
  path = tmp_path / "tellmewhy.csv"
  _write_tellmewhy(path, [("N", q, a) for q, a in (("q1", True), ("q2", False), ("q3", True))] * 3
                   + [("M", "m1", True)] * 3)
  answers, _ = heap.read_tellmewhy(path)
  assert [(c.good, c.bad) for c in heap.tellmewhy_comparisons("QA", answers)] == [("q1", "q2"), ("q3", "q2")]
  repeated = heap.tellmewhy_comparisons("QA", answers, qa_repeat_per_answer_row=True)
  assert collections.Counter((c.good, c.bad) for c in repeated) == {("q1", "q2"): 9, ("q3", "q2"): 9}
  assert all(c.context == (("narrative", "N"),) and (c.good_score, c.bad_score) == (1.0, 0.0) for c in repeated)
  gin_bindings("t5_tasks.heap.tellmewhy_comparisons.qa_repeat_per_answer_row = True")
  assert len(heap.read_heap_comparisons("QA", path)[0]) == 18
  assert len(heap.read_heap_comparisons("AV", path)[0]) == 0  # the option is QA's: AV's answers tie


def _write_story(path, judgments):
  """judgments: (rewrite shown as A, rewrite shown as B, answer on every criterion), one story."""
  columns = ["Input.STORY", "Input.X1", "Input.X2", "Input.Y", "Input.XX2", "Input.YY1", "Input.YY2",
             "Input.YY1_MODEL", "Input.YY2_MODEL"] + [f"Answer.{c}" for c in STORY]
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(columns)
    for a, b, answer in judgments:
      writer.writerow(["s1", "Premise.", "Second.", "Ending.", "Counterfactual.", a, b, "m1", "m2"] + [answer] * 5)


def test_story_ties_dropped_or_kept(tmp_path, gin_bindings):
  """r1 over r2 by both workers (shown either way round); r1 and r3 judged S and IR, r2 and r3
  one A each way (the votes cancel): ties, dropped by default, kept with `keep_ties` (the
  rewrite first shown as A first, scores 0); r1 and r4's only judgment is blank: none either way."""
  path = tmp_path / "story.csv"
  _write_story(path, [("r1", "r2", "A"), ("r2", "r1", "B"), ("r3", "r1", "S"), ("r1", "r3", "IR"),
                      ("r2", "r3", "A"), ("r3", "r2", "A"), ("r1", "r4", "")])
  judgments, _ = heap.read_story_rewriting(path)
  for task in STORY.values():
    dropped = heap.story_comparisons(task, judgments)
    assert [(c.good, c.bad, c.good_score, c.bad_score) for c in dropped] == [("r1", "r2", 1.0, -1.0)]
    kept = heap.story_comparisons(task, judgments, keep_ties=True)
    assert [(c.good, c.bad, c.good_score) for c in kept] == [("r1", "r2", 1.0), ("r3", "r1", 0.0), ("r2", "r3", 0.0)]
    _check(kept, task, ties=True)
  gin_bindings("t5_tasks.heap.story_comparisons.keep_ties = True")
  assert len(heap.read_heap_comparisons("SRC", path)[0]) == 3


def test_advice_quickstart_good_side_follows_the_majority():
  path = DATA / "turingadvice_eval.jsonl"
  lines = [json.loads(line) for line in path.read_text().splitlines()]
  comparisons, _ = heap.read_heap_comparisons("AH", path)
  expected = sorted((r["model_advice"][s] if v["is_preferred"] else r["best_advice"]["bestadvice_body"])
                    for r in lines for s, v in r["turk_ratings"].items())
  assert sorted(c.good for c in comparisons) == expected
  _check(comparisons, "AH")


def test_attenuator_prefers_the_lower_human_label(tmp_path):
  rows = [{"premise": "P", "hypothesis": "H", "update": u, "model": m, "dataset": "snli", "pred_label": label,
           "human_label": h, "human_irrelevant": [0, 0, 0], "human_nonsensical": [0, 0, 0]}
          for u, m, label, h in [("weak", "a", "attenuator", [-1, -1, 0]), ("strong", "b", "attenuator", [-2, -2, -2]),
                                 ("tie", "c", "attenuator", [-1, 0, -1]), ("up", "a", "intensifier", [2, 2, 2]),
                                 ("flat", "b", "intensifier", [0, 0, 0])]]
  path = tmp_path / "def_inf.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  comparisons, _ = heap.read_heap_comparisons("DIA", path)
  # Each update type's group gives all its pairs: strong (-2) beats weak and tie (both -2/3); weak
  # and tie are tied and kept in reading order; the intensifier group ranks too (flat weakens more).
  assert [(c.good, c.bad) for c in comparisons] == [("strong", "weak"), ("weak", "tie"), ("strong", "tie"),
                                                    ("flat", "up")]
  assert comparisons[1].good_score == comparisons[1].bad_score == 2 / 3  # the sign makes weakening higher
  assert comparisons[0].context == (("premise", "P"), ("hypothesis", "H"))
  intensifier = heap.read_heap_comparisons("DII", path)[0]
  assert [(c.good, c.bad) for c in intensifier] == [("weak", "strong"), ("weak", "tie"), ("tie", "strong"),
                                                    ("up", "flat")]


def test_unknown_criterion_is_named():
  with pytest.raises(ValueError, match="unknown HEAP criterion 'helpfulness'; known: AH, AG"):
    heap.read_heap_comparisons("helpfulness", QUICK_TELLMEWHY)


def test_the_22_criteria_are_the_papers():
  # Table 2's rows, in its order; label input from Table 4; Spearman rows from Table 2.
  assert list(heap.HEAP_CRITERIA) == ["AH", "AG", "AV", "QA", "HS", "CR", "BCN", "CCN", "CNG", "CNSp", "CNSu",
                                      "CNI", "CNO", "CNSt", "HSO", "SRC", "SRE", "SRPl", "SRPr", "SRS", "DIA", "DII"]
  assert all(c.source in heap.SOURCES and c.abbreviation == a for a, c in heap.HEAP_CRITERIA.items())
  assert {a for a, c in heap.HEAP_CRITERIA.items() if c.label_input} == {
      "AG", "AV", "BCN", "CCN", "CNG", "CNSu", "CNO", "HSO", "SRC", "SRE", "SRPl"}
  assert {a for a, c in heap.HEAP_CRITERIA.items() if c.ranked} == {
      "AG", "AV", "CNG", "CNSp", "CNSu", "CNI", "CNO", "CNSt", "HSO", "DIA", "DII"}


def _paper(shared_data):
  path = shared_data.parent / "papers" / "heap.txt"
  if not path.is_file():
    pytest.skip(f"the paper's text is not at {path}")
  return path.read_text(encoding="utf-8")


def test_table_4_as_the_paper_prints_it(shared_data):
  """Table 4's rows, read from the paper's text (its row names are OCR-garbled: ĤS, SRPI, SRP1;
  rows come in Table 2's order), against heap.TABLE_4 and each criterion's label input."""
  text = _paper(shared_data)
  table = text[text.index("Task\tTruncate Right\tLabel Input"):text.index("Table 4: Hyper-paramaters")]
  single, cross = table.split("Overall")  # the multi-task row parts the single- and cross-task rows
  row = re.compile(r"^\S+\t\S+\t(\S+)\t(\d+)\t([\d.e-]+)\t(\d+)$", re.M)
  for setup, part in (("single_task", single), ("cross_task", cross)):
    rows = row.findall(part)
    assert len(rows) == 22, setup
    for abbreviation, (label, accumulation, rate, epochs) in zip(heap.HEAP_CRITERIA, rows):
      assert heap.TABLE_4[setup][abbreviation] == heap.Hyperparameters(int(accumulation), float(rate), int(epochs))
      assert heap.HEAP_CRITERIA[abbreviation].label_input == (label in ("\\checkmark", "√")), (setup, abbreviation)
  overall = re.search(r"Overall\t-\t-\t(\d+)\t([\d.e-]+)\t(\d+)", table).groups()
  assert heap.TABLE_4["multitask"] == heap.Hyperparameters(int(overall[0]), float(overall[1]), int(overall[2]))


def test_clusters_are_table_3_and_section_6():
  table_3 = """
      Cluster 1: AH AV QA HS CR BCN SRC DIA DII
      Cluster 2: AG CNG CNSp CNSu CNI CNO CNSt HSO SRPl SRPr
      Cluster 3: BCN CCN CNG CNSp CNSu CNI CNO CNSt HSO"""
  rows = [line.split(":")[1].split() for line in table_3.strip().splitlines()]
  assert [list(heap.CLUSTERS[c]) for c in ("context", "no_context", "hate_speech")] == rows
  assert heap.CLUSTERS["tellmewhy"] == ("AG", "AV", "QA")
  assert heap.CLUSTERS["defeasible_inference"] == ("DIA", "DII")
  assert heap.CLUSTERS["story_rewriting"] == ("SRC", "SRE", "SRPl", "SRPr", "SRS")
  assert {heap.HEAP_CRITERIA[a].source for a in heap.CLUSTERS["story_rewriting"]} == {"story_rewriting"}


def _table_5_rows(shared_data) -> dict[str, list[str]]:
  """Table 5's text rows: {first cell (one or more abbreviations, or ''): [instruction, example]},
  the extraction's line-break hyphen ("deter- mine") undone."""
  text = _paper(shared_data)
  table = text[text.index("Task\tInstruction\tExample"):text.index("Table 5: Natural language")]
  rows = [line.replace("deter- mine", "determine").split("\t") for line in table.splitlines()[1:] if line]
  return {cells[0]: [cell.strip() for cell in cells[1:3]] for cells in rows}


def _example(cell: str) -> str:
  """An example cell as printed, less the closing tags the extraction adds for each `<sep>`."""
  return cell.replace("</sep>", "").strip()


def test_instructions_are_table_5s(shared_data):
  """Each instruction is Table 5's, read from the paper's text: a row's instruction cell is its
  criteria's instructions in order; rows the extraction splits or garbles are pieced together."""
  rows = _table_5_rows(shared_data)
  instruction = {a: c.instruction for a, c in heap.HEAP_CRITERIA.items()}
  pieced = {"CCN", "CNG", "CNSp", "CNSu", "SRPl", "SRS"}
  for first, (cell, _) in rows.items():
    names = [a for a in first.split() if a in instruction]
    if names and not pieced & set(names):
      assert cell == " ".join(instruction[a] for a in names), first
  assert {a for first in rows for a in first.split()} >= set(instruction) - pieced
  # SRPl's cell breaks after "Determine how"; the SRS row's cell goes on with the rest of it.
  srpl_tail, srs = rows["SRS"][0].split(". ", 1)
  assert rows["SRPl"][0].endswith(" Determine how") and srpl_tail.startswith("Determine how ")
  assert instruction["SRPl"] == rows["SRPl"][0][:-len("Determine how")] + srpl_tail + "."
  assert instruction["SRS"] == srs
  # The CNSp row's cell holds CNG's end (its head is lost) and CNSp's start; CNSp ends in the CNSu row.
  cng_end, cnsp_start = rows["CNSp"][0].split(" Determine how specific", 1)
  cnsp_end, cnsu = rows["CNSu"][0].split(". ", 1)
  assert instruction["CNSp"] == f"Determine how specific{cnsp_start} {cnsp_end}."
  assert instruction["CNSu"] == cnsu
  # CNG: the cell opens with the end of CCN's ("response to the hate speech,"), then CNG's from "the
  # target" on, with a sentence break before "Determine the grammaticality": phrased "You are given
  # ..." as Table 5's other criteria with a break are; that lost head is written out here.
  assert cng_end.startswith("response to the hate speech, the target")
  assert instruction["CNG"] == "You are given a hate speech, " + cng_end.split(", ", 1)[1]
  # CCN's cell is garbled ("response to the hate speech, and a green, and a counter narrative in a
  # real case scenario."): Table 5's CCN instruction, written out; its end is what the cell keeps.
  assert instruction["CCN"] == ("Given a hate speech, the target of the hate speech, and a counter narrative "
                                "in response to the hate speech, determine how appropriate the counter "
                                "narrative is in a real case scenario.")
  assert rows[""][0].endswith(" in a real case scenario.")


def test_instructions_file_holds_table_5s_phrasing_but_marks_two_others(shared_data):
  """instructions.json's `paper_table5` marker points at Table 5's phrasing except for CNG and SRPl,
  which heap.TABLE_5_TEMPLATE_NOT_MARKED names with the phrasing Table 5 prints."""
  path = shared_data / "heap" / "instructions.json"
  templates, _ = heap.read_instruction_templates(path)
  marker = {a: e["paper_table5"] for a, e in json.loads(path.read_text())["criteria"].items()}
  disagree = {a for a, c in heap.HEAP_CRITERIA.items() if c.instruction != templates[a][marker[a]]}
  assert disagree == set(heap.TABLE_5_TEMPLATE_NOT_MARKED) == {"CNG", "SRPl"}
  for abbreviation, index in heap.TABLE_5_TEMPLATE_NOT_MARKED.items():
    released = templates[abbreviation][index]
    if abbreviation == "SRPl":  # the nearest phrasing has "the plot in" that Table 5 does not print
      released = released.replace("the plot in the rewritten ending", "the rewritten ending")
    assert heap.HEAP_CRITERIA[abbreviation].instruction == released, abbreviation


def test_instruction_file_errors_name_the_field(tmp_path):
  path = tmp_path / "instructions.json"
  criteria = {a: {"templates": ["Judge it."], "paper_table5": 0} for a in heap.HEAP_CRITERIA}
  criteria["CNO"]["paper_table5"] = 3
  path.write_text(json.dumps({"criteria": criteria}))
  with pytest.raises(heap.records.RecordError, match=r"instructions.json: field 'criteria.CNO.paper_table5'"):
    heap.read_instruction_templates(path)
  del criteria["HS"]
  path.write_text(json.dumps({"criteria": criteria}))
  with pytest.raises(heap.records.RecordError, match=r"field 'criteria.HS': missing"):
    heap.read_instruction_templates(path)


def test_splits_paper_and_by_context():
  comparisons, _ = heap.read_heap_comparisons("AV", QUICK_TELLMEWHY)
  paper = heap.split_comparisons(comparisons, "paper", seed=0)
  counts = collections.Counter(paper.values())
  n = len(comparisons)
  assert counts["validation"] == counts["test"] == max(1, round(0.1 * n)) and sum(counts.values()) == n
  assert paper == heap.split_comparisons(comparisons, "paper", seed=0)
  assert paper != heap.split_comparisons(comparisons, "paper", seed=1)
  by_context = heap.split_comparisons(comparisons, "by_context")
  for context in {c.context for c in comparisons}:
    assert len({by_context[c.id] for c in comparisons if c.context == context}) == 1
  with pytest.raises(ValueError, match="HEAP split method 'random'"):
    heap.split_comparisons(comparisons, "random")


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
  comparisons, _ = heap.read_heap_comparisons("AH", path)
  assert len(comparisons) == sum(system != best for system, best, _ in pairs)
  assert sum(c.good_score > 0 for c in comparisons) == sum(p for s, b, p in pairs if s != b)
  _check(comparisons, "AH")


def _defeasible_expected(path, sign):
  """[(good, bad)]: every pair of each (premise, hypothesis, pred_label) group, the update with
  sign x mean human label higher first (a tie: in reading order)."""
  groups = collections.defaultdict(list)
  with open(path, encoding="utf-8") as f:
    for line in f:
      r = json.loads(line)
      groups[(r["premise"], r["hypothesis"], r["pred_label"])].append(
          (r["update"], sign * Fraction(sum(r["human_label"]), len(r["human_label"]))))
  return [(a, b) if sa >= sb else (b, a) for outputs in groups.values()
          for (a, sa), (b, sb) in itertools.combinations(outputs, 2)]


@pytest.mark.parametrize("task,sign", [("DIA", -1), ("DII", 1)])
def test_defeasible_real(shared_data, task, sign):
  path = shared_data / "heap" / "defeasible_inference" / "def_inf_eval_results.jsonl"
  comparisons, report = heap.read_heap_comparisons(task, path)
  assert report.read == 7176
  assert [(c.good, c.bad) for c in comparisons] == _defeasible_expected(path, sign)
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
  expected = sum(1 for v in votes.values() if sum(v) != 0)
  comparisons, report = heap.read_heap_comparisons("CR", folder)
  assert report.read == 6000  # 4 sheets x 100 concept sets x 15 pairs
  assert len(comparisons) == expected
  _check(comparisons, "CR")


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
  expected = sum(1 for v in votes.values() if sum(v) != 0)
  comparisons, report = heap.read_heap_comparisons(STORY[criterion], path)
  assert report.read == 1400
  assert len(comparisons) == expected
  _check(comparisons, STORY[criterion])
  judgments, _ = heap.read_story_rewriting(path)
  kept = heap.story_comparisons(STORY[criterion], judgments, keep_ties=True)
  assert len(kept) == len(votes)  # every pair someone answered
  _check(kept, STORY[criterion], ties=True)


# --- the sources HEAP adds beyond the five above: recounted from the raw files -----------------


def _chasm_expected(paths, task):
  """HEAP's rule for CHASM, recomputed: integer mean of each rating list; strictly better pairs
  (identical texts too); CNI/CNO/CNSt within a post, HSO across every post of the collection."""
  key = {"CNI": "info", "CNO": "off", "CNSt": "stance"}.get(task)
  groups = collections.defaultdict(list)
  for path in paths:
    for item_id, item in json.loads(path.read_text()).items():
      if task == "HSO":
        groups[()].append((item["post"]["text"], sum(item["post"]["score"]) // 9))
      else:
        for system in ("GPT-2", "GPT-Neo", "GPT-3"):
          groups[(path.name, item_id)].append((item[system]["text"], sum(item[system]["score"][key]) // 3))
  return _ranked_pairs(groups)


@pytest.mark.parametrize("task", ["CNI", "CNO", "CNSt", "HSO"])
def test_chasm_quickstart(task):
  comparisons, _ = heap.read_heap_comparisons(task, DATA / "heap_chasm.json")
  assert len(comparisons) == _chasm_expected([DATA / "heap_chasm.json"], task) > 0
  _check(comparisons, task)
  assert all(c.context == () for c in comparisons) == (task == "HSO")


@pytest.mark.parametrize("task", ["CNI", "CNO", "CNSt", "HSO"])
def test_chasm_real(shared_data, task):
  folder = shared_data / "heap" / "chasm"
  comparisons, report = heap.read_heap_comparisons(task, folder)
  assert report.read == 306 + 42
  assert len(comparisons) == _chasm_expected(sorted(folder.glob("*.json")), task)
  _check(comparisons, task)


_CN_SYSTEMS = {"GPT-2": 12, "T5": 17, "BART": 22, "DialoGPT": 27, "BERT": 32}  # first rating column
_CN_TEXTS = {"DialoGPT": 2, "BART": 3, "BERT": 4, "T5": 5, "GPT-2": 6}


@pytest.mark.parametrize("task,offset", [("CNSu", 0), ("CNSp", 1), ("CNG", 2), ("CCN", 3), ("BCN", 4)])
def test_counter_narratives_quickstart(task, offset):
  path = DATA / "heap_counter_narratives.csv"
  with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.reader(f))[1:]
  ratings = collections.defaultdict(list)  # (hate speech, target, text) -> every annotator's rating
  for r in rows:
    for system, column in _CN_SYSTEMS.items():
      ratings[(r[0], r[1], r[_CN_TEXTS[system]])].append(int(float(r[column + offset])))
  groups = collections.defaultdict(list)
  for (hate, target, text), values in ratings.items():
    groups[(hate, target)].append((text, sum(values) // len(values)))
  comparisons, _ = heap.read_heap_comparisons(task, path)
  assert len(comparisons) == _ranked_pairs(groups) > 0
  _check(comparisons, task)
  assert comparisons[0].context[1][0] == "target" and comparisons[0].output_label == "counter narrative"


def test_hellaswag_true_ending_over_each_other():
  path = DATA / "heap_hellaswag.jsonl"
  items = [json.loads(line) for line in path.read_text().splitlines()]
  comparisons, _ = heap.read_heap_comparisons("HS", path)
  expected = sorted((i["endings"][int(i["label"])], bad) for i in items for bad in i["endings"]
                    if bad != i["endings"][int(i["label"])])
  assert sorted((c.good, c.bad) for c in comparisons) == expected and len(expected) == 3 * len(items)
  _check(comparisons, "HS")


# --- the paper's own figures ---------------------------------------------------------------------


def _table_1(shared_data) -> dict[str, int]:
  """{abbreviation: #Examples} read from Table 1's text (rows list several criteria, then as many
  counts; the extraction spells SRPl "SRPI")."""
  text = _paper(shared_data)
  table = text[text.index("Task\t#Examples\tDataset"):text.index("Table 1: Human evaluation criteria")]
  counts = {}
  for line in table.splitlines()[1:]:
    if not line.strip():
      continue
    names, numbers, _ = line.split("\t")
    abbreviations = [{"SRPI": "SRPl"}.get(a, a) for a in re.findall(r"\[(\w+)\]", names)]
    values = [int(n.replace(",", "")) for n in numbers.split()]
    assert len(abbreviations) == len(values), line
    counts.update(zip(abbreviations, values))
  return counts


def test_table_1_counts_where_the_release_is_whole(shared_data):
  """CHASM's and defeasible inference's files are whole releases: recounted from the raw files by
  HEAP's rule (as the reader must count them), they give Table 1's numbers. §3's total of 229,104
  instances is Table 1's column summed, so DIA and DII count 7,176 each, not between them."""
  table_1 = _table_1(shared_data)
  assert set(table_1) == set(heap.HEAP_CRITERIA)
  section_3 = re.search(r"The dataset contains ([\d,]+) instances", _paper(shared_data)).group(1)
  assert sum(table_1.values()) == int(section_3.replace(",", ""))
  chasm = shared_data / "heap" / "chasm"
  defeasible = shared_data / "heap" / "defeasible_inference" / "def_inf_eval_results.jsonl"
  recounted = {task: _chasm_expected(sorted(chasm.glob("*.json")), task) for task in ("CNI", "CNO", "CNSt", "HSO")}
  recounted.update(DIA=len(_defeasible_expected(defeasible, -1)), DII=len(_defeasible_expected(defeasible, 1)))
  assert recounted == {task: table_1[task] for task in recounted}
  read = {task: len(heap.read_heap_comparisons(task, chasm if task in ("CNI", "CNO", "CNSt", "HSO")
                                              else defeasible)[0]) for task in recounted}
  assert read == recounted


def test_qa_213_by_question_or_table_1s_1917_by_answer_row(shared_data):
  """Table 1's QA 1,917 is 9 x the project's 213 on the same, whole file (464 questions x 3
  answer rows, 190 narratives): HEAP's construction repeats each question pair once per pair of
  the two questions' answer rows. With the option on, the file gives Table 1's count exactly."""
  path = shared_data / "heap" / "tellmewhy" / "test_caters_subset.csv"
  answers, report = heap.read_tellmewhy(path)
  assert report.read == 1392 and len({(a.narrative, a.question) for a in answers}) == 464
  assert len({a.narrative for a in answers}) == 190
  by_question = heap.tellmewhy_comparisons("QA", answers)
  by_row = heap.tellmewhy_comparisons("QA", answers, qa_repeat_per_answer_row=True)
  assert len(by_question) == 213 and len(by_row) == _table_1(shared_data)["QA"] == 1917 == 9 * 213
  key = lambda c: (c.context, c.good, c.bad)  # pylint: disable=unnecessary-lambda-assignment
  assert collections.Counter(map(key, by_row)) == {key(c): 9 for c in by_question}


def _tellmewhy_rule_counts(path) -> dict[str, tuple[int, int]]:
  """{rule: (AG, AV)}: pairs of answers to one question under each rule tried for Table 1's 598."""
  with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  questions = collections.defaultdict(list)
  for r in rows:
    questions[(r["narrative"], r["question"])].append(r)

  def count(reduce, strict=True, answerable_only=False):
    return tuple(sum(1 for qs in questions.values()
                     if not answerable_only or qs[0]["is_ques_answerable"] == "Answerable"
                     for a, b in itertools.combinations([reduce(json.loads(r[column])) for r in qs], 2)
                     if a != b or not strict)
                 for column in ("gram_ann", "val_ann"))
  mean = lambda v: Fraction(sum(v), len(v))  # pylint: disable=unnecessary-lambda-assignment
  return {"strict, mean (the project's)": count(mean), "ties kept": count(mean, strict=False),
          "strict, sum // count (HEAP's released loaders)": count(lambda v: sum(v) // len(v)),
          "strict, median": count(statistics.median), "strict, mode": count(statistics.mode),
          "strict, rounded mean": count(lambda v: round(mean(v))),
          "answerable questions, ties kept": count(mean, strict=False, answerable_only=True),
          "answerable questions, strict, mean": count(mean, answerable_only=True)}


def test_tellmewhy_no_tie_rule_gives_table_1s_598(shared_data):
  """AG and AV: Table 1 gives 598 each; no rule tried gives it on the (whole) released file, not
  even the reduction of HEAP's own released loaders (whose header also says 598). The project
  keeps strictly ordered pairs by the mean rating. docs/heap.md lists these counts."""
  path = shared_data / "heap" / "tellmewhy" / "test_caters_subset.csv"
  counts = _tellmewhy_rule_counts(path)
  assert counts == {"strict, mean (the project's)": (1042, 993), "ties kept": (1392, 1392),
                    "strict, sum // count (HEAP's released loaders)": (381, 463),
                    "strict, median": (701, 572), "strict, mode": (743, 593),
                    "strict, rounded mean": (692, 715), "answerable questions, ties kept": (921, 921),
                    "answerable questions, strict, mean": (688, 645)}
  table_1 = _table_1(shared_data)
  assert table_1["AG"] == table_1["AV"] == 598
  assert all(598 not in pair for pair in counts.values())
  assert tuple(len(heap.read_heap_comparisons(t, path)[0]) for t in ("AG", "AV")) == counts["strict, mean (the project's)"]


def test_story_rewriting_tie_rules_against_table_1(shared_data):
  """Table 1 gives each story-rewriting criterion 4,400; the released file holds 1,400 judgments of
  664 pairs, so no rule reaches it. Ties kept (pooled per pair) makes the five counts equal, as
  Table 1's are; ties dropped (the project's default) gives each its own; HEAP's released loaders
  (one comparison per A or B answer, S and IR dropped) give other, unequal counts again."""
  path = shared_data / "heap" / "story_rewriting" / "test_comparison_eval.csv"
  judgments, _ = heap.read_story_rewriting(path)
  dropped = {t: len(heap.story_comparisons(t, judgments)) for t in STORY.values()}
  kept = {t: len(heap.story_comparisons(t, judgments, keep_ties=True)) for t in STORY.values()}
  with open(path, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  per_answer = {t: sum(r[f"Answer.{c}"] in ("A", "B") for r in rows) for c, t in STORY.items()}
  assert len(rows) == 1400
  assert dropped == {"SRC": 377, "SRE": 375, "SRPl": 385, "SRPr": 339, "SRS": 359}
  assert kept == dict.fromkeys(STORY.values(), 664)
  assert per_answer == {"SRC": 607, "SRE": 557, "SRPl": 689, "SRPr": 496, "SRS": 600}
  assert {_table_1(shared_data)[t] for t in STORY.values()} == {4400}


def test_defeasible_table_1_is_the_files_records(shared_data):
  """DIA and DII: the project keeps ties, which gives Table 1's 7,176, also the file's line count
  (2,392 groups x 3 updates); HEAP's released loaders head it "Total: 7176 data points" and, by
  their own rule (each update type's groups alone, sum // count, strict), make 2,655 and 2,428
  comparisons, the figures their headers give."""
  path = shared_data / "heap" / "defeasible_inference" / "def_inf_eval_results.jsonl"
  groups = collections.defaultdict(list)
  with open(path, encoding="utf-8") as f:
    lines = [json.loads(line) for line in f]
  for r in lines:
    groups[(r["pred_label"], r["premise"], r["hypothesis"])].append(sum(r["human_label"]) // len(r["human_label"]))
  strict = collections.Counter(label for (label, *_), scores in groups.items()
                               for a, b in itertools.combinations(scores, 2) if a != b)
  assert len(lines) == 3 * len(groups) == 7176 == _table_1(shared_data)["DIA"]
  assert (strict["attenuator"], strict["intensifier"]) == (2655, 2428)


def _rendered(task, comparison, output):
  """What the reward model reads for `output`: the encoder's inputs, then the output (Table 5's
  `<instruction> <context> <answer>`, joined by ` <sep> `)."""
  spec = heap.HEAP_CRITERIA[task]
  inputs = heap.render_inputs(spec.instruction, comparison.context, comparison.output_label, spec.label_input)
  return inputs + heap.SEPARATOR + output


def _with_context(comparisons, context):
  return next(c for c in comparisons if c.context == context)


# Table 5's TellMeWhy and story-rewriting examples, which the extraction garbles ("He r interviewed",
# "happity began workin", "s answer"; "a preferrigend perdener argenerated the they"), written out
# from the paper's text with its words as the released records have them.
_NARRATIVE = ("Tim was unemployed. He applied to many jobs. He interviewed for a car valet job. He got the job. "
              "He happily began working as a car valet.")
_QUESTION, _ANSWER = "Why did He get the job?", "Tim got the job because he impressed the company."
_STORY = "Wallace had a passion for gardening. Wallace never became a professional gardener."
_REWRITTEN = ("One day, he was approached by a professional gardener. The professional gardener suggested that "
              "they work together. Now, Wallace has a lot of money that he loves to pay back.")


def test_table_5_examples_render_as_the_paper_prints_them(shared_data):
  """Each criterion's input for Table 5's example equals the paper's string: the instruction, then
  the example as Table 5 prints it. Rows without an example of their own take their dataset's (AV
  and QA: TellMeWhy's; the counter narratives': the one printed across their rows; CNI and CNO:
  CHASM's; SRC, SRPl, SRPr, SRS: SRE's) laid out by Table 4's label input; the contexts come from
  the released records where shared data holds them."""
  rows = _table_5_rows(shared_data)
  data = shared_data / "heap"
  expected, rendered = {}, {}

  def check(task, comparison, output, example):
    rendered[task] = _rendered(task, comparison, output)
    expected[task] = heap.HEAP_CRITERIA[task].instruction + heap.SEPARATOR + example

  # AH: the cell prints "[]" where the post's title ends and its text begins (joined by a space here).
  title, post = _example(rows["AH"][1]).split(" [] ")
  selftext, advice = post.split(" <sep> ")
  rating = types.SimpleNamespace(is_preferred=True, preference_score=lambda: 1.0)
  situation = types.SimpleNamespace(title=title, selftext=selftext, best_advice="Renew it.",
                                    model_advice={"T5": advice}, ratings={"T5": rating})
  check("AH", heap.advice_comparisons("AH", [situation])[0], advice, f"{title} {selftext} <sep> {advice}")

  assert _example(rows["AG"][1]) == "narrative <sep> Tim was unemployed. He applied to many jobs. He"
  assert _example(rows["AV QA"][1]).endswith(f"<sep> question <sep> {_QUESTION} <sep> s answer <sep> {_ANSWER}")
  tellmewhy = data / "tellmewhy" / "test_caters_subset.csv"
  for task in ("AG", "AV"):
    comparison = _with_context(heap.read_heap_comparisons(task, tellmewhy)[0],
                               (("narrative", _NARRATIVE), ("question", _QUESTION)))
    check(task, comparison, _ANSWER, f"narrative <sep> {_NARRATIVE} <sep> question <sep> {_QUESTION} <sep> "
                                     f"answer <sep> {_ANSWER}")
  comparison = _with_context(heap.read_heap_comparisons("QA", tellmewhy)[0], (("narrative", _NARRATIVE),))
  check("QA", comparison, _QUESTION, f"{_NARRATIVE} <sep> {_QUESTION}")

  # HS: the cell prints "then <sep>, the man": HellaSwag's ending starts with the comma, and the
  # separator's space before it is lost in the extraction.
  ctx, ending = _example(rows["HS"][1]).split(" <sep>")
  item = heap.HellaSwagItem(ctx=ctx, endings=(ending.strip(), "a", "b", "c"), label=0)
  check("HS", heap.hellaswag_comparisons("HS", [item])[0], ending.strip(), f"{ctx} <sep> {ending.strip()}")

  example = _example(rows["CR"][1])
  concepts, reference, sentence = example.split(" <sep> ")
  comparison = _with_context(heap.read_heap_comparisons("CR", data / "commongen")[0],
                             (("concept set", concepts), ("reference sentence", reference)))
  check("CR", comparison, sentence, example)

  # The counter narratives' example, printed across the CCN-CNSu rows, loses its target's text.
  hate_label, hate_speech, target_label = _example(rows[""][1]).split(" <sep> ")
  narrative = _example(rows["CNSp"][1])
  assert (hate_label, target_label) == ("hate speech", "target")
  assert narrative.startswith("blind people are not aware")
  target = "the target as the release gives it"
  narratives = [heap.CounterNarrative(hate_speech, target, system, text, *[score] * 5)
                for system, text, score in (("T5", narrative, 4), ("BART", "Other.", 1))]
  for task in ("BCN", "CCN", "CNG", "CNSp", "CNSu"):
    layout = (f"hate speech <sep> {hate_speech} <sep> target <sep> {target} <sep> counter narrative"
              if heap.HEAP_CRITERIA[task].label_input else f"{hate_speech} <sep> {target}")
    check(task, heap.counter_narrative_comparisons(task, narratives)[0], narrative, f"{layout} <sep> {narrative}")

  # CHASM's example, printed across the CNO and CNSt rows with their "-" cells inside it.
  post, response = _example(rows["CNO CNSt"][1]).removeprefix("- ").replace(" - ", " ").split(" <sep> ")
  # The released post, answered by Table 5's narrative and another rated apart (the release's own
  # narratives of this post tie on stance: no CNSt comparison).
  released = next(p for p in heap.read_chasm(data / "chasm")[0] if p.post == post)
  answered = dataclasses.replace(released, narratives=tuple(
      heap.ChasmNarrative(system, text, *[(score,) * 3] * 3)
      for system, text, score in (("GPT-3", response, 4), ("GPT-2", "Other.", 0))))
  for task in ("CNI", "CNO", "CNSt"):
    comparison = heap.chasm_comparisons(task, [answered])[0]
    layout = f"hate speech <sep> {post} <sep> counter narrative" if task == "CNO" else post
    check(task, comparison, response, f"{layout} <sep> {response}")
  example = _example(rows["HSO"][1])
  hateful = example.removeprefix("hate speech <sep> ")
  comparison = next(c for c in heap.read_heap_comparisons("HSO", data / "chasm")[0] if hateful in (c.good, c.bad))
  check("HSO", comparison, hateful, example)

  assert _example(rows["SRE"][1]).startswith(f"story <sep> {_STORY} <sep> ending <sep> One day, he was approached")
  assert _REWRITTEN.endswith(_example(rows["SRS"][1]))
  story_file = data / "story_rewriting" / "test_comparison_eval.csv"
  with open(story_file, newline="", encoding="utf-8") as f:
    original_ending = next(r["Input.Y"] for r in csv.DictReader(f) if f"{r['Input.X1']} {r['Input.XX2']}" == _STORY)
  for task in ("SRC", "SRE", "SRPl", "SRPr", "SRS"):
    context = (("story", _STORY),) + ((("original ending", original_ending),) if task == "SRPl" else ())
    comparison = _with_context(heap.read_heap_comparisons(task, story_file)[0], context)
    # SRPl's instruction names "a story, an original ending and a rewritten ending": given in that order.
    layout = {"SRPl": f"story <sep> {_STORY} <sep> original ending <sep> {original_ending} <sep> ending"}.get(
        task, f"story <sep> {_STORY} <sep> ending" if heap.HEAP_CRITERIA[task].label_input else _STORY)
    check(task, comparison, _REWRITTEN, f"{layout} <sep> {_REWRITTEN}")

  for task in ("DIA", "DII"):
    example = _example(rows[task][1])
    premise, hypothesis, update = example.split(" <sep> ")
    comparison = _with_context(heap.read_heap_comparisons(task, data / "defeasible_inference" /
                                                          "def_inf_eval_results.jsonl")[0],
                               (("premise", premise), ("hypothesis", hypothesis)))
    check(task, comparison, update, example)

  assert set(rendered) == set(heap.HEAP_CRITERIA)
  for task in heap.HEAP_CRITERIA:
    assert rendered[task] == expected[task], task
