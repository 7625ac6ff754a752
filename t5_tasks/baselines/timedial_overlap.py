"""TimeDial option-in-context: prefer options whose words occur in the dialog.

The TimeDial paper's point: this phrase matching solves many items but walks
into the Rule 1 distractors, which were built to copy the dialog's phrases.
"""
from typing import Mapping

from sklearn.feature_extraction import text as sk_text

from t5_tasks.baselines import example_context

_WORDS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b").build_analyzer()


def option_in_context(dialog: str, option: str) -> float:
  """Share of the option's words that occur somewhere in the dialog."""
  words = _WORDS(option)
  if not words:
    return 0.0
  vocabulary = set(_WORDS(dialog))
  return sum(w in vocabulary for w in words) / len(words)


def score(example: Mapping) -> list[float]:
  """option_in_context of each candidate of a TimeDial task example."""
  dialog = example_context(example)
  return [option_in_context(dialog, option) for option in example["candidates"]]
