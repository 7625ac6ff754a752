"""Lexical baselines on task examples: hand cases and the quickstart data."""
import pathlib

import gin
import numpy as np
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  (registers the tasks)
from t5_tasks.baselines import asq_similarity
from t5_tasks.baselines import example_context
from t5_tasks.baselines import preference_heuristics
from t5_tasks.baselines import tfidf_advice
from t5_tasks.baselines import timedial_overlap
from t5_tasks.sources import reddit_advice
from t5_tasks.sources import turingadvice

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "t5_tasks" / "data"


@pytest.fixture
def quickstart_examples():
  """fn(task name, split) -> the task's examples read from the quickstart files."""
  gin.clear_config()
  yield lambda name, split: seqio.get_mixture_or_task(name).source.examples(split)
  gin.clear_config()


def test_heuristic_scorers_by_hand():
  assert preference_heuristics.response_length("ignored", "Try it, then call me.") == 5
  # Bigrams of the response: "the cat", "cat sat", "sat down"; the first two occur in the
  # context in that order (their longest common subsequence with its bigrams).
  copying = preference_heuristics.lcs_bigram_copying("The cat sat on the mat", "the cat sat down")
  assert copying == pytest.approx(2 / 3)
  assert preference_heuristics.lcs_bigram_copying("anything", "one") == 0.0


def test_example_context_of_each_task_family():
  dialog = {"conversation": ["A: hi", "B: <MASK> later"], "inputs": "x"}
  assert example_context(dialog) == "A: hi\nB: <MASK> later"
  assert example_context({"context_labels": ["Title", "Story"], "context_texts": ["T", "S"]}) == "T\nS"
  assert example_context({"subreddit": "r", "title": "T", "post": "P"}) == "T\nP"
  assert example_context({"inputs": "A narrative."}) == "A narrative."
  with pytest.raises(ValueError, match=r"example 'x7': no context field .* among \['candidates', 'id'\]"):
    example_context({"id": "x7", "candidates": ["a", "b"]})


def test_copying_scores_a_summary_example_against_title_and_post():
  example = {"id": "p#1", "subreddit": "advice", "title": "my cat sat", "post": "on the mat all day",
             "candidates": ["the mat all day", "the cat sat"], "candidate_labels": [1, 0]}
  # "the mat", "mat all", "all day" all occur in the post; of "the cat" and "cat sat" only the
  # second occurs, in the title.
  scores = preference_heuristics.score_example(example, preference_heuristics.lcs_bigram_copying)
  assert scores == pytest.approx([1.0, 1 / 2])


def test_timedial_overlap_falls_for_phrase_matching():
  example = {"id": "d", "conversation": ["A: we met ten years ago", "B: it took <MASK> to drive here"],
             "mask_turn": 1, "candidates": ["two hours", "an hour", "ten years", "two weeks"],
             "candidate_labels": [1, 1, 0, 0], "candidate_rules": ["", "", "Rule 1", "Rule 3"]}
  # "ten years" is copied from the dialog (1.0); the others share no word with it.
  assert timedial_overlap.score(example) == [0.0, 0.0, 1.0, 0.0]


def test_asq_similarity_on_quickstart(quickstart_examples):
  model = asq_similarity.AsqSimilarity().fit(quickstart_examples("asq_intent_cloze", "train"))
  assert all(w > 0 for w in model.weights.values())  # More similar to the narrative: more likely asked.
  test = quickstart_examples("asq_intent_cloze", "test")
  scores = np.asarray(model.score(test))
  assert scores.shape == (len(test), 2)
  # The score is the learned combination of the two similarity features.
  assert np.allclose(scores, model.features(test) @ np.asarray(list(model.weights.values())))


def test_asq_similarity_swapping_questions_swaps_scores(quickstart_examples):
  train = quickstart_examples("asq_intent_cloze", "train")
  model = asq_similarity.AsqSimilarity().fit(train)
  swapped = [{**e, "candidates": e["candidates"][::-1], "candidate_labels": e["candidate_labels"][::-1]}
             for e in train]
  assert np.allclose(np.asarray(model.score(swapped)), np.asarray(model.score(train))[:, ::-1])


def test_asq_similarity_needs_two_candidates_one_correct():
  example = {"id": "q9", "inputs": "n", "candidates": ["a", "b"], "candidate_labels": [1, 1]}
  with pytest.raises(ValueError, match="example 'q9': needs two candidates with exactly one correct"):
    asq_similarity.AsqSimilarity().fit([example])


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
