"""scripts.run_baseline is a model evaluation with another scorer: same items, records and metrics.

The model side is runner.evaluate's own path (score_task over the tokenized task, then
task_metrics) with a scorer that replays the baseline's scores item by item; the two must write
the same metrics.json. Group counts and values are also checked against hand computations.
"""
import json
import os
import pathlib
import re
import subprocess
import sys

from absl import app
from absl import flags
import gin
import numpy as np
import pytest
import seqio

from runner import eval_metrics
from runner import outputs
from runner import scoring_loop
from scripts import run_baseline
import t5_tasks  # pylint: disable=unused-import  # registers the tasks (run_baseline imports it only when it runs)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "t5_tasks" / "data"
FEATURE_LENGTHS = {"inputs": 512, "targets": 128}
# Pair groups of the quickstart ASQ test items, worked out by hand from the first annotation round
# (t5_tasks/data/asq_human_annotation_first.json, which wins over the second): (true, paired)
# question types 1 = likely, 2 = unlikely (both compatible), 3 = explicit, 4 = implicit.
QUICKSTART_ASQ_GROUPS = {
    "C+E": {"qs_te01", "qs_te06", "qs_te10"},                                  # (1, 3)
    "C+{C,I}": {"qs_te02", "qs_te03", "qs_te04", "qs_te05", "qs_te07", "qs_te09"},
    "C+C": {"qs_te03", "qs_te04", "qs_te05", "qs_te09"},                       # (1|2, 1|2)
    "L+{U,I}": {"qs_te02", "qs_te04", "qs_te07"},                              # (1, 2|4)
}


@pytest.fixture(autouse=True)
def clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def _outputs(out: pathlib.Path) -> tuple[list[dict], dict]:
  assert (out / "report.html").exists() and list(out.glob("plot_*.png"))
  return outputs.read_predictions(str(out / outputs.PREDICTIONS_FILE)), outputs.read_metrics(str(out))


def _run(out: pathlib.Path, *args) -> tuple[list[dict], dict]:
  fv = flags.FlagValues()
  run_baseline.define_flags(fv)
  fv(["run_baseline", *args, f"--out={out}"])
  run_baseline.run(fv)
  return _outputs(out)


def _model_evaluation(task_name, split, files, replayed: list[dict], out: pathlib.Path):
  """(records, metrics) of runner.evaluate on the task, its scorer replaying `replayed`'s scores."""
  gin.bind_parameter(run_baseline.DATA_FILES, files)
  scores = iter(r["scores"] for r in replayed)

  def replay(params, arrays, lengths):
    del params
    item_scores = next(scores)
    assert arrays["input_ids"].shape[0] == 1 and lengths["tokens"].shape == (1, len(item_scores))
    return {"scores": np.asarray([item_scores])}
  with outputs.PredictionsAppender(str(out)) as appender:
    scoring_loop.score_task(task_name, split, FEATURE_LENGTHS, 1, replay, None, appender)
    path = appender.path
  assert next(scores, None) is None, "the model evaluation scored fewer items than the baseline"
  records = outputs.read_predictions(path)
  return records, {task_name: eval_metrics.task_metrics(seqio.get_mixture_or_task(task_name), records)}


def _assert_same_evaluation(baseline: tuple[list[dict], dict], model: tuple[list[dict], dict]):
  (baseline_records, baseline_metrics), (model_records, model_metrics) = baseline, model
  assert [r["id"] for r in baseline_records] == [r["id"] for r in model_records]
  for ours, theirs in zip(baseline_records, model_records):
    # The model's records add the tokenized texts (*_pretokenized); everything else agrees.
    assert ours == {k: theirs[k] for k in ours}
  assert baseline_metrics == model_metrics


def _credit(scores, gold) -> float:
  """Top-1 credit with ties broken at random: the share of the best-scored candidates that are correct."""
  best = [i for i, s in enumerate(scores) if s == max(scores)]
  return sum(gold[i] for i in best) / len(best)


def test_asq_baseline_is_the_model_evaluation_with_another_scorer(tmp_path):
  files = {"asq": {"train": str(DATA / "asq_train.json"), "test": str(DATA / "asq_test.json")}}
  # In this process: tests/test_readme.py runs the README's same command as a subprocess.
  baseline = _run(tmp_path / "baseline", "--baseline=asq_similarity",
                  f"--train_file={files['asq']['train']}", f"--eval_file={files['asq']['test']}")
  records, metrics = baseline
  raw = json.load(open(DATA / "asq_test.json", encoding="utf-8"))
  assert [r["id"] for r in records] == [row["id"] for row in raw]
  assert [r["gold"] for r in records] == [[1, 0] if row["label"] == 0 else [0, 1] for row in raw]
  by_name = metrics["asq_intent_cloze"]
  assert set(by_name) == {"accuracy"} | {f"accuracy/{g}" for g in QUICKSTART_ASQ_GROUPS}
  assert by_name["accuracy"]["value"] == pytest.approx(np.mean([_credit(r["scores"], r["gold"])
                                                                for r in records]))
  for group, ids in QUICKSTART_ASQ_GROUPS.items():
    members = [r for r in records if group in r["pair_groups"].split("|")]
    assert {r["id"] for r in members} == ids, group
    assert by_name[f"accuracy/{group}"]["value"] == pytest.approx(
        np.mean([_credit(r["scores"], r["gold"]) for r in members])), group
  _assert_same_evaluation(baseline, _model_evaluation("asq_intent_cloze", "test", files, records,
                                                      tmp_path / "model"))


def test_asq_baseline_says_what_it_is_with_and_without_a_glove_file(tmp_path, capsys):
  """ASQ §5 / Table 5: the paper's baseline has four feature families, two of them GloVe's. Without
  --glove_file the printed name and metrics.json's provenance say it is the reduced two-feature one;
  with a (tiny, written here) GloVe file it has all four, and the file's coverage is said."""
  train, test = f"--train_file={DATA / 'asq_train.json'}", f"--eval_file={DATA / 'asq_test.json'}"
  _run(tmp_path / "reduced", "--baseline=asq_similarity", train, test)
  reduced_name = "asq_similarity (tf-idf + overlap; no GloVe file: the paper's word-vector features are off)"
  assert f"baseline: {reduced_name}" in capsys.readouterr().out.splitlines()
  provenance = outputs.read_provenance(str(tmp_path / "reduced"))
  assert provenance["baseline"] == reduced_name and provenance["glove_file"] is None
  assert provenance["features"] == ["tfidf_cosine", "content_overlap"]
  assert f"Baseline {reduced_name}" in (tmp_path / "reduced" / "report.html").read_text().replace("&#x27;", "'")

  words = sorted({w for path in ("asq_train.json", "asq_test.json")
                  for row in json.load(open(DATA / path, encoding="utf-8"))
                  for text in (row["narrative"], row["qn1"], row["qn2"]) for w in re.findall(r"\b\w\w+\b", text.lower())})
  rng = np.random.default_rng(0)
  glove = tmp_path / "glove.txt"
  glove.write_text("".join(f"{w} {' '.join(f'{x:.4f}' for x in rng.normal(size=4))}\n" for w in words[::2])
                   + "unused_word 1 2 3 4\n")
  _, metrics = _run(tmp_path / "full", "--baseline=asq_similarity", train, test, f"--glove_file={glove}")
  lines = capsys.readouterr().out.splitlines()
  provenance = outputs.read_provenance(str(tmp_path / "full"))
  assert provenance["features"] == ["tfidf_cosine", "content_overlap", "tfidf_glove_cosine", "mean_glove_cosine"]
  assert provenance["glove_file"] == str(glove) and provenance["baseline"].startswith(
      "asq_similarity (the paper's features: tf-idf, tf-idf-weighted GloVe, averaged GloVe, overlap; GloVe file")
  assert provenance["glove"]["words"] == len(words[::2]) + 1
  assert provenance["glove"]["words_used"] == len(words[::2])
  assert f"baseline: {provenance['baseline']}" in lines
  assert any(line.startswith(f"GloVe file {glove}: {len(words[::2]) + 1} words of dimension 4, "
                             f"{len(words[::2])} of them used;") for line in lines), lines
  assert set(metrics["asq_intent_cloze"]) >= {"accuracy"}

  glove.write_text("the 0.1 0.2\ncoffee 0.3 oops\n")
  with pytest.raises(ValueError, match=re.escape(f"{glove}: line 2: field 3: 'oops' is not a finite number")):
    _run(tmp_path / "bad", "--baseline=asq_similarity", train, test, f"--glove_file={glove}")
  with pytest.raises(app.UsageError, match="--glove_file is asq_similarity's; timedial_overlap has no"):
    _run(tmp_path / "other", "--baseline=timedial_overlap", f"--eval_file={DATA / 'timedial_test.json'}",
         f"--glove_file={glove}")


def test_timedial_baseline_metrics_by_hand_and_as_the_model_evaluation(tmp_path):
  path = DATA / "timedial_test.json"
  baseline = _run(tmp_path / "baseline", "--baseline=timedial_overlap", f"--eval_file={path}")
  records, metrics = baseline
  raw = json.load(open(path, encoding="utf-8"))
  words = lambda text: re.findall(r"\w+", text.lower())
  credit, errors = [], {}
  for row in raw:
    dialog = {w for turn in row["conversation"] for w in words(turn)}
    options = [row["correct1"], row["correct2"], row["incorrect1"], row["incorrect2"]]
    scores = [np.mean([w in dialog for w in words(o)]) for o in options]
    credit.append(_credit(scores, [1, 1, 0, 0]))
    weakest_correct = min(scores[:2])
    for score, rule in zip(scores[2:], (row["incorrect1_rule"], row["incorrect2_rule"])):
      errors.setdefault(rule, []).append(float(score > weakest_correct) + 0.5 * (score == weakest_correct))
  by_name = metrics["timedial_cloze_full"]
  assert len(records) == len(raw)
  assert set(by_name) == {"two_best_accuracy", "accuracy"} | {f"error_rate/{rule}" for rule in errors}
  assert by_name["accuracy"]["value"] == pytest.approx(np.mean(credit))
  for rule, rule_errors in errors.items():
    assert by_name[f"error_rate/{rule}"]["value"] == pytest.approx(np.mean(rule_errors)), rule
  _assert_same_evaluation(baseline, _model_evaluation(
      "timedial_cloze_full", "test", {"timedial": {"test": str(path)}}, records, tmp_path / "model"))


def test_length_baseline_on_summaries_counts_words_of_the_test_comparisons(tmp_path):
  path = DATA / "summarize_comparisons.jsonl"
  baseline = _run(tmp_path / "baseline", "--baseline=length", "--eval_format=summarize_feedback",
                  f"--eval_file={path}")
  records, metrics = baseline
  comparisons = [json.loads(line) for line in open(path, encoding="utf-8")]
  credit = []
  for c in comparisons:
    if c["split"] == "valid2":  # the released split the task evaluates as "test"
      preferred, other = (len(re.findall(r"\w+", s["text"])) for s in
                          (c["summaries"][c["choice"]], c["summaries"][1 - c["choice"]]))
      credit.append(float(preferred > other) + 0.5 * (preferred == other))
  assert len(records) == len(credit) > 0
  assert set(metrics["summarize_feedback_preference"]) == {"pairwise_accuracy"}  # human scores are 1/0
  accuracy = metrics["summarize_feedback_preference"]["pairwise_accuracy"]["value"]
  assert accuracy == pytest.approx(np.mean(credit))
  _assert_same_evaluation(baseline, _model_evaluation(
      "summarize_feedback_preference", "test", {"summarize_feedback": {"all": str(path)}}, records,
      tmp_path / "model"))


def test_turingadvice_file_is_scored_as_heap_ah(tmp_path):
  path = DATA / "turingadvice_eval.jsonl"
  baseline = _run(tmp_path / "baseline", "--baseline=copying", "--eval_format=turingadvice",
                  f"--eval_file={path}")
  assert set(baseline[1]) == {"heap_ah"}
  assert baseline[0] and all(r["task"] == "heap_ah" for r in baseline[0])
  _assert_same_evaluation(baseline, _model_evaluation(
      "heap_ah", "test", {"heap/turingadvice": {"all": str(path)}}, baseline[0],
      tmp_path / "model"))


def test_asq_on_real_data_trains_on_the_leading_share(tmp_path, shared_data):
  path = shared_data / "asq" / "asq_test_first1000.json"
  records, metrics = _run(tmp_path, "--baseline=asq_similarity", f"--eval_file={path}",
                          "--train_fraction=0.7")
  raw = json.load(open(path, encoding="utf-8"))
  assert [r["id"] for r in records] == [row["id"] for row in raw[700:]]
  credit = [_credit(r["scores"], [int(row["label"] == 0), int(row["label"] == 1)])
            for r, row in zip(records, raw[700:])]
  accuracy = metrics["asq_intent_cloze"]["accuracy"]["value"]
  print(f"ASQ similarity baseline, 700 train / 300 test: accuracy {accuracy:.3f}")
  assert accuracy == pytest.approx(np.mean(credit)) and accuracy > 0.65


def test_repeated_ids_are_numbered_as_the_model_evaluation_numbers_them():
  examples = [{"id": "a"}, {"id": "b"}, {"id": "a"}, {"id": 7}, {"id": "a"}]
  assert scoring_loop.distinct_ids([e["id"] for e in examples], {}) == ["a", "b", "a#1", "7", "a#2"]


def test_usage_errors(tmp_path):
  with pytest.raises(app.UsageError, match="needs --train_file or --train_fraction"):
    _run(tmp_path, "--baseline=asq_similarity", f"--eval_file={DATA / 'asq_test.json'}")
  with pytest.raises(ValueError,
                     match=r"--eval_format must be one of \['turingadvice', .*got 'heap:nope'"):
    _run(tmp_path, "--baseline=length", "--eval_format=heap:nope", f"--eval_file={DATA / 'asq_test.json'}")
  train_only = tmp_path / "train_only.jsonl"
  train_only.write_text("".join(line for line in open(DATA / "summarize_comparisons.jsonl", encoding="utf-8")
                                if json.loads(line)["split"] == "train"))
  with pytest.raises(ValueError, match="summarize_feedback_preference has no 'test' items in"):
    _run(tmp_path, "--baseline=length", "--eval_format=summarize_feedback", f"--eval_file={train_only}")


def test_tfidf_advice_answers_a_released_split(tmp_path):
  advice = DATA / "reddit_advice_2019.jsonl"
  records, metrics = _run(tmp_path, "--baseline=tfidf_advice", f"--train_file={advice}",
                          f"--eval_file={advice}", "--eval_split=val")
  assert len(records) == 4 and all(r["generation"] for r in records)
  assert set(metrics["advice_generation"]) == {"retrieval_similarity", "reference_similarity"}


def test_a_bad_record_is_one_line_naming_file_record_and_field_and_a_run_prints_no_library_lines(tmp_path):
  """As a user runs it, with the user's environment (no TF_CPP_MIN_LOG_LEVEL): a good file prints
  the project's lines only (no `failed call to cuInit` on a CPU machine, no absl C++ lines); a
  record without its field exits 1 with one line naming the file, the record and the field."""
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  good = subprocess.run([sys.executable, "-m", "scripts.run_baseline", "--baseline=timedial_overlap",
                         f"--eval_file={DATA / 'timedial_test.json'}", f"--out={tmp_path / 'good'}"],
                        cwd=ROOT, capture_output=True, text=True, env=env)
  assert good.returncode == 0 and good.stderr == "", good.stderr[-3000:]
  bad_file = tmp_path / "bad.json"
  rows = json.loads((DATA / "timedial_test.json").read_text())
  del rows[1]["conversation"]
  bad_file.write_text(json.dumps(rows))
  bad = subprocess.run([sys.executable, "-m", "scripts.run_baseline", "--baseline=timedial_overlap",
                        f"--eval_file={bad_file}", f"--out={tmp_path / 'bad'}"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
  assert bad.returncode == 1 and bad.stderr == f"error: {bad_file}: index 1: field 'conversation': missing\n", (
      bad.stderr[-3000:])
  assert not (tmp_path / "bad").exists()
