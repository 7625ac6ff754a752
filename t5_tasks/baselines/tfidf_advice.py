"""TF-IDF retrieval advice: answer with the top advice of the most similar situation.

TuringAdvice's retrieval baseline: index the training situations by all their
context fields (subreddit, title, selftext); a new situation gets the
highest-scoring Reddit advice of its nearest neighbour by TF-IDF cosine.
"""
from typing import Mapping, Sequence

from sklearn import neighbors
from sklearn.feature_extraction import text as sk_text
from sklearn.metrics import pairwise

CONTEXT_FIELDS = ("subreddit", "title", "selftext")


def situation_text(fields: Mapping[str, str]) -> str:
  return "\n".join(str(fields[f]) for f in CONTEXT_FIELDS)


class TfidfAdviceRetriever:
  """`generate(instances) -> advice` is the leaderboard generator (`list[dict] -> list[str]`)."""

  def __init__(self):
    self._vectorizer = sk_text.TfidfVectorizer(stop_words="english", sublinear_tf=True)
    self._index = neighbors.NearestNeighbors(n_neighbors=1, metric="cosine", algorithm="brute")
    self._ids: list[str] = []
    self._advice: list[str] = []

  def fit(self, situations: Sequence) -> "TfidfAdviceRetriever":
    """Indexes `AdviceSituation`s; each contributes its highest-scoring comment."""
    if not situations:
      raise ValueError("no training situations to index")
    texts = [situation_text({f: getattr(s, f) for f in CONTEXT_FIELDS}) for s in situations]
    self._index.fit(self._vectorizer.fit_transform(texts))
    self._ids = [s.id for s in situations]
    self._advice = [max(s.good_comments, key=lambda c: c.score).body for s in situations]
    return self

  def _nearest(self, instances: Sequence[Mapping[str, str]]):
    for n, instance in enumerate(instances):
      missing = [f for f in CONTEXT_FIELDS if not isinstance(instance.get(f), str)]
      if missing:
        raise ValueError(f"instance {n}: missing or non-string field '{missing[0]}'")
    queries = self._vectorizer.transform([situation_text(i) for i in instances])
    distances, indices = self._index.kneighbors(queries)
    return distances[:, 0], indices[:, 0]

  def retrieve(self, instances: Sequence[Mapping[str, str]]) -> list[tuple[str, float]]:
    """(training situation id, cosine similarity) of each instance's nearest neighbour."""
    if not instances:
      return []
    distances, indices = self._nearest(instances)
    return [(self._ids[i], 1.0 - float(d)) for d, i in zip(distances, indices)]

  def generate(self, instances: Sequence[Mapping[str, str]]) -> list[str]:
    if not instances:
      return []
    return [self._advice[i] for i in self._nearest(instances)[1]]

  def advice_similarity(self, generated: Sequence[str], references: Sequence[str]) -> list[float]:
    """TF-IDF cosine of each generated advice to a reference advice (e.g. the top Reddit one)."""
    a = self._vectorizer.transform(list(generated))
    b = self._vectorizer.transform(list(references))
    return [float(pairwise.cosine_similarity(a[i], b[i])[0, 0]) for i in range(a.shape[0])]

  def __call__(self, instances: Sequence[Mapping[str, str]]) -> list[str]:
    return self.generate(instances)
