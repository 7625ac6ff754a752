"""Paired tests of two systems scored on the same items, from each item's credit (metrics.item_credit).

scripts/compare.py's tests, described in its docstring: a paired bootstrap of the difference of
means with its percentile interval and two-sided p; McNemar's exact test on 0/1 credit; a paired
permutation test (random sign flips of the per-item differences) where a tie gives fractional credit.
Pure functions of arrays of per-item credit, as metrics.py's.
"""
import fractions
import math

import numpy as np

CONFIDENCE = 0.95  # the intervals' level, as metrics.py's
DECIMALS = 12  # differences of means are rounded to this: float noise has no sign


def bootstrap_summary(differences) -> dict[str, float]:
  """The percentile interval and two-sided p of resampled differences, defined so that the interval
  excludes 0 exactly when p < 1 - CONFIDENCE (the test the interval inverts: Efron & Tibshirani
  1993, An Introduction to the Bootstrap, ch. 13 and 16).

  With B differences sorted d(1) <= ... <= d(B) and j = ceil(B (1 - CONFIDENCE) / 2): the interval
  is [d(j), d(B + 1 - j)] and p = min(1, 2 min(#{d <= 0}, #{d >= 0}) / B). d(j) > 0 exactly when
  fewer than j differences are <= 0, i.e. fewer than B (1 - CONFIDENCE) / 2, i.e. p < 1 - CONFIDENCE;
  the same for d(B + 1 - j) < 0 and the differences >= 0. A difference of exactly 0 counts on both
  sides, so identical systems get p = 1 and the interval [0, 0].
  """
  differences = np.sort(np.asarray(differences, np.float64))
  count = len(differences)
  if not count:
    raise ValueError("the bootstrap needs one resample or more")
  # Exact arithmetic: B x 0.025 in floats is 25.000000000000004 at B = 1000, one order statistic off.
  tail = fractions.Fraction(1 - CONFIDENCE).limit_denominator(10 ** 6) / 2
  j = max(1, math.ceil(tail * count))
  at_most_0, at_least_0 = int(np.sum(differences <= 0)), int(np.sum(differences >= 0))
  # + 0.0: a resample's -0.0 (rounded float noise) is 0, printed without a sign.
  return {"low": float(differences[j - 1]) + 0.0, "high": float(differences[count - j]) + 0.0,
          "p": min(1.0, 2 * min(at_most_0, at_least_0) / count)}


def paired_bootstrap(a, b, num_bootstrap: int, seed: int) -> dict[str, float]:
  """Difference of means a - b, and its percentile interval and two-sided p from the same paired
  resamples (`bootstrap_summary`; scripts/compare.py's docstring)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if len(a) != len(b) or not len(a):
    raise ValueError(f"the paired bootstrap needs the same items, one or more, got {len(a)} and {len(b)}")
  # Rounded: credits such as 1/3 make a true difference of 0 come out as +-1e-17, a sign it lacks.
  observed = float(np.round(a.mean() - b.mean(), DECIMALS)) + 0.0
  rng = np.random.default_rng(seed)
  # One row of item indices per resample, applied to both systems: the pairing.
  rows = rng.integers(0, len(a), size=(num_bootstrap, len(a)))
  differences = np.round((a[rows] - b[rows]).mean(axis=1), DECIMALS)
  return {"difference": observed, **bootstrap_summary(differences)}


MCNEMAR, PERMUTATION = "McNemar exact", "paired permutation"
PERMUTATION_CHUNK = 1000  # sign flips drawn at once: memory stays items x 1000


def is_correct_or_incorrect(credit) -> bool:
  return bool(np.isin(np.asarray(credit), (0, 1)).all())


def credit_won(a, b) -> tuple[float, float]:
  """(credit A gets above B summed over items, the same for B): with 0/1 credit, the discordant
  pairs; their difference is items x (mean A - mean B), so the sign is the difference's."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.round(np.clip(a - b, 0, None).sum(), DECIMALS)), float(np.round(np.clip(b - a, 0, None).sum(), DECIMALS))


def mcnemar_exact(a, b) -> dict[str, float]:
  """Exact two-sided McNemar test on 0/1 credit: binomial test on the discordant pairs."""
  if not (is_correct_or_incorrect(a) and is_correct_or_incorrect(b)):
    raise ValueError("McNemar's test needs 0/1 credit; a tie's fractional credit needs the permutation test")
  a_better, b_better = (int(x) for x in credit_won(a, b))
  discordant = a_better + b_better
  from scipy import stats  # pylint: disable=g-import-not-at-top  # here, not at start-up (metrics.py)
  p = 1.0 if discordant == 0 else float(stats.binomtest(a_better, discordant, 0.5).pvalue)
  return {"test": MCNEMAR, "a_better": a_better, "b_better": b_better, "p": p}


def paired_permutation(a, b, num_permutations: int, seed: int) -> dict[str, float]:
  """Two-sided paired permutation test of mean(a - b): each item's difference keeps or flips its
  sign at random (the systems' labels swapped within the item); see scripts/compare.py's docstring."""
  differences = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  observed = abs(float(np.round(differences.mean(), DECIMALS)))
  rng = np.random.default_rng(seed)
  as_extreme = 0
  for start in range(0, num_permutations, PERMUTATION_CHUNK):
    signs = rng.choice((-1.0, 1.0), size=(min(PERMUTATION_CHUNK, num_permutations - start), len(differences)))
    as_extreme += int(np.sum(np.abs(np.round((signs * differences).mean(axis=1), DECIMALS)) >= observed))
  a_better, b_better = credit_won(a, b)
  return {"test": PERMUTATION, "a_better": a_better, "b_better": b_better,
          "p": (1 + as_extreme) / (1 + num_permutations)}


def second_test(a, b, num_permutations: int, seed: int) -> dict:
  """McNemar where both systems' credit is 0/1, else the paired permutation test."""
  if is_correct_or_incorrect(a) and is_correct_or_incorrect(b):
    return mcnemar_exact(a, b)
  return paired_permutation(a, b, num_permutations, seed)
