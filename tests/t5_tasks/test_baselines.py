"""Lexical baselines: hand cases, quickstart data end to end, and the real ASQ file."""
import json
import pathlib

from absl import flags
import numpy as np
import pytest

from runner import outputs
from scripts import run_baseline
from t5_tasks.baselines import CandidateItem, accuracy_metrics, prediction_record
from t5_tasks.baselines import asq_similarity
from t5_tasks.baselines import preference_heuristics
from t5_tasks.baselines import tfidf_advice
from t5_tasks.baselines import timedial_overlap
from t5_tasks.sources import asq
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import timedial
from t5_tasks.sources import turingadvice

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "t5_tasks" / "data"


def test_heuristic_scorers_by_hand():
  assert preference_heuristics.response_length("ignored", "Try it, then call me.") == 5
  # Bigrams of the response: "the cat", "cat sat", "sat down"; two occur in the context.
  copying = preference_heuristics.bigram_copying("The cat sat on the mat", "the cat sat down")
  assert copying == pytest.approx(2 / 3)
  assert preference_heuristics.bigram_copying("anything", "one") == 0.0


def test_prediction_record_and_accuracy():
  items = [CandidateItem("t", "a", "", ("x", "y"), (0, 1)), CandidateItem("t", "b", "", ("x", "y"), (1, 0))]
  records = [prediction_record(items[0], [0.1, 0.9]), prediction_record(items[1], [0.2, 0.8]),
             {**prediction_record(items[1], [0.5, 0.5]), "group": "tied"}]
  assert records[0] == {"task": "t", "id": "a", "scores": [0.1, 0.9], "prediction": 1, "gold": [0, 1]}
  metrics = accuracy_metrics(records, by="group")
  assert metrics["accuracy"]["value"] == pytest.approx((1 + 0 + 0.5) / 3)  # The tie earns half.
  assert metrics["accuracy/tied"]["value"] == 0.5 and set(metrics) == {"accuracy", "accuracy/tied"}
  with pytest.raises(ValueError, match="item 'a': 1 scores for 2 candidates"):
    prediction_record(items[0], [1.0])


def test_timedial_overlap_falls_for_phrase_matching():
  item = timedial.TimeDialItem("d", ("A: we met ten years ago", "B: it took <MASK> to drive here"), 1,
                               ("two hours", "an hour"), ("ten years", "two weeks"), ("Rule 1", "Rule 3"))
  (record,) = timedial_overlap.predict(timedial_overlap.items_from_timedial([item]))
  # "ten years" is copied from the dialog (1.0); "two hours" and "an hour" share nothing (0.0).
  assert record["scores"] == [0.0, 0.0, 1.0, 0.0]
  metrics = timedial_overlap.metrics([record])["timedial"]
  assert metrics["two_best_accuracy"]["value"] == 0.0
  assert metrics["error_rate/Rule 1"]["value"] == 1.0
  # "two weeks" ties with the correct options: it beats the weaker one half the time.
  assert metrics["error_rate/Rule 3"]["value"] == 0.5


def test_timedial_overlap_on_quickstart():
  items, _ = timedial.read_timedial(str(DATA / "timedial_test.json"))
  records = timedial_overlap.predict(timedial_overlap.items_from_timedial(items))
  raw = json.load(open(DATA / "timedial_test.json"))
  assert len(records) == len(raw)
  first = raw[0]
  dialog = set(w for turn in first["conversation"] for w in turn.lower().replace("<mask>", " ").split())
  option = first["incorrect1"].lower().split()
  assert records[0]["scores"][2] == pytest.approx(sum(w in dialog for w in option) / len(option))
  metrics = timedial_overlap.metrics(records)["timedial"]
  assert set(metrics) >= {"two_best_accuracy", "accuracy", "error_rate/Rule 1"}


def _asq_accuracy(model, test_items) -> float:
  scores = model.score(test_items)
  return float(np.mean([int(np.argmax(s)) == it.gold.index(1) for s, it in zip(scores, test_items)]))


def test_asq_similarity_on_quickstart():
  train, _ = asq.read_asq(str(DATA / "asq_train.json"))
  test, _ = asq.read_asq(str(DATA / "asq_test.json"))
  model = asq_similarity.AsqSimilarity().fit(asq_similarity.items_from_asq(train))
  assert all(w > 0 for w in model.weights.values())  # More similar to the narrative: more likely asked.
  assert 0.0 <= _asq_accuracy(model, asq_similarity.items_from_asq(test)) <= 1.0


def test_asq_similarity_beats_65_percent_on_real_data(shared_data):
  path = shared_data / "asq" / "asq_test_first1000.json"
  raw = json.load(open(path, encoding="utf-8"))
  items, _ = asq.read_asq(str(path))
  train, test = asq_similarity.items_from_asq(items[:700]), asq_similarity.items_from_asq(items[700:])
  model = asq_similarity.AsqSimilarity().fit(train)
  scores = model.score(test)
  accuracy = np.mean([int(np.argmax(s)) == row["label"] for s, row in zip(scores, raw[700:])])
  print(f"ASQ similarity baseline, 700 train / 300 test: accuracy {accuracy:.3f}")
  assert accuracy > 0.65


def test_asq_similarity_swapping_questions_swaps_scores():
  items, _ = asq.read_asq(str(DATA / "asq_train.json"))
  train = asq_similarity.items_from_asq(items)
  model = asq_similarity.AsqSimilarity().fit(train)
  swapped = [CandidateItem(it.task, it.id, it.context, it.candidates[::-1], it.gold[::-1]) for it in train]
  assert np.allclose(np.asarray(model.score(swapped)), np.asarray(model.score(train))[:, ::-1])


def test_tfidf_advice_answers_with_the_nearest_situations_top_comment():
  situations, _ = reddit_advice.read_reddit_advice(str(DATA / "reddit_advice_2019.jsonl"))
  train = [s for s in situations if s.split == "train"]
  retriever = tfidf_advice.TfidfAdviceRetriever().fit(train)
  own = [{"title": s.title, "selftext": s.selftext, "subreddit": s.subreddit} for s in train]
  best = [max(s.good_comments, key=lambda c: c.score).body for s in train]
  assert retriever(own) == best
  assert [i for i, _ in retriever.retrieve(own)] == [s.id for s in train]
  test = [s for s in situations if s.split == "test"]
  answers = retriever([{"title": s.title, "selftext": s.selftext, "subreddit": s.subreddit} for s in test])
  assert len(answers) == len(test) and set(answers) <= set(best)
  with pytest.raises(ValueError, match="instance 0: missing or non-string field 'selftext'"):
    retriever([{"title": "t", "subreddit": "Advice"}])


def test_tfidf_advice_on_real_turingadvice_situations(shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  situations, _ = turingadvice.read_turingadvice_eval(str(path))
  train, _ = reddit_advice.read_reddit_advice(str(DATA / "reddit_advice_2019.jsonl"))
  retriever = tfidf_advice.TfidfAdviceRetriever().fit(train)
  answers = retriever([{"title": s.title, "selftext": s.selftext, "subreddit": s.subreddit}
                       for s in situations])
  assert len(answers) == len(situations) and all(answers)


def _run_baseline(tmp_path, *args) -> dict:
  out = tmp_path / "out"
  fv = flags.FlagValues()
  run_baseline.define_flags(fv)
  fv(["run_baseline", *args, f"--out={out}"])
  run_baseline.run(fv)
  assert (out / "report.html").exists() and list(out.glob("plot_*.png"))
  return {"predictions": outputs.read_predictions(str(out / "predictions.jsonl")),
          "metrics": outputs.read_metrics(str(out))}


def test_run_baseline_asq_writes_evaluation_outputs(tmp_path):
  run = _run_baseline(tmp_path, "--baseline=asq_similarity", f"--train_file={DATA / 'asq_train.json'}",
                      f"--eval_file={DATA / 'asq_test.json'}",
                      f"--annotation_files={DATA / 'asq_human_annotation_first.json'},"
                      f"{DATA / 'asq_human_annotation_second.json'}")
  raw = json.load(open(DATA / "asq_test.json"))
  assert [p["id"] for p in run["predictions"]] == [r["id"] for r in raw]
  # A tie between the two questions is a coin flip: half credit.
  credit = [0.5 if p["scores"][0] == p["scores"][1] else float(int(np.argmax(p["scores"])) == r["label"])
            for p, r in zip(run["predictions"], raw)]
  assert run["metrics"]["asq"]["accuracy"]["value"] == pytest.approx(np.mean(credit))
  assert any(p["pair_type"] for p in run["predictions"])


def test_run_baseline_length_on_turingadvice(tmp_path, shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  run = _run_baseline(tmp_path, "--baseline=length", "--eval_format=turingadvice", f"--eval_file={path}")
  assert len(run["predictions"]) == 600
  good_longer = [(p["scores"][0] > p["scores"][1]) + 0.5 * (p["scores"][0] == p["scores"][1])
                 for p in run["predictions"]]
  accuracy = run["metrics"]["turingadvice_preference"]["pairwise_accuracy"]["value"]
  assert accuracy == pytest.approx(np.mean(good_longer))


def test_run_baseline_timedial_and_tfidf_on_quickstart(tmp_path):
  run = _run_baseline(tmp_path, "--baseline=timedial_overlap", f"--eval_file={DATA / 'timedial_test.json'}")
  assert "error_rate/Rule 1" in run["metrics"]["timedial"]
  assert len(run["predictions"]) == len(json.load(open(DATA / "timedial_test.json")))
  run = _run_baseline(tmp_path, "--baseline=tfidf_advice", f"--train_file={DATA / 'reddit_advice_2019.jsonl'}",
                      f"--eval_file={DATA / 'reddit_advice_2019.jsonl'}", "--eval_split=val")
  assert len(run["predictions"]) == 4 and all(p["generation"] for p in run["predictions"])


def test_run_baseline_asq_needs_training_data(tmp_path):
  with pytest.raises(Exception, match="needs --train_file or --train_fraction"):
    _run_baseline(tmp_path, "--baseline=asq_similarity", f"--eval_file={DATA / 'asq_test.json'}")
