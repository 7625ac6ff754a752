"""ASQ narrative-question similarity: TF-IDF cosine and content-word overlap.

The two similarities of each question to the narrative are combined by a
logistic regression trained on the difference of the two questions' features
(no intercept, so swapping the questions swaps the prediction). Items are the
`asq_intent_cloze` task's examples: narrative `inputs`, two `candidates`,
one-hot `candidate_labels`.
"""
from typing import Mapping, Sequence

import numpy as np
from sklearn import linear_model
from sklearn.feature_extraction import text as sk_text
from sklearn.metrics import pairwise

from t5_tasks.baselines import example_context

FEATURES = ("tfidf_cosine", "content_overlap")
_CONTENT_WORDS = sk_text.CountVectorizer(stop_words="english").build_analyzer()


def content_overlap(narrative: str, question: str) -> float:
  """Share of the question's content (non-stop) words found in the narrative."""
  words = _CONTENT_WORDS(question)
  if not words:
    return 0.0
  vocabulary = set(_CONTENT_WORDS(narrative))
  return sum(w in vocabulary for w in words) / len(words)


class AsqSimilarity:
  """Fit on two-candidate examples, then score each candidate by the learned combination."""

  def __init__(self):
    self._tfidf = sk_text.TfidfVectorizer(stop_words="english", sublinear_tf=True)
    self._combiner = linear_model.LogisticRegression(fit_intercept=False)

  def features(self, examples: Sequence[Mapping]) -> np.ndarray:
    """[N, 2, len(FEATURES)] similarities of each candidate to its context."""
    contexts = [example_context(e) for e in examples]
    context_vectors = self._tfidf.transform(contexts)
    candidates = self._tfidf.transform([c for e in examples for c in e["candidates"]])
    cosine = np.asarray([pairwise.cosine_similarity(context_vectors[i], candidates[2 * i:2 * i + 2])[0]
                         for i in range(len(examples))])
    overlap = np.asarray([[content_overlap(context, c) for c in e["candidates"]]
                          for context, e in zip(contexts, examples)])
    return np.stack([cosine, overlap], axis=-1)

  def fit(self, examples: Sequence[Mapping]) -> "AsqSimilarity":
    for e in examples:
      if len(e["candidates"]) != 2 or sorted(e["candidate_labels"]) != [0, 1]:
        raise ValueError(f"example {e['id']!r}: needs two candidates with exactly one correct")
    self._tfidf.fit([example_context(e) for e in examples] + [c for e in examples for c in e["candidates"]])
    x = self.features(examples)
    y = np.array([e["candidate_labels"][1] for e in examples])
    self._combiner.fit(x[:, 1] - x[:, 0], y)
    return self

  @property
  def weights(self) -> dict[str, float]:
    return dict(zip(FEATURES, (float(w) for w in self._combiner.coef_[0])))

  def score(self, examples: Sequence[Mapping]) -> list[list[float]]:
    """Per candidate: the logistic regression's linear score of its features."""
    return (self.features(examples) @ self._combiner.coef_[0]).tolist()
