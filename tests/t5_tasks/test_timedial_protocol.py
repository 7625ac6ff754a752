"""TimeDial as the paper runs it: sentinels in the vocabulary, the span-corruption target layout
(§4.1.3), weak supervision (§4.1.1) and the release read as it is; ids composed by hand."""
import collections
import json
import re

import gin
import numpy as np
import pytest
import seqio
import tensorflow as tf

import t5_tasks  # pylint: disable=unused-import  (registers the tasks)
from t5_tasks.families import base as families_base
from t5_tasks.families import timedial as timedial_family
from t5_tasks import temporal_tagger
from t5_tasks import vocab
from t5_tasks.sources import records
from t5_tasks.sources import timedial
from tests.conftest import PROJECT_ROOT

DATA = PROJECT_ROOT / "t5_tasks" / "data"
QUICKSTART_TEST = DATA / "timedial_test.json"
QUICKSTART_DIALOGS = DATA / "timedial_unlabeled_dialogs.jsonl"
LENGTHS = {"inputs": 512, "targets": 64}
BYTE_VOCAB_SIZE = 3 + 256 + 100  # PAD, EOS, UNK; the bytes; 100 sentinels
EOS = 1


def sentinel(n, vocab_size=BYTE_VOCAB_SIZE):
  return vocab_size - 1 - n


def byte_ids(text):
  return [b + 3 for b in text.encode("utf-8")]


@pytest.fixture
def gin_bindings():
  def bind(**bindings):
    with gin.unlock_config():
      for name, value in bindings.items():
        gin.bind_parameter(name, value)
  yield bind
  gin.clear_config()


def _encode_tf(vocabulary, text):
  return vocabulary.encode_tf(tf.constant(text)).numpy().tolist()


def test_byte_vocabulary_reads_and_writes_sentinels():
  v = vocab.ConfiguredVocabulary()
  assert (v.vocab_size, v.extra_ids) == (BYTE_VOCAB_SIZE, 100)
  text = "B: only <extra_id_0>, then<extra_id_1>.<extra_id_99> <extra_id_100>"
  expected = (byte_ids("B: only ") + [sentinel(0)] + byte_ids(", then") + [sentinel(1)]
              + byte_ids(".") + [sentinel(99)] + byte_ids(" <extra_id_100>"))  # 100: not a sentinel
  assert v.encode(text) == expected
  assert _encode_tf(v, text) == expected
  assert v.decode(expected + [EOS, 70]) == text
  plain = "A: no markup, <extra_id_> either"
  assert v.encode(plain) == _encode_tf(v, plain) == byte_ids(plain)
  # Inside tf.data, candidates one by one (as the tasks' tokenize step does).
  ds = tf.data.Dataset.from_tensor_slices([text, plain]).map(v.encode_tf)
  assert [list(ids) for ids in ds.as_numpy_iterator()] == [expected, byte_ids(plain)]


def test_sentencepiece_vocabulary_encodes_each_span_on_its_own(tmp_path, gin_bindings):
  spm = pytest.importorskip("sentencepiece", reason="sentencepiece is not installed")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(f"we have allowed forty-eight hours to be safe {i} times" for i in range(200)))
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=40,
                                 model_type="unigram", minloglevel=2)
  path = str(tmp_path / "sp.model")
  gin_bindings(**{"t5_tasks.vocab.get_vocabulary.sentencepiece_model_path": path})
  v = vocab.ConfiguredVocabulary()
  sp = seqio.SentencePieceVocabulary(path, extra_ids=100)
  assert v.vocab_size == sp.vocab_size == 140
  text = "we have allowed <extra_id_0> to be safe"
  expected = sp.encode("we have allowed ") + [139] + sp.encode(" to be safe")
  assert v.encode(text) == _encode_tf(v, text) == expected
  target = "<extra_id_0>forty-eight hours<extra_id_1>"
  span = sp.encode("forty-eight hours")  # word-initial pieces, as in pre-training
  assert sp.tokenizer.IdToPiece(span[0]).startswith("▁")
  assert v.encode(target) == _encode_tf(v, target) == [139] + span + [138]
  assert v.decode([139] + span + [138, sp.eos_id]) == target
  assert v.encode("to be safe") == _encode_tf(v, "to be safe") == sp.encode("to be safe")


def _first_dataset_item(name, split):
  ds = seqio.get_mixture_or_task(name).get_dataset(LENGTHS, split=split, shuffle=False)
  return next(ds.as_numpy_iterator())


def _rows(candidates):
  return [list(r) for r in (candidates.to_list() if hasattr(candidates, "to_list") else candidates)]


def _quickstart_item():
  raw = json.loads(QUICKSTART_TEST.read_text())[0]
  before, after = "\n".join(raw["conversation"]).split("<MASK>")
  inputs = byte_ids(before) + [sentinel(0)] + byte_ids(after) + [EOS]
  options = [raw[k].strip() for k in ("correct1", "correct2", "incorrect1", "incorrect2")]
  return raw, inputs, options


def test_timedial_cloze_full_span_corruption_layout():
  raw, inputs, options = _quickstart_item()
  ex = _first_dataset_item("timedial_cloze_full", "test")
  assert ex["id"].decode() == str(raw["id"])
  assert list(ex["inputs"]) == inputs
  expected = [[sentinel(0)] + byte_ids(option) + [sentinel(1), EOS] for option in options]
  assert _rows(ex["candidates"]) == expected
  assert list(ex["targets"]) == expected[0]
  assert list(ex["candidate_labels"]) == [1, 1, 0, 0]


def test_timedial_cloze_full_plain_layout(gin_bindings):
  gin_bindings(**{"t5_tasks.preprocessors.timedial_target_format.target_format": "plain"})
  _, inputs, options = _quickstart_item()
  ex = _first_dataset_item("timedial_cloze_full", "test")
  assert list(ex["inputs"]) == inputs
  assert _rows(ex["candidates"]) == [byte_ids(option) + [EOS] for option in options]


def test_unknown_target_format_is_named(gin_bindings):
  gin_bindings(**{"t5_tasks.preprocessors.timedial_target_format.target_format": "span"})
  # Raised while tf.data traces the step, so TensorFlow may wrap the ValueError.
  with pytest.raises(Exception, match="unknown TimeDial target format 'span'"):
    _first_dataset_item("timedial_cloze_full", "test")


DIALOG = ["A: I waited two days for the parcel, then another 3 weeks for the refund.",
          "B: Two days is nothing. My brother waited six months at the age of 30.",
          "A: The shop opens at 9 am and closes at 5 pm, twice a week.",
          "B: Since 2015 it has been like that."]


def test_weak_supervision_draws_three_random_negatives_reproducibly():
  spans = [s.text for turn in DIALOG for s in temporal_tagger.tag(turn)]
  assert "two days" in spans and "Two days" in spans and len({s.lower() for s in spans}) >= 8
  items = temporal_tagger.weak_supervision_items("d1", DIALOG)
  assert len(items) == len(spans)
  for item in items:
    answer, negatives = item.candidates[0], item.candidates[1:]
    assert len(negatives) == 3 and item.candidate_labels == (1, 0, 0, 0)
    assert answer.lower() not in {n.lower() for n in negatives}
    assert len({n.lower() for n in negatives}) == 3 and set(negatives) <= set(spans)
  assert temporal_tagger.weak_supervision_items("d1", DIALOG) == items  # seeded by the dialog id
  draws = {tuple(i.candidates for i in temporal_tagger.weak_supervision_items(dialog_id, DIALOG))
           for dialog_id in ("d1", "d2", "d3", "d4")}
  assert len(draws) > 1  # random, not a fixed order
  # Fewer spans than negatives wanted and no pool: what there is; no other span at all: no item.
  two = temporal_tagger.weak_supervision_items("d", ["Wait two days.", "Or 3 weeks."])
  assert [len(i.candidates) for i in two] == [2, 2]
  assert temporal_tagger.weak_supervision_items("d", ["Wait two days.", "Two days?"]) == []


def test_validation_fraction_is_table_4s_dev_share():
  # Table 4, in-domain (DailyDialog): mask filling / generation 14.5k train, 2.4k dev; classification
  # 58.0k / 9.6k, the same spans with 3 negatives each, so the same share.
  share = 2.4 / (14.5 + 2.4)
  assert temporal_tagger.VALIDATION_FRACTION == pytest.approx(share)
  assert temporal_tagger.VALIDATION_FRACTION == pytest.approx(9.6 / (58.0 + 9.6), abs=5e-4)
  assert 58.0 / 14.5 == 9.6 / 2.4 == 1 + temporal_tagger.NUM_NEGATIVES
  assert round(temporal_tagger.VALIDATION_FRACTION, 3) == 0.142  # not the tenth it was


def test_split_by_dialog_is_seeded_and_table_4s_dev_share():
  ids = [f"dialog{i}" for i in range(300)]
  splits = temporal_tagger.split_by_dialog(ids)
  # round(0.142 * 300) = 43 dialogs: 14% as Table 4's 2.4k of 16.9k.
  assert collections.Counter(splits.values()) == {"train": 257, "validation": 43}
  assert round(43 / 300, 2) == round(2.4 / (14.5 + 2.4), 2) == 0.14
  assert temporal_tagger.split_by_dialog(reversed(ids)) == splits
  assert temporal_tagger.split_by_dialog(ids, seed=1) != splits


def _dialog_rows(path):
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_weak_supervision_task_splits_by_dialog_and_leaves_out_test_dialogs(tmp_path, gin_bindings,
                                                                             capsys):
  test_item = json.loads(QUICKSTART_TEST.read_text())[3]
  # The test dialog as an unlabeled corpus would hold it: the span in place, spacing changed.
  copied = [re.sub(r"^([AB]): ", r"\1:", turn.replace("<MASK>", test_item["correct1"])).upper()
            for turn in test_item["conversation"]]
  # A dialog with one distinct span: its negatives come from the corpus's span pool (Table 4).
  lonely = {"id": "lonely", "conversation": ["A: Wait two days.", "B: Two days?"]}
  rows = _dialog_rows(QUICKSTART_DIALOGS) + [lonely, {"id": "copied", "conversation": copied}]
  path = tmp_path / "dialogs.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  gin_bindings(**{"t5_tasks.tasks.data_files.files": {
      "dialogs": {"all": str(path)}, "timedial": {"test": str(QUICKSTART_TEST)}}})
  task = seqio.get_mixture_or_task("timedial_weak_supervision")
  dialogs, lonely_items = {}, []
  for split in ("train", "validation"):
    ds = task.get_dataset(LENGTHS, split=split, shuffle=False)
    examples = list(ds.as_numpy_iterator())
    dialogs[split] = {ex["id"].decode().split("/")[0] for ex in examples}
    lonely_items += [ex for ex in examples if ex["id"].decode().startswith("lonely/")]
  assert len(lonely_items) == 2  # one per span
  assert all(len(ex["candidates"]) == 4 and list(ex["candidate_labels"]) == [1, 0, 0, 0]
             for ex in lonely_items)
  assert "copied" not in dialogs["train"] | dialogs["validation"]
  assert not dialogs["train"] & dialogs["validation"]
  assert dialogs["train"] | dialogs["validation"] == {r["id"] for r in rows} - {"copied"}
  assert len(dialogs["validation"]) == round(temporal_tagger.VALIDATION_FRACTION * (len(rows) - 1))
  out = capsys.readouterr().out.splitlines()
  assert [line for line in out if "left out" in line] == [
      f"timedial_weak_supervision: left out 1 of {len(rows)} dialogs found in the TimeDial test set "
      f"(16 test items: {QUICKSTART_TEST})"]
  kept = [(r["id"], r["conversation"]) for r in rows if r["id"] != "copied"]
  spans = sum(len(temporal_tagger.dialog_spans(turns)) for _, turns in kept)
  pool = len(temporal_tagger.span_pool(kept))
  assert [line for line in out if "tagged by" in line] == [
      f"timedial_weak_supervision: {spans} temporal spans in {len(kept)} dialogs (a pool of {pool} "
      f"distinct), tagged by {timedial_family.REGEX_TAGGER}"]
  assert "not SUTime" in timedial_family.REGEX_TAGGER


# Tagged by hand as SUTime would (TIMEX3 types) at the very spans the regex tagger finds, of the
# categories it gives them (duration, time, date), so both taggers' files must make the same items.
SUTIME_DIALOGS = [
    ("s1", ["A: The flight takes 3 hours.", "B: Then we land at 6 pm.", "A: On May 5th, I hope."],
     [(0, "3 hours", "DURATION"), (1, "6 pm", "TIME"), (2, "May 5th", "DATE")]),
    ("s2", ["A: I waited two weeks for the parts.", "B: Two weeks is long."],
     [(0, "two weeks", "DURATION"), (1, "Two weeks", "DURATION")]),
    ("s3", ["A: The clinic opens at 9 am.", "B: It shuts at 5 pm.",
            "A: I need forty minutes to get there."],
     [(0, "9 am", "TIME"), (1, "5 pm", "TIME"), (2, "forty minutes", "DURATION")]),
    ("s4", ["A: We met in June 2019.", "B: And married after 18 months."],
     [(0, "June 2019", "DATE"), (1, "18 months", "DURATION")]),
    ("s5", ["A: How was the trip?", "B: Fine, thanks."], []),
    ("s6", ["A: My shift is 12 hours.", "B: Mine is eight hours, starting at 7:30 am."],
     [(0, "12 hours", "DURATION"), (1, "eight hours", "DURATION"), (1, "7:30 am", "TIME")]),
    ("s7", ["A: The lease ends on the 3rd of March.",
            "B: So we have 10 days to pack, the truck at 11 am."],
     [(0, "the 3rd of March", "DATE"), (1, "10 days", "DURATION"), (1, "11 am", "TIME")]),
    ("s8", ["A: The course lasts six weeks.", "B: I did it in 2015 in four weeks."],
     [(0, "six weeks", "DURATION"), (1, "2015", "DATE"), (1, "four weeks", "DURATION")]),
]


def _sutime_record(dialog_id, conversation, spans):
  out = []
  for turn, text, kind in spans:
    start = conversation[turn].index(text)
    out.append({"turn": turn, "start": start, "end": start + len(text), "text": text, "type": kind})
  return {"id": dialog_id, "conversation": conversation, "spans": out}


def _bound_examples(gin_bindings, dialogs):
  gin_bindings(**{"t5_tasks.tasks.data_files.files": {
      "dialogs": dialogs, "timedial": {"test": str(QUICKSTART_TEST)}}})
  source = seqio.get_mixture_or_task("timedial_weak_supervision").source
  return {split: source.examples(split) for split in ("train", "validation")}


def test_sutime_spans_bound_as_a_file_make_the_items_the_regex_tagger_would(tmp_path, gin_bindings,
                                                                             capsys):
  for _, conversation, spans in SUTIME_DIALOGS:  # the premise: the same spans either way
    assert [(turn, s.text, s.category) for turn, s in temporal_tagger.dialog_spans(conversation)] == [
        (turn, text, kind.lower()) for turn, text, kind in spans]
  tagged, plain = tmp_path / "sutime.jsonl", tmp_path / "dialogs.jsonl"
  tagged.write_text("".join(json.dumps(_sutime_record(*d)) + "\n" for d in SUTIME_DIALOGS))
  plain.write_text("".join(json.dumps({"id": i, "conversation": c}) + "\n"
                           for i, c, _ in SUTIME_DIALOGS))
  from_sutime = _bound_examples(gin_bindings, {"sutime": str(tagged)})
  out = capsys.readouterr().out
  assert (f"timedial_weak_supervision: 19 temporal spans in 8 dialogs (a pool of 18 distinct), tagged "
          f"by SUTime (the 'sutime' file {tagged})") in out
  # Positives at exactly the file's spans, one item each; s5 has none.
  items = {ex["id"]: ex for split in from_sutime.values() for ex in split}
  expected = {}
  for dialog_id, conversation, spans in SUTIME_DIALOGS:
    for turn, text, _ in spans:
      start = conversation[turn].index(text)
      masked = list(conversation)
      masked[turn] = masked[turn][:start] + "<MASK>" + masked[turn][start + len(text):]
      expected[f"{dialog_id}/{turn}:{start}"] = (masked, turn, text)
  assert {i: (ex["conversation"], ex["mask_turn"], ex["candidates"][0])
          for i, ex in items.items()} == expected
  assert all(len(ex["candidates"]) == 4 and ex["candidate_labels"] == [1, 0, 0, 0]
             for ex in items.values())
  assert len(from_sutime["validation"]) > 0 and {i.split("/")[0] for i in items} == {
      d[0] for d in SUTIME_DIALOGS} - {"s5"}
  # Negatives as the regex path draws them, from the dialog and then the pool: the same items.
  from_regex = _bound_examples(gin_bindings, {"all": str(plain)})
  assert from_sutime == from_regex
  assert "tagged by the project's regex tagger" in capsys.readouterr().out


def test_sutime_spans_are_bound_alone(tmp_path, gin_bindings):
  tagged = tmp_path / "sutime.jsonl"
  tagged.write_text(json.dumps(_sutime_record(*SUTIME_DIALOGS[0])) + "\n")
  with pytest.raises(ValueError, match="bind {'sutime': PATH} alone"):
    _bound_examples(gin_bindings, {"sutime": str(tagged), "all": str(QUICKSTART_DIALOGS)})


def _test_conversations(path):
  return [item.conversation for item in timedial.read_timedial(path)[0]]


@pytest.mark.parametrize("source", ["quickstart", "shared"])
def test_quickstart_dialogs_share_no_dialog_with_timedial(source, request):
  path = (QUICKSTART_TEST if source == "quickstart"
          else request.getfixturevalue("shared_data") / "timedial" / "test_first400.json")
  conversations = _test_conversations(path)
  test = temporal_tagger.TimeDialTestDialogs(conversations)
  assert len(test) == len(conversations)
  dialogs = [r["conversation"] for r in _dialog_rows(QUICKSTART_DIALOGS)]
  assert 20 <= len(dialogs) and not [d for d in dialogs if d in test]
  test_turns = {temporal_tagger.normalise_turn(t) for c in conversations for t in c}
  assert not {temporal_tagger.normalise_turn(t) for d in dialogs for t in d} & test_turns
  # The filter does find each test dialog with its gold span filled in.
  filled = [[t.replace("<MASK>", "forty-eight hours") for t in c] for c in conversations]
  assert all(c in test for c in filled)


def _write(tmp_path, item):
  path = tmp_path / "test.json"
  path.write_text(json.dumps([item]))
  return path


@pytest.mark.parametrize("change, field", [
    (lambda x: x["conversation"].__setitem__(3, "B: no mask here"), "conversation"),
    (lambda x: x["conversation"].__setitem__(0, "A: <MASK> twice"), "conversation"),
    (lambda x: x.pop("correct2"), "correct2"),
    (lambda x: x.__setitem__("incorrect1", 12), "incorrect1"),
])
def test_broken_records_still_fail_with_file_index_and_field(tmp_path, change, field):
  item = json.loads(QUICKSTART_TEST.read_text())[0]
  change(item)
  path = _write(tmp_path, item)
  with pytest.raises(records.RecordError, match=rf"test.json: index 0: field '{field}'"):
    timedial.read_timedial(path)


def test_normalisations_are_counted_and_told_once(tmp_path, capsys):
  item = json.loads(QUICKSTART_TEST.read_text())[0]
  item["conversation"] = [re.sub(r"^A: ", "A:", t) for t in item["conversation"]] + ["", " "]
  item["correct2"] += " "
  item["incorrect1"] = " " + item["incorrect1"]
  path = _write(tmp_path, item)
  [read], report = timedial.read_timedial(path)
  assert report.normalised == {timedial.OPTIONS_STRIPPED: 2, timedial.SPEAKER_SPACED: 2,
                               timedial.EMPTY_TURNS_DROPPED: 2}
  assert read.conversation[0].startswith("A: ") and read.correct[1] == read.correct[1].strip()
  assert "normalised: 2 options stripped of surrounding spaces" in report.summary()
  families_base.read(timedial.read_timedial, str(path))
  families_base.read(timedial.read_timedial, str(path))
  assert capsys.readouterr().out.count("1 records read, 0 skipped; normalised: ") == 1


def test_the_real_release_reads_as_it_is(shared_data):
  path = shared_data / "timedial" / "test_first400.json"
  raw = json.loads(path.read_text())
  items, report = timedial.read_timedial(path)
  assert len(items) == report.read == len(raw) == 400 and report.skipped == 0
  # Counted here from the raw JSON, apart from the reader.
  options = ("correct1", "correct2", "incorrect1", "incorrect2")
  stripped = sum(r[k] != r[k].strip() for r in raw for k in options)
  empty = 0
  for r in raw:
    turns = list(r["conversation"])
    while turns and not turns[-1].strip():
      turns.pop()
      empty += 1
  tight = sum(bool(re.match(r"[AB]:[^ ]", t)) for r in raw for t in r["conversation"])
  assert stripped > 0 and empty > 0 and tight > 0
  assert report.normalised == {timedial.OPTIONS_STRIPPED: stripped, timedial.SPEAKER_SPACED: tight,
                               timedial.EMPTY_TURNS_DROPPED: empty}
  assert all(option == option.strip() for item in items for option in item.correct + item.incorrect)
  assert not any(re.match(r"[AB]:[^ ]", turn) for item in items for turn in item.conversation)
  per_rule = collections.defaultdict(lambda: {"options": 0, "items": 0})
  for r in raw:
    rules = [r["incorrect1_rule"], r["incorrect2_rule"]]
    for rule in set(rules):
      per_rule[rule]["options"] += rules.count(rule)
      per_rule[rule]["items"] += 1
  assert timedial.count_per_rule(items) == dict(per_rule)
  assert sorted(per_rule) == ["Rule 1", "Rule 2", "Rule 3"]
  assert np.sum([c["options"] for c in per_rule.values()]) == 2 * len(raw)
