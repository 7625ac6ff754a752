"""Preference heuristics: prefer the longer response, or the one copying more.

Judges of a (context, response) pair; summarize-from-feedback found both
correlate with human preference. They score a preference task's examples
(`score_example`) for scripts/run_baseline.py, and `CandidateItem`s for the
agreement analysis, whose adapters from the released preference formats keep
the compared systems' names (candidates [preferred, other], gold [1, 0]).
"""
import collections
from typing import Callable, Mapping, Sequence

from sklearn.feature_extraction import text as sk_text

from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import example_context

_WORDS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b").build_analyzer()

Scorer = Callable[[str, str], float]
REDDIT_ADVICE = "top_reddit_advice"


def response_length(context: str, response: str) -> float:
  """Number of words of the response (the context is ignored)."""
  del context
  return float(len(_WORDS(response)))


def _bigrams(text: str) -> list[tuple[str, str]]:
  words = _WORDS(text)
  return list(zip(words, words[1:]))


def lcs_length(a: Sequence, b: Sequence) -> int:
  """Length of the longest common subsequence of two sequences of hashable tokens.

  Bit-parallel (Crochemore et al. 2001; Hyyrö 2004): bit i of `v` is 0 where the LCS
  grows at a[i]; one big-integer step per token of the shorter sequence.
  """
  if len(a) < len(b):
    a, b = b, a
  positions = collections.defaultdict(int)
  for i, token in enumerate(a):
    positions[token] |= 1 << i
  full = (1 << len(a)) - 1
  v = full
  for token in b:
    u = v & positions.get(token, 0)
    v = ((v + u) | (v - u)) & full
  return len(a) - v.bit_count()


def lcs_bigram_copying(context: str, response: str) -> float:
  """How much the response copies the context, as summarize-from-feedback measures it.

  "the longest common subsequence of bigrams with the original Reddit post or news
  article, and dividing by the number of bigrams in the summary" (appendix G.5, Table 16;
  the copying judge of G.7). Bigrams of lowercased words; 0 for a response of one word.
  """
  summary = _bigrams(response)
  if not summary:
    return 0.0
  return lcs_length(_bigrams(context), summary) / len(summary)


SCORERS: dict[str, Scorer] = {"length": response_length, "copying": lcs_bigram_copying}


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
