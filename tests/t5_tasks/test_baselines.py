"""Lexical baselines on task examples: hand cases and the quickstart data."""
import pathlib
import re

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


# ASQ §5 ("Baseline systems performance", Table 5): cosines between narrative and question with
# text as tf-idf vectors, tf-idf weighted GloVe, averaged GloVe, and content-word overlap.
TINY_GLOVE = {"coffee": [1.0, 0.0, 2.0], "tired": [0.0, 1.0, 0.5], "sleep": [0.5, 0.5, 0.0],
              "energize": [0.2, 1.5, -1.0], "addicted": [2.0, -1.0, 0.0], "the": [0.1, 0.1, 0.1],
              "how": [0.0, 0.3, 0.3], "lesson": [-1.0, 0.0, 1.0]}
ASQ_ITEMS = [
    {"id": "a", "inputs": "I am tired, I did not sleep and the coffee had no effect before the lesson.",
     "candidates": ["Is it possible to be addicted to coffee?", "How can I energize myself?"],
     "candidate_labels": [0, 1]},
    {"id": "b", "inputs": "I drink six cups of coffee a day, coffee is all I think about.",
     "candidates": ["Am I addicted to coffee?", "How do I sleep when tired?"], "candidate_labels": [1, 0]},
    {"id": "c", "inputs": "Zebras quietly graze.",  # no word with a vector: its GloVe cosines are 0
     "candidates": ["Why graze zebras?", "How sleep?"], "candidate_labels": [1, 0]},
]


def _write_glove(path, vectors) -> str:
  path.write_text("".join(f"{w} {' '.join(repr(x) for x in v)}\n" for w, v in vectors.items()))
  return str(path)


def _glove_features_by_numpy(items, vectors):
  """The two GloVe cosines of each (narrative, question), computed here from their definitions:
  tf-idf weights as sklearn's TfidfVectorizer(stop_words='english', sublinear_tf=True) makes them
  (tf 1 + ln count, idf ln((1 + n) / (1 + df)) + 1, fitted on every narrative and question)."""
  from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # pylint: disable=g-import-not-at-top
  words = lambda text: re.findall(r"\b\w\w+\b", text.lower())
  content = lambda text: [w for w in words(text) if w not in ENGLISH_STOP_WORDS]
  corpus = [e["inputs"] for e in items] + [q for e in items for q in e["candidates"]]
  df = {}
  for text in corpus:
    for w in set(content(text)):
      df[w] = df.get(w, 0) + 1
  idf = {w: np.log((1 + len(corpus)) / (1 + n)) + 1 for w, n in df.items()}

  def weighted(text):
    counts = {w: content(text).count(w) for w in set(content(text))}
    return sum(((1 + np.log(c)) * idf[w] * np.asarray(vectors[w]) for w, c in counts.items() if w in vectors),
               np.zeros(3))

  def mean(text):
    found = [vectors[w] for w in words(text) if w in vectors]
    return np.mean(found, axis=0) if found else np.zeros(3)

  def cos(a, b):
    return 0.0 if not a.any() or not b.any() else float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
  return np.asarray([[[cos(f(e["inputs"]), f(q)) for f in (weighted, mean)] for q in e["candidates"]]
                     for e in items])


def test_asq_similarity_glove_features_equal_numpy_on_a_tiny_glove_file(tmp_path):
  glove = asq_similarity.read_glove(_write_glove(tmp_path / "tiny.txt", TINY_GLOVE))
  assert glove.dim == 3 and glove.lines == len(TINY_GLOVE)
  model = asq_similarity.AsqSimilarity(glove).fit(ASQ_ITEMS)
  assert model.feature_names == ("tfidf_cosine", "content_overlap", "tfidf_glove_cosine", "mean_glove_cosine")
  features = model.features(ASQ_ITEMS)
  expected = _glove_features_by_numpy(ASQ_ITEMS, TINY_GLOVE)
  assert expected[:2].min() != 0 and (expected[2] == 0).all()  # the cases hold what they are for
  np.testing.assert_allclose(features[..., 2:], expected, rtol=1e-12, atol=1e-12)
  # The lexical features are the two-feature baseline's, unchanged.
  np.testing.assert_allclose(features[..., :2], asq_similarity.AsqSimilarity().fit(ASQ_ITEMS).features(ASQ_ITEMS))
  assert model.glove_coverage(ASQ_ITEMS) == {"texts": 9, "texts_without_vector": 2}  # "Zebras ..." and its 1st
  # Only the words asked for are kept; the file is read whole either way.
  kept = asq_similarity.read_glove(str(tmp_path / "tiny.txt"), {"coffee", "zebras"})
  assert set(kept.vectors) == {"coffee"} and kept.lines == len(TINY_GLOVE)


def test_asq_similarity_names_itself_by_its_features(tmp_path):
  reduced = asq_similarity.AsqSimilarity().fit(ASQ_ITEMS)
  assert reduced.name == ("asq_similarity (tf-idf + overlap; no GloVe file: the paper's word-vector "
                          "features are off)")
  assert set(reduced.weights) == {"tfidf_cosine", "content_overlap"}
  path = _write_glove(tmp_path / "tiny.txt", TINY_GLOVE)
  full = asq_similarity.AsqSimilarity(asq_similarity.read_glove(path)).fit(ASQ_ITEMS)
  assert full.name == ("asq_similarity (the paper's features: tf-idf, tf-idf-weighted GloVe, averaged GloVe, "
                       f"overlap; GloVe file {path}, dim 3)")
  assert len(full.weights) == 4
  swapped = [{**e, "candidates": e["candidates"][::-1], "candidate_labels": e["candidate_labels"][::-1]}
             for e in ASQ_ITEMS]
  assert np.allclose(np.asarray(full.score(swapped)), np.asarray(full.score(ASQ_ITEMS))[:, ::-1])


@pytest.mark.parametrize("lines, message", [
    ("the 0.1 0.2\ncat 0.3 x\n", r"line 2: field 3: 'x' is not a finite number"),
    ("the 0.1 0.2\ncat 0.3\n", r"line 2: field 3: 1 numbers after the word 'cat', but line 1 has 2"),
    ("the 0.1 0.2\ncat 0.3 0.4 0.5\n", r"line 2: field 4: 3 numbers after the word 'cat', but line 1 has 2"),
    ("the 0.1 0.2\n\n", r"line 2: field 1: empty word"),
    ("the 0.1 0.2\nthe 0.3 0.4\n", r"line 2: field 1: word 'the' already given at line 1"),
    ("the 0.1 nan\n", r"line 1: field 3: 'nan' is not a finite number"),
    ("the\n", r"line 1: field 2: missing"),
])
def test_read_glove_refuses_a_malformed_line_naming_file_line_and_field(tmp_path, lines, message):
  path = tmp_path / "bad_glove.txt"
  path.write_text(lines)
  with pytest.raises(ValueError, match=re.escape(str(path)) + ": " + message):
    asq_similarity.read_glove(str(path))
