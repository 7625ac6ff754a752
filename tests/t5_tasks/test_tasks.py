"""Every registered task yields correctly formatted examples from the quickstart data.

The quickstart folder has one HEAP source (TellMeWhy) besides TuringAdvice; the other HEAP
sources get small hand-written files here, in their released formats. The README's example
family ("Adding a task family") is registered from the README's own code and read back.
"""
import csv
import dataclasses
import json
import re
import sys
import types

import gin
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  (registers the tasks)
from t5_tasks import families
from t5_tasks import preprocessors
from t5_tasks import tasks
from t5_tasks import vocab as task_vocab
from t5_tasks import heap
from t5_tasks.sources import records
from tests.conftest import PROJECT_ROOT

LENGTHS = {"inputs": 512, "targets": 64}
EOS = 1


def write_heap_fixtures(folder) -> dict:
  """Tiny defeasible, CommonGen and story-rewriting files; returns the data_files binding."""
  defeasible = folder / "def_inf.jsonl"
  with open(defeasible, "w") as f:
    for premise in ("A man is jogging in a park.", "A girl is baking a cake.", "A boy reads a book."):
      for label in ("attenuator", "intensifier"):
        for update, ratings in ((f"Update one for {label}.", [2, 1, 1]),
                                (f"Update two for {label}.", [-1, -2, 0])):
          f.write(json.dumps({"premise": premise, "hypothesis": "The person is happy.",
                              "update": update, "model": "m", "dataset": "snli",
                              "pred_label": label, "human_label": ratings}) + "\n")
  commongen = folder / "sheet1.csv"
  with open(commongen, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["Compare the two sentences.", "", ""])
    for concepts in ("dog ball throw", "cook pan egg", "river boat row"):
      writer.writerow([f"Concept set: {concepts}", "", ""])
      writer.writerow([f"Reference: A sentence about {concepts}.", "", ""])
      writer.writerow([f"A plausible {concepts} scene.", f"An odd {concepts} scene.", "1"])
      writer.writerow([f"An odd {concepts} scene.", f"A strange {concepts} scene.", "-0.5"])
  story = folder / "story.csv"
  columns = ["Input.STORY", "Input.X1", "Input.X2", "Input.Y", "Input.XX2", "Input.YY1",
             "Input.YY2", "Input.YY1_MODEL", "Input.YY2_MODEL"] + [
                 f"Answer.{c}" for c in ("counterfactual", "ending", "plot", "premise", "second")]
  with open(story, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(columns)
    for i in range(3):
      writer.writerow([f"s{i}", f"Premise {i}.", f"Second {i}.", f"Ending {i}.",
                       f"New second {i}.", f"Rewrite A {i}.", f"Rewrite B {i}.", "m1", "m2",
                       "A", "B", "A", "A", "B"])
  return {"heap/defeasible": {"all": str(defeasible)}, "heap/commongen": {"all": str(commongen)},
          "heap/story_rewriting": {"all": str(story)}}


@pytest.fixture
def heap_files(tmp_path):
  files = write_heap_fixtures(tmp_path)
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", files)
  yield files
  gin.clear_config()


def task_examples(name, split):
  ds = seqio.get_mixture_or_task(name).get_dataset(LENGTHS, split=split, shuffle=False)
  return list(ds.as_numpy_iterator())


def _rows(candidates):
  return [list(r) for r in (candidates.to_list() if hasattr(candidates, "to_list") else candidates)]


def _check_candidates(ex):
  vocab = task_vocab.ConfiguredVocabulary()  # bytes, sentinel markup as sentinel ids
  texts = [t.decode() for t in ex["candidates_pretokenized"]]
  rows = _rows(ex["candidates"])
  assert len(rows) == len(texts) == len(ex["candidate_labels"]) >= 1
  for row, text in zip(rows, texts):
    assert row[-1] == EOS and row[:-1] == vocab.encode(text)[:LENGTHS["targets"] - 1]
  assert ex["candidate_labels"].dtype.name == "int32" and ex["candidate_labels"].max() == 1
  correct = [t for t, y in zip(texts, ex["candidate_labels"]) if y == 1]
  assert ex["targets_pretokenized"].decode() == correct[0]
  assert list(ex["targets"]) == rows[list(ex["candidate_labels"]).index(1)]
  inputs = list(ex["inputs"])
  assert inputs[-1] == EOS and len(inputs) <= LENGTHS["inputs"]
  assert inputs[:-1] == vocab.encode(ex["inputs_pretokenized"].decode())[:LENGTHS["inputs"] - 1]
  assert ex["id"]


FORMATS = {
    "turingadvice_generation": lambda text, ex: text.startswith("Subreddit: r/") and "\nDate: " in text,
    "timedial_cloze_full": lambda text, ex: preprocessors.SENTINEL in text,
    "timedial_cloze_local": lambda text, ex: preprocessors.SENTINEL in text and text.count("\n") <= 2,
    "timedial_cloze_target": lambda text, ex: preprocessors.SENTINEL in text and "\n" not in text,
    "timedial_weak_supervision": lambda text, ex: preprocessors.SENTINEL in text,
    "asq_intent_cloze": lambda text, ex: "\n" not in text,
    "summarize_feedback_preference": lambda text, ex: text.startswith("SUBREDDIT: r/")
                                                  and text.endswith("TL;DR:"),
}
# HEAP's inputs as Table 5 lays them out (`{}`: a context field's text); the output follows in the
# decoder. Label input (Table 4) names each field and, last, the output.
_CN = "hate speech <sep> {} <sep> target <sep> {} <sep> counter narrative"
_STORY = "story <sep> {} <sep> ending"
TABLE_5_LAYOUTS = {
    "AH": "{}", "AG": "narrative <sep> {} <sep> question <sep> {} <sep> answer",
    "AV": "narrative <sep> {} <sep> question <sep> {} <sep> answer", "QA": "{}", "HS": "{}",
    "CR": "{} <sep> {}", "BCN": _CN, "CCN": _CN, "CNG": _CN, "CNSp": "{} <sep> {}", "CNSu": _CN,
    "CNI": "{}", "CNO": "hate speech <sep> {} <sep> counter narrative", "CNSt": "{}", "HSO": "hate speech",
    "SRC": _STORY, "SRE": _STORY, "SRPl": "story <sep> {} <sep> original ending <sep> {} <sep> ending",
    "SRPr": "{}", "SRS": "{}",
    "DIA": "{} <sep> {}", "DII": "{} <sep> {}",
}


def _table_5_layout(abbreviation):
  instruction = heap.HEAP_CRITERIA[abbreviation].instruction
  pattern = re.escape(f"{instruction} <sep> {TABLE_5_LAYOUTS[abbreviation]}").replace(r"\{\}", "(.+?)")
  pattern = re.compile(pattern + "$", re.DOTALL)

  def check(text, ex):
    if abbreviation == "HSO":  # no context: the instruction, then the output's label
      return text == f"{heap.HEAP_CRITERIA['HSO'].instruction} <sep> hate speech"
    match = pattern.match(text)
    return bool(match) and list(match.groups()) == [t.decode() for t in ex["context_texts"]]
  return check


for _abbreviation in heap.HEAP_CRITERIA:
  FORMATS[heap.task_name(_abbreviation)] = _table_5_layout(_abbreviation)


def test_every_family_is_registered():
  assert set(seqio.TaskRegistry.names()) >= set(FORMATS)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_task_yields_formatted_examples(name, heap_files):
  task = seqio.get_mixture_or_task(name)
  total = 0
  # A HEAP criterion's three splits are one list of comparisons cut by `heap.split_comparisons`
  # (tested in test_sources_heap.py); its test split shows the format.
  # ASQ's annotation split has no quickstart file (the release's is bound): the splits the files give.
  built = set(task.source._built())  # pylint: disable=protected-access
  for split in ("test",) if name.startswith("heap_") else [s for s in task.splits if s in built]:
    examples = task_examples(name, split)
    total += len(examples)
    for ex in examples:
      _check_candidates(ex)
      assert FORMATS[name](ex["inputs_pretokenized"].decode(), ex), ex["inputs_pretokenized"]
  assert total > 0


def test_counts_match_the_raw_files():
  asq_test = json.loads((tasks.QUICKSTART_DIR / "asq_test.json").read_text())
  assert len(task_examples("asq_intent_cloze", "test")) == len(asq_test)
  timedial = json.loads((tasks.QUICKSTART_DIR / "timedial_test.json").read_text())
  assert len(task_examples("timedial_cloze_full", "test")) == len(timedial)
  lines = (tasks.QUICKSTART_DIR / "reddit_advice_2019.jsonl").read_text().splitlines()
  situations = [json.loads(line) for line in lines if line.strip()]
  expected = sum(len(s["good_comments"]) for s in situations if s["split"] == "train")
  assert len(task_examples("turingadvice_generation", "train")) == expected


def test_asq_labels_and_pair_types_follow_the_files():
  items = {x["id"]: x for x in json.loads((tasks.QUICKSTART_DIR / "asq_test.json").read_text())}
  first = json.loads((tasks.QUICKSTART_DIR / "asq_human_annotation_first.json").read_text())
  for ex in task_examples("asq_intent_cloze", "test"):
    item = items[ex["id"].decode()]
    assert ex["inputs_pretokenized"].decode() == item["narrative"]
    assert list(ex["candidates_pretokenized"]) == [item["qn1"].encode(), item["qn2"].encode()]
    assert list(ex["candidate_labels"]) == [int(item["label"] == 0), int(item["label"] == 1)]
  by_id = {ex["id"].decode(): ex for ex in task_examples("asq_intent_cloze", "test")}
  annotated = first[0]
  if annotated["true_qn_type"] == "1" and annotated["paired_qn_type"] == "3":
    assert by_id[annotated["id"]]["pair_type"] == b"C+E"
  assert any(ex["pair_type"] for ex in by_id.values())


def test_timedial_candidates_are_both_correct_then_both_incorrect():
  raw = {str(x["id"]): x for x in json.loads((tasks.QUICKSTART_DIR / "timedial_test.json")
                                             .read_text())}
  for ex in task_examples("timedial_cloze_target", "test"):
    item = raw[ex["id"].decode()]
    # The default target format: T5's span-corruption layout around each stripped option.
    assert [c.decode() for c in ex["candidates_pretokenized"]] == [
        f"{preprocessors.SENTINEL}{item[key].strip()}{preprocessors.END_SENTINEL}"
        for key in ("correct1", "correct2", "incorrect1", "incorrect2")]
    assert list(ex["candidate_labels"]) == [1, 1, 0, 0]
    assert [r.decode() for r in ex["candidate_rules"]] == [
        "", "", item["incorrect1_rule"], item["incorrect2_rule"]]


def test_advice_inputs_are_trimmed_to_the_inputs_length():
  ds = seqio.get_mixture_or_task("turingadvice_generation").get_dataset(
      {"inputs": 128, "targets": 32}, split="train", shuffle=False)
  for ex in ds.as_numpy_iterator():
    text = ex["inputs_pretokenized"].decode()
    assert text.startswith("Subreddit: r/")
    assert len(ex["inputs"]) <= 128 and ex["inputs"][-1] == EOS


def test_missing_data_names_the_gin_binding():
  with pytest.raises(ValueError, match=r"data_files.files = \{'heap/defeasible'"):
    task_examples("heap_dia", "train")


def test_metric_fns_run_on_task_targets():
  task = seqio.get_mixture_or_task("timedial_cloze_full")
  examples = task_examples("timedial_cloze_full", "test")
  targets = [task.postprocess_fn(None, example=ex, is_target=True) for ex in examples]
  # Scores that rank the candidates in file order: both correct ones on top.
  scores = [[4.0, 3.0, 2.0, 1.0] for _ in examples]
  out = task.score_metric_fns[0](targets, scores)
  assert out["two_best_accuracy"] == 1.0 and out["accuracy"] == 1.0
  rates = {k: v for k, v in out.items()
           if k.startswith("error_rate/") and not k.endswith(("_low", "_high"))}
  assert rates and all(v == 0.0 for v in rates.values())


def test_sentencepiece_vocabulary_through_gin(tmp_path):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(f"how do i tell my roommate about the rent {i}" for i in range(200)))
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"),
                                 vocab_size=40, model_type="unigram", minloglevel=2)
  path = str(tmp_path / "sp.model")
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.vocab.get_vocabulary.sentencepiece_model_path", path)
  try:
    ex = task_examples("asq_intent_cloze", "test")[0]
    expected = seqio.SentencePieceVocabulary(path, extra_ids=100)
    text = ex["inputs_pretokenized"].decode()
    assert list(ex["inputs"][:-1]) == expected.encode(text)[:LENGTHS["inputs"] - 1]
    assert ex["inputs"][-1] == expected.eos_id
  finally:
    gin.clear_config()


# Each `_tfds` task equals its file task item by item: tests/t5_tasks/test_tfds_parity.py.


def test_every_declared_task_is_registered_with_its_splits():
  for family in families.FAMILIES:
    for task in family.tasks():
      assert tuple(seqio.get_mixture_or_task(task.name).splits) == task.splits
      if task.tfds:
        assert tuple(seqio.get_mixture_or_task(f"{task.name}_tfds").splits) == task.splits


def test_variants_are_the_declaration_with_their_fields_replaced():
  scopes = families.TIMEDIAL_CLOZE.tasks()
  assert [t.name for t in scopes] == [f"timedial_cloze_{s}" for s in preprocessors.TIMEDIAL_SCOPES]
  assert all(t.examples is families.timedial_examples and not t.variants for t in scopes)
  assert [t.steps[0].keywords for t in scopes] == [{"scope": s} for s in preprocessors.TIMEDIAL_SCOPES]
  criteria = {t.name: t for t in families.HEAP.tasks()}
  assert criteria["heap_dia"].quickstart_files == {"heap/defeasible": {}}
  assert criteria["heap_av"].tfds.name == "heap_comparisons/av:3.0.0"
  assert criteria["heap_av"].metric_fn.keywords == {"ranked": True}  # Table 2 reports AV's Spearman
  assert criteria["heap_qa"].metric_fn.keywords == {"ranked": False}


def test_a_dataset_has_one_set_of_quickstart_files(monkeypatch):
  monkeypatch.setattr(tasks, "QUICKSTART_FILES", dict(tasks.QUICKSTART_FILES))
  clash = dataclasses.replace(families.ASQ_INTENT_CLOZE, name="asq_clash",
                              quickstart_files={"asq": {"test": "another.json"}})
  with pytest.raises(ValueError, match="different quickstart files for 'asq'"):
    tasks.register_family(clash)
  assert "asq_clash" not in seqio.TaskRegistry.names()


RIDDLES = {
    "train": [{"id": "r1", "riddle": "What has keys but opens no locks?", "options": ["a piano", "a door"],
               "answer": 0},
              {"id": "r2", "riddle": "What gets wetter as it dries?", "options": ["the sun", "a towel"],
               "answer": 1}],
    "test": [{"id": "r3", "riddle": "What has a neck but no head?", "options": ["a bottle", "a snake"],
              "answer": 0}],
}


def _readme_family_code() -> list[str]:
  """The python blocks of docs/tasks.md's "Adding a task family": the reader, then the declaration."""
  section = (PROJECT_ROOT / "docs" / "tasks.md").read_text().split("## Adding a task family\n", 1)[1]
  return re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)


@pytest.fixture
def readme_family(tmp_path, monkeypatch):
  """The README's example family: its reader and its declaration, each a module as the README writes
  it (tests/t5_tasks/test_readme_family.py adds them to a copy of the project)."""
  reader_code, declaration_code = _readme_family_code()
  reader = types.ModuleType("t5_tasks.sources.riddles")
  exec(reader_code, vars(reader))  # pylint: disable=exec-used
  monkeypatch.setitem(sys.modules, reader.__name__, reader)
  declaration = types.ModuleType("t5_tasks.families.riddles")
  exec(declaration_code, vars(declaration))  # pylint: disable=exec-used
  monkeypatch.setattr(tasks, "QUICKSTART_FILES", dict(tasks.QUICKSTART_FILES))
  names = tasks.register_family(declaration.RIDDLE_CLOZE)
  files = {}
  for split, rows in RIDDLES.items():
    files[split] = str(tmp_path / f"{split}.jsonl")
    with open(files[split], "w") as f:
      f.writelines(json.dumps(row) + "\n" for row in rows)
  yield names, files
  for name in names:
    seqio.TaskRegistry.remove(name)
  gin.clear_config()


def test_the_readme_family_registers_and_reads_its_bound_files(readme_family):
  names, files = readme_family
  assert names == ("riddle_cloze",)
  assert tasks.data_files("riddles") == {
      split: str(tasks.QUICKSTART_DIR / f"riddles_{split}.jsonl") for split in ("train", "test")}
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", {"riddles": files})
  for split, rows in RIDDLES.items():
    examples = task_examples("riddle_cloze", split)
    assert [ex["id"].decode() for ex in examples] == [row["id"] for row in rows]
    for ex, row in zip(examples, rows):
      _check_candidates(ex)
      assert ex["inputs_pretokenized"].decode() == row["riddle"]
      assert [c.decode() for c in ex["candidates_pretokenized"]] == row["options"]
      assert ex["targets_pretokenized"].decode() == row["options"][row["answer"]]
  task = seqio.get_mixture_or_task("riddle_cloze")
  assert task.source.examples("test")[0]["candidate_labels"] == [1, 0]
  bad = files["test"].replace("test.jsonl", "bad.jsonl")
  with open(bad, "w") as f:
    f.write(json.dumps({**RIDDLES["test"][0], "answer": 2}) + "\n")
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", {"riddles": {"test": bad}})
  with pytest.raises(records.RecordError, match=r"bad.jsonl:1: field 'answer'"):
    task.source.examples("test")


def test_a_bound_key_no_task_reads_is_an_error_listing_the_keys(tmp_path):
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", {"tellmewhy": {"all": str(tmp_path / "x")}})
  try:
    with pytest.raises(ValueError, match=r"binds \['tellmewhy'\], which no task reads; the keys are "
                                         r"\[.*'heap/tellmewhy'.*\]"):
      tasks.data_files("timedial")
  finally:
    gin.clear_config()


def test_quickstart_files_are_announced_once_and_marked_in_the_provenance(capsys, monkeypatch):
  monkeypatch.setattr(tasks, "_ANNOUNCED_QUICKSTART", set())
  source = seqio.get_mixture_or_task("timedial_cloze_full").source
  provenance = source.data_provenance()
  source.data_provenance()
  notices = [line for line in capsys.readouterr().out.splitlines() if "QUICKSTART" in line]
  assert len(notices) == 1 and "'timedial'" in notices[0]
  assert provenance["files"] and all(f["quickstart"] for f in provenance["files"])
  assert provenance["files"][0]["sha256"] and provenance["files"][0]["bytes"] > 0
  assert provenance["examples"]["test"] == source.num_input_examples("test")


@pytest.mark.parametrize("examples, buffer", [(20, 20), (1500, seqio.SHUFFLE_BUFFER_SIZE)])
def test_a_training_shuffle_buffer_holds_at_most_one_pass_over_the_split(examples, buffer):
  """seqio repeats a split before shuffling it: the first example waits for the buffer to fill.
  A split smaller than seqio's buffer fills it with one pass, not with copies of itself."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  preprocessed = []
  def count(dataset):
    def seen(value):
      preprocessed.append(int(value))
      return value
    return dataset.map(lambda ex: {"value": tf.py_function(seen, [ex["value"]], tf.int64)})
  source = seqio.FunctionDataSource(lambda split, shuffle_files, seed=None: tf.data.Dataset.range(examples).map(
      lambda value: {"value": value}), splits=["train"], num_input_examples={"train": examples})
  task = tasks.Task("shuffle_buffer_probe", source, output_features={}, preprocessors=[count])
  first = next(task.get_dataset(None, "train", shuffle=True, seed=0, num_epochs=None).as_numpy_iterator())
  # The buffer filled, plus what tf.data's prefetching took meanwhile (a few elements).
  assert buffer <= len(preprocessed) < buffer + 50, len(preprocessed)
  assert first["value"] in range(examples)
