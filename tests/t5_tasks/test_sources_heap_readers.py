"""HEAP's CHASM, counter-narrative and HellaSwag readers against the files read here independently."""
import collections
import csv
import itertools
import json
import pathlib

import pytest

from t5_tasks import heap
from t5_tasks.sources import records

DATA = pathlib.Path(__file__).resolve().parents[2] / "t5_tasks" / "data"
QUICK_CHASM = DATA / "heap_chasm.json"
QUICK_COUNTER_NARRATIVES = DATA / "heap_counter_narratives.csv"
QUICK_HELLASWAG = DATA / "heap_hellaswag.jsonl"
# The release's layout, written out again here: the first of each system's five rating columns.
RATING_COLUMNS = {"GPT-2": 12, "T5": 17, "BART": 22, "DialoGPT": 27, "BERT": 32}
TEXT_COLUMNS = {"DialoGPT": 2, "BART": 3, "BERT": 4, "T5": 5, "GPT-2": 6}
CRITERIA = ("suitability", "specificity", "grammaticality", "choose", "best")


def _strict_pairs(scores) -> int:
  return sum(1 for a, b in itertools.combinations(scores, 2) if a != b)


def _expected_chasm(path, stem):
  posts = []
  for key, item in json.loads(path.read_text(encoding="utf-8")).items():
    narratives = tuple(heap.ChasmNarrative(
        system, item[system]["text"], tuple(item[system]["score"]["off"]),
        tuple(item[system]["score"]["stance"]), tuple(item[system]["score"]["info"]))
        for system in item if system != "post")
    posts.append(heap.ChasmPost(f"{stem}/{key}", item["post"]["text"], tuple(item["post"]["score"]),
                                        narratives))
  return posts


def test_chasm_quickstart():
  posts, report = heap.read_chasm(QUICK_CHASM)
  assert posts == _expected_chasm(QUICK_CHASM, "heap_chasm")
  assert (report.read, report.skipped, report.normalised) == (6, 0, {})
  assert all(len(p.offensiveness) == 9 and len(p.narratives) == 3 for p in posts)
  # Every CHASM criterion gets strict comparisons from the integer means (sum // count).
  reduce = lambda ratings: sum(ratings) // len(ratings)  # pylint: disable=unnecessary-lambda-assignment
  assert _strict_pairs([reduce(p.offensiveness) for p in posts]) > 0
  for criterion in ("offensiveness", "stance", "informativeness"):
    assert sum(_strict_pairs([reduce(getattr(n, criterion)) for n in p.narratives]) for p in posts) >= 3


def _csv_rows(path):
  with open(path, newline="", encoding="utf-8") as f:
    rows = [row for row in csv.reader(f) if any(row)]
  return rows[1:] if rows[0][0] == "hate_speech" else rows


def test_counter_narratives_quickstart():
  narratives, report = heap.read_counter_narratives(QUICK_COUNTER_NARRATIVES)
  rows = _csv_rows(QUICK_COUNTER_NARRATIVES)
  groups = collections.defaultdict(list)
  for row in rows:
    groups[(row[0], row[1])].append(row)
  assert len(rows) == 12 and all(len(g) == 2 for g in groups.values())
  expected = []
  for (hate_speech, target), group in groups.items():
    for system, column in TEXT_COLUMNS.items():
      means = [sum(int(row[RATING_COLUMNS[system] + k]) for row in group) // len(group) for k in range(5)]
      expected.append(heap.CounterNarrative(hate_speech, target, system, group[0][column], *means))
  assert narratives == expected
  assert (report.read, report.skipped, report.normalised) == (30, 0, {})
  # One pair by hand: T5's ratings on the cyclists rows are (5, 5, 5, 1, 1) and (5, 4, 5, 1, 1).
  t5 = next(n for n in narratives if n.target == "cyclists" and n.system == "T5")
  assert (t5.suitability, t5.specificity, t5.grammaticality, t5.choose, t5.best) == (5, 4, 5, 1, 1)
  assert t5.text == "Many cyclists also drive; most of them follow the same rules as everyone else."
  for criterion in CRITERIA:
    pairs = collections.defaultdict(list)
    for n in narratives:
      pairs[n.hate_speech].append(getattr(n, criterion))
    strict = sum(_strict_pairs(scores) for scores in pairs.values())
    ties = sum(len(s) * (len(s) - 1) // 2 for s in pairs.values()) - strict
    assert strict >= 3 and ties > 0, criterion


def test_counter_narratives_header_is_optional_and_spelled_ratings_are_normalised(tmp_path):
  lines = QUICK_COUNTER_NARRATIVES.read_text(encoding="utf-8").splitlines(keepends=True)
  headerless = tmp_path / "headerless.csv"
  headerless.write_text("".join(lines[1:]), encoding="utf-8")
  assert heap.read_counter_narratives(headerless)[0] == (
      heap.read_counter_narratives(QUICK_COUNTER_NARRATIVES)[0])
  row = next(csv.reader([lines[1]]))
  row[12], row[13] = " 3", "4.0"
  spelled = tmp_path / "spelled.csv"
  with open(spelled, "w", newline="", encoding="utf-8") as f:
    csv.writer(f).writerow(row)
  narratives, report = heap.read_counter_narratives(spelled)
  gpt2 = next(n for n in narratives if n.system == "GPT-2")
  assert (gpt2.suitability, gpt2.specificity) == (3, 4)
  assert report.normalised == {heap.NUMBERS_TIDIED: 2}


def test_hellaswag_quickstart():
  items, report = heap.read_hellaswag(QUICK_HELLASWAG)
  lines = [json.loads(line) for line in QUICK_HELLASWAG.read_text(encoding="utf-8").splitlines()]
  assert items == [heap.HellaSwagItem(r["ctx"], tuple(r["endings"]), r["label"]) for r in lines]
  assert (report.read, report.skipped, report.normalised) == (8, 0, {})
  assert len(set(item.label for item in items)) == 4


def test_hellaswag_label_as_digit_string_is_normalised(tmp_path):
  path = tmp_path / "val.jsonl"
  path.write_text(json.dumps({"ctx": "A cat sits. it", "endings": ["a", "b", "c", "d"], "label": "2"}) + "\n")
  items, report = heap.read_hellaswag(path)
  assert items[0].label == 2
  assert report.normalised == {heap.NUMBERS_FROM_TEXT: 1}


def test_chasm_real(shared_data):
  folder = shared_data / "heap" / "chasm"
  raw = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}
  posts, report = heap.read_chasm(folder)
  assert {stem: len(items) for stem, items in raw.items()} == {"counter_conan": 306, "counter_sbic": 42}
  assert len(posts) == report.read == 348 and report.skipped == 0
  assert sum(len(p.narratives) for p in posts) == sum(
      len(item) - 1 for items in raw.values() for item in items.values()) == 3 * 348
  assert [p.id for p in posts] == [f"{stem}/{key}" for stem, items in raw.items() for key in items]
  # The release needs no fixing: every text is trimmed, every rating an int in 0..4.
  assert report.normalised == {}
  assert posts == [p for stem in raw for p in _expected_chasm(folder / f"{stem}.json", stem)]


def test_chasm_folder_reads_its_files_in_order_with_one_report(tmp_path):
  items = json.loads(QUICK_CHASM.read_text(encoding="utf-8"))
  items["quick_1"]["post"]["text"] += " "
  items["quick_1"]["GPT-3"]["score"]["info"][0] = "4"
  (tmp_path / "b.json").write_text(json.dumps(items))
  (tmp_path / "a.json").write_text(QUICK_CHASM.read_text(encoding="utf-8"))
  (tmp_path / "notes.txt").write_text("not read")
  posts, report = heap.read_chasm(tmp_path)
  assert [p.id for p in posts] == [f"{stem}/quick_{i}" for stem in "ab" for i in range(1, 7)]
  assert posts[6].post == posts[0].post and posts[6].narratives == posts[0].narratives
  assert (report.path, report.read, report.skipped) == (str(tmp_path), 12, 0)
  assert report.normalised == {heap.TEXTS_STRIPPED: 1, heap.NUMBERS_FROM_TEXT: 1}
  (tmp_path / "empty").mkdir()
  assert _error(heap.read_chasm, tmp_path / "empty") == (
      f"{tmp_path / 'empty'}: no *.json files in this folder")


def _error(read, path) -> str:
  with pytest.raises(records.RecordError) as e:
    read(path)
  return str(e.value)


def test_chasm_broken(tmp_path):
  path = tmp_path / "broken.json"
  items = json.loads(QUICK_CHASM.read_text(encoding="utf-8"))
  items["quick_2"]["GPT-Neo"]["score"]["stance"][1] = "x"
  text = json.dumps(items, indent=4)
  path.write_text(text)
  line = text.splitlines().index('    "quick_2": {') + 1
  assert _error(heap.read_chasm, path) == (
      f"{path}:{line}: field 'quick_2.GPT-Neo.score.stance[1]': expected an integer, got 'x'")
  del items["quick_2"]["GPT-Neo"]
  path.write_text(json.dumps(items, indent=4))
  assert _error(heap.read_chasm, path) == f"{path}:{line}: field 'quick_2.GPT-Neo': missing"
  # json.load would keep the second of two equal keys and drop the first, silently.
  item = json.dumps(items["quick_1"])
  path.write_text(f'{{"quick_1": {item},\n "quick_1": {item}}}')
  assert _error(heap.read_chasm, path) == (
      f"{path}:2: field 'quick_1': repeated key: json.load would keep only the last entry")


def test_counter_narratives_broken(tmp_path):
  path = tmp_path / "broken.csv"
  lines = QUICK_COUNTER_NARRATIVES.read_text(encoding="utf-8").splitlines(keepends=True)
  row = next(csv.reader([lines[2]]))
  row[RATING_COLUMNS["T5"] + 2] = "x"
  with open(path, "w", newline="", encoding="utf-8") as f:
    f.writelines(lines[:2])
    csv.writer(f, lineterminator="\n").writerow(row)
  assert _error(heap.read_counter_narratives, path) == (
      f"{path}:3: field 'column 19 (T5 grammaticality)': expected an integer, got 'x'")
  # The two annotators of one pair saw the same narratives: a differing one is an error too.
  row = next(csv.reader([lines[2]]))
  row[TEXT_COLUMNS["BERT"]] = "Another narrative."
  with open(path, "w", newline="", encoding="utf-8") as f:
    f.writelines(lines[:2])
    csv.writer(f, lineterminator="\n").writerow(row)
  assert _error(heap.read_counter_narratives, path) == (
      f"{path}:3: field 'column 4 (BERT counter narrative)': differs from the row of the same hate speech "
      "and target at line 2")


def test_hellaswag_broken(tmp_path):
  path = tmp_path / "test.jsonl"
  good = {"ctx": "A cat sits. it", "endings": ["a", "b", "c", "d"], "label": 0}
  unlabeled = {"ctx": "A dog runs. it", "endings": ["a", "b", "c", "d"]}  # as in the test file
  path.write_text(json.dumps(good) + "\n" + json.dumps(unlabeled))
  assert _error(heap.read_hellaswag, path) == f"{path}:2: field 'label': missing"
  path.write_text(json.dumps(dict(good, endings=["a", "b", "c"])) + "\n")
  assert _error(heap.read_hellaswag, path) == f"{path}:1: field 'endings': expected 4 entries, got 3"
  items, report = heap.read_hellaswag(path, skip_invalid=True)
  assert (items, report.skipped) == ([], 1)
