"""Analyses of released human judgments: pure functions returning plain dicts.

`turingadvice` (preference rates, continuous scores, paired t-tests), `asq`
(human accuracy, agreement, pair types), `agreement` (judges vs humans).
"""
import numpy as np
from scipy import stats

N_RESAMPLES = 2000


def mean_interval(values, *, seed: int = 0, n_resamples: int = N_RESAMPLES) -> dict:
  """Mean with a percentile-bootstrap 95% interval and bootstrap standard error."""
  values = np.asarray(values, dtype=np.float64)
  if values.size == 0:
    raise ValueError("mean_interval: no values")
  if values.size == 1:
    v = float(values[0])
    return {"value": v, "low": v, "high": v, "se": 0.0, "n": 1}
  result = stats.bootstrap((values,), np.mean, method="percentile", n_resamples=n_resamples,
                           rng=np.random.default_rng(seed))
  return {"value": float(values.mean()), "low": float(result.confidence_interval.low),
          "high": float(result.confidence_interval.high),
          "se": float(result.standard_error), "n": int(values.size)}
