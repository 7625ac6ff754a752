"""ASQ narrative-question similarity: TF-IDF cosine and content-word overlap.

The two similarities of each question to the narrative are combined by a
logistic regression trained on the difference of the two questions' features
(no intercept, so swapping the questions swaps the prediction).
"""
from typing import Mapping, Sequence

import numpy as np
from sklearn import linear_model
from sklearn.feature_extraction import text as sk_text
from sklearn.metrics import pairwise

from t5_tasks.baselines import CandidateItem

FEATURES = ("tfidf_cosine", "content_overlap")
_CONTENT_WORDS = sk_text.CountVectorizer(stop_words="english").build_analyzer()


def content_overlap(narrative: str, question: str) -> float:
  """Share of the question's content (non-stop) words found in the narrative."""
  words = _CONTENT_WORDS(question)
  if not words:
    return 0.0
  vocabulary = set(_CONTENT_WORDS(narrative))
  return sum(w in vocabulary for w in words) / len(words)


def items_from_asq(items: Sequence, pair_types: Mapping[str, str | None] | None = None,
                   task: str = "asq") -> list[CandidateItem]:
  """AsqItems as two candidates (qn1, qn2), gold marking the narrator's question."""
  pair_types = pair_types or {}
  return [CandidateItem(task, it.id, it.narrative, tuple(it.questions),
                        (1, 0) if it.label == 0 else (0, 1),
                        {"pair_type": pair_types.get(it.id) or ""})
          for it in items]


class AsqSimilarity:
  """Fit on two-candidate items, then score each candidate by the learned combination."""

  def __init__(self):
    self._tfidf = sk_text.TfidfVectorizer(stop_words="english", sublinear_tf=True)
    self._combiner = linear_model.LogisticRegression(fit_intercept=False)

  def features(self, items: Sequence[CandidateItem]) -> np.ndarray:
    """[N, 2, len(FEATURES)] similarities of each candidate to its context."""
    contexts = self._tfidf.transform([it.context for it in items])
    candidates = self._tfidf.transform([c for it in items for c in it.candidates])
    cosine = np.asarray(
        [pairwise.cosine_similarity(contexts[i], candidates[2 * i:2 * i + 2])[0] for i in range(len(items))])
    overlap = np.asarray([[content_overlap(it.context, c) for c in it.candidates] for it in items])
    return np.stack([cosine, overlap], axis=-1)

  def fit(self, items: Sequence[CandidateItem]) -> "AsqSimilarity":
    for it in items:
      if len(it.candidates) != 2 or sorted(it.gold) != [0, 1]:
        raise ValueError(f"item {it.id!r}: needs two candidates with exactly one correct")
    self._tfidf.fit([it.context for it in items] + [c for it in items for c in it.candidates])
    x = self.features(items)
    y = np.array([it.gold[1] for it in items])
    self._combiner.fit(x[:, 1] - x[:, 0], y)
    return self

  @property
  def weights(self) -> dict[str, float]:
    return dict(zip(FEATURES, (float(w) for w in self._combiner.coef_[0])))

  def score(self, items: Sequence[CandidateItem]) -> list[list[float]]:
    """Per candidate: the logistic regression's linear score of its features."""
    return (self.features(items) @ self._combiner.coef_[0]).tolist()
