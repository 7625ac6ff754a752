"""Preference heuristics: prefer the longer response, or the one copying more.

Judges of a (context, response) pair; summarize-from-feedback found both
correlate with human preference. They score a preference task's examples
(`score_example`) for scripts/run_baseline.py, and `CandidateItem`s for the
agreement analysis, whose adapters from the released preference formats keep
the compared systems' names (candidates [preferred, other], gold [1, 0]).
"""
from typing import Callable, Mapping, Sequence

from sklearn.feature_extraction import text as sk_text

from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import example_context

_WORDS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b").build_analyzer()
_BIGRAMS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(2, 2)).build_analyzer()

Scorer = Callable[[str, str], float]
REDDIT_ADVICE = "top_reddit_advice"


def response_length(context: str, response: str) -> float:
  """Number of words of the response (the context is ignored)."""
  del context
  return float(len(_WORDS(response)))


def bigram_copying(context: str, response: str) -> float:
  """Share of the response's word bigrams that also occur in the context."""
  bigrams = _BIGRAMS(response)
  if not bigrams:
    return 0.0
  in_context = set(_BIGRAMS(context))
  return sum(b in in_context for b in bigrams) / len(bigrams)


SCORERS: dict[str, Scorer] = {"length": response_length, "copying": bigram_copying}


def score_example(example: Mapping, scorer: Scorer) -> list[float]:
  """The scorer's number for each candidate of a task example, against the example's context."""
  context = example_context(example)
  return [scorer(context, c) for c in example["candidates"]]


def score_items(items: Sequence[CandidateItem], scorer: Scorer) -> list[list[float]]:
  return [[scorer(item.context, c) for c in item.candidates] for item in items]


def items_from_turingadvice(situations: Sequence,
                            task: str = "turingadvice_preference") -> list[CandidateItem]:
  """System advice vs top Reddit advice, the human-preferred one first; metadata names both."""
  items = []
  for s in situations:
    context = f"{s.title}\n{s.selftext}"
    for system, rating in s.ratings.items():
      pair = (s.model_advice[system], s.best_advice)
      systems = (system, REDDIT_ADVICE)
      order = (0, 1) if rating.is_preferred else (1, 0)
      items.append(CandidateItem(task, f"{s.id}/{system}", context, tuple(pair[i] for i in order), (1, 0),
                                 {"systems": [systems[i] for i in order]}))
  return items


def items_from_summary_comparisons(comparisons: Sequence,
                                   task: str = "summarize_feedback") -> list[CandidateItem]:
  """Summarize-from-feedback comparisons, the chosen summary first; metadata names the policies."""
  items = []
  for index, c in enumerate(comparisons):
    good, bad = c.summaries[c.choice], c.summaries[1 - c.choice]
    items.append(CandidateItem(task, f"{c.id}/{index}", f"{c.title}\n{c.post}", (good, bad), (1, 0),
                               {"systems": [c.policies[c.choice], c.policies[1 - c.choice]]}))
  return items


def items_from_heap(comparisons: Sequence, task: str) -> list[CandidateItem]:
  """HEAP (good, bad) comparisons; the context fields joined in order."""
  return [CandidateItem(task, c.id or f"{task}-{index}", "\n".join(text for _, text in c.context),
                        (c.good, c.bad), (1, 0))
          for index, c in enumerate(comparisons)]
