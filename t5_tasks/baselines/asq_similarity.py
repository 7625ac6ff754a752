"""ASQ narrative-question similarity baseline (Fu, Chang & Danescu-Niculescu-Mizil 2019, §5
"Baseline systems performance", Table 5; its SIM column of Table 4).

The paper's features are cosine similarities between narrative and question "with text represented
as tf-idf vectors, tf-idf weighted GloVe embeddings, averaged GloVe embeddings, as well as word
overlap between content words, all combined in a logistic regression model". The two GloVe
features need a GloVe file (`read_glove`); without one the baseline has the other two only, and
its `name` says so (the paper's 76% is for all four).

The logistic regression is trained on the difference of the two questions' features (no intercept,
so swapping the questions swaps the prediction). Items are the `asq_intent_cloze` task's examples:
narrative `inputs`, two `candidates`, one-hot `candidate_labels`.
"""
import dataclasses
from typing import Iterable, Mapping, Sequence

import numpy as np
from sklearn import linear_model
from sklearn.feature_extraction import text as sk_text
from sklearn.metrics import pairwise

from t5_tasks.baselines import example_context

LEXICAL_FEATURES = ("tfidf_cosine", "content_overlap")
GLOVE_FEATURES = ("tfidf_glove_cosine", "mean_glove_cosine")
BASE_NAME = "asq_similarity"
_CONTENT_WORDS = sk_text.CountVectorizer(stop_words="english").build_analyzer()
# Averaged GloVe: every word of the text (stop words too: the paper names no filter for this
# representation), tokenized as the tf-idf vectors are.
_ALL_WORDS = sk_text.CountVectorizer().build_analyzer()


def content_overlap(narrative: str, question: str) -> float:
  """Share of the question's content (non-stop) words found in the narrative."""
  words = _CONTENT_WORDS(question)
  if not words:
    return 0.0
  vocabulary = set(_CONTENT_WORDS(narrative))
  return sum(w in vocabulary for w in words) / len(words)


@dataclasses.dataclass(frozen=True)
class GloveVectors:
  """Word vectors read from a GloVe text file (the words kept, their dimension, where from)."""
  path: str
  dim: int
  vectors: Mapping[str, np.ndarray]
  lines: int  # words in the file, kept or not


def read_glove(path: str, vocabulary: Iterable[str] | None = None) -> GloveVectors:
  """GloVe's text format: per line a word, then `dim` numbers, separated by single spaces.

  Every line is checked (the dimension is line 1's); only the words of `vocabulary` are kept when
  given (a full GloVe file is ~1 GB of floats). A malformed line is refused naming the file, the
  line and the field (field 1 is the word).
  """
  keep = None if vocabulary is None else set(vocabulary)
  vectors: dict[str, np.ndarray] = {}
  seen: dict[str, int] = {}
  dim = None
  number = 0
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      fields = line.rstrip("\r\n").rstrip(" ").split(" ")
      word = fields[0]
      if not word:
        raise ValueError(f"{path}: line {number}: field 1: empty word (a GloVe line is a word, then numbers)")
      if dim is None:
        dim = len(fields) - 1
        if dim < 1:
          raise ValueError(f"{path}: line {number}: field 2: missing (a word and no numbers)")
      if len(fields) != dim + 1:
        field = min(len(fields), dim + 1) + 1
        raise ValueError(f"{path}: line {number}: field {field}: {len(fields) - 1} numbers after the word "
                         f"{word!r}, but line 1 has {dim}")
      if word in seen:
        raise ValueError(f"{path}: line {number}: field 1: word {word!r} already given at line {seen[word]}")
      seen[word] = number
      try:
        vector = np.asarray(fields[1:], dtype=np.float64)
      except ValueError:
        vector = None
      if vector is None or not np.isfinite(vector).all():
        bad = next(i for i, x in enumerate(fields[1:], 2) if not _is_finite_number(x))
        raise ValueError(f"{path}: line {number}: field {bad}: {fields[bad - 1]!r} is not a finite number")
      if keep is None or word in keep:
        vectors[word] = vector
  if dim is None:
    raise ValueError(f"{path}: no line (an empty GloVe file)")
  return GloveVectors(path=path, dim=dim, vectors=vectors, lines=number)


def _is_finite_number(text: str) -> bool:
  try:
    return bool(np.isfinite(float(text)))
  except ValueError:
    return False


def _row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Cosine of each row of `a` with the same row of `b`; 0 where either is the zero vector (a
  text none of whose words has a vector), as sklearn's cosine of an all-zero tf-idf vector."""
  norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
  dots = (a * b).sum(-1)
  return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


class AsqSimilarity:
  """Fit on two-candidate examples, then score each candidate by the learned combination."""

  def __init__(self, glove: GloveVectors | None = None):
    self._tfidf = sk_text.TfidfVectorizer(stop_words="english", sublinear_tf=True)
    self._combiner = linear_model.LogisticRegression(fit_intercept=False)
    self.glove = glove
    self._embedding = None  # [tf-idf vocabulary, dim]: each tf-idf word's vector, 0 without one

  @property
  def feature_names(self) -> tuple[str, ...]:
    return LEXICAL_FEATURES + (GLOVE_FEATURES if self.glove else ())

  @property
  def name(self) -> str:
    """What this baseline is: the paper's four features, or the reduced two without a GloVe file."""
    if self.glove is None:
      return f"{BASE_NAME} (tf-idf + overlap; no GloVe file: the paper's word-vector features are off)"
    return (f"{BASE_NAME} (the paper's features: tf-idf, tf-idf-weighted GloVe, averaged GloVe, overlap; "
            f"GloVe file {self.glove.path}, dim {self.glove.dim})")

  def tfidf_glove(self, texts: Sequence[str]) -> np.ndarray:
    """[len(texts), dim]: each text's tf-idf weighted sum of its words' GloVe vectors (a word out of
    the tf-idf vocabulary has no weight, one without a vector adds nothing)."""
    return np.asarray(self._tfidf.transform(texts) @ self._embedding)

  def mean_glove(self, texts: Sequence[str]) -> np.ndarray:
    """[len(texts), dim]: the average GloVe vector of each text's words that have one (0: none has)."""
    vectors = self.glove.vectors
    out = np.zeros((len(texts), self.glove.dim))
    for i, text in enumerate(texts):
      found = [vectors[w] for w in _ALL_WORDS(text) if w in vectors]
      if found:
        out[i] = np.mean(found, axis=0)
    return out

  def features(self, examples: Sequence[Mapping]) -> np.ndarray:
    """[N, 2, len(feature_names)] similarities of each candidate to its context."""
    contexts = [example_context(e) for e in examples]
    questions = [c for e in examples for c in e["candidates"]]
    context_vectors = self._tfidf.transform(contexts)
    candidates = self._tfidf.transform(questions)
    cosine = np.asarray([pairwise.cosine_similarity(context_vectors[i], candidates[2 * i:2 * i + 2])[0]
                         for i in range(len(examples))])
    overlap = np.asarray([[content_overlap(context, c) for c in e["candidates"]]
                          for context, e in zip(contexts, examples)])
    columns = [cosine, overlap]
    if self.glove is not None:
      for represent in (self.tfidf_glove, self.mean_glove):
        narrative = np.repeat(represent(contexts), 2, axis=0)  # each narrative beside its 2 questions
        columns.append(_row_cosine(narrative, represent(questions)).reshape(len(examples), 2))
    return np.stack(columns, axis=-1)

  def glove_coverage(self, examples: Sequence[Mapping]) -> dict[str, int]:
    """How many narratives and questions have no word with a GloVe vector (their GloVe cosines are 0)."""
    vectors = self.glove.vectors if self.glove else {}
    texts = [example_context(e) for e in examples] + [c for e in examples for c in e["candidates"]]
    return {"texts": len(texts),
            "texts_without_vector": sum(not any(w in vectors for w in _ALL_WORDS(t)) for t in texts)}

  def fit(self, examples: Sequence[Mapping]) -> "AsqSimilarity":
    for e in examples:
      if len(e["candidates"]) != 2 or sorted(e["candidate_labels"]) != [0, 1]:
        raise ValueError(f"example {e['id']!r}: needs two candidates with exactly one correct")
    self._tfidf.fit([example_context(e) for e in examples] + [c for e in examples for c in e["candidates"]])
    if self.glove is not None:
      vocabulary = self._tfidf.get_feature_names_out()
      self._embedding = np.zeros((len(vocabulary), self.glove.dim))
      for i, word in enumerate(vocabulary):
        if word in self.glove.vectors:
          self._embedding[i] = self.glove.vectors[word]
    x = self.features(examples)
    y = np.array([e["candidate_labels"][1] for e in examples])
    self._combiner.fit(x[:, 1] - x[:, 0], y)
    return self

  @property
  def weights(self) -> dict[str, float]:
    return dict(zip(self.feature_names, (float(w) for w in self._combiner.coef_[0])))

  def score(self, examples: Sequence[Mapping]) -> list[list[float]]:
    """Per candidate: the logistic regression's linear score of its features."""
    return (self.features(examples) @ self._combiner.coef_[0]).tolist()


def words_of(examples: Sequence[Mapping]) -> set[str]:
  """Every word the features can look up in a GloVe file for these examples (for `read_glove`)."""
  texts = [example_context(e) for e in examples] + [c for e in examples for c in e["candidates"]]
  return {w for t in texts for w in _ALL_WORDS(t)}
