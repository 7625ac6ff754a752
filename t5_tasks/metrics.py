"""Ranking metrics with bootstrapped 95% intervals, and the seqio metric_fns over them.

The metric functions are pure functions of numpy arrays. Ties between candidate scores get
the expected credit of breaking them uniformly at random, so a model that scores every
candidate alike sits at chance instead of at 0 or 1.
"""
import dataclasses
import math
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
# scipy.stats is imported by the functions that use it: loading it is ~0.5 s of CPU, and every
# command that reads data imports this module (via t5_tasks), training too, which computes no metric.

# The paired tests between two systems (scripts.compare's), over the per-item credit defined here.
from t5_tasks.statistics import mcnemar_exact, paired_bootstrap, paired_permutation, second_test  # pylint: disable=unused-import

NUM_BOOTSTRAP = 1000
CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A metric value and its bootstrapped 95% interval."""
  value: float
  low: float
  high: float

  def as_dict(self) -> dict[str, float]:
    return dataclasses.asdict(self)


def _check_scores_labels(scores, labels, mask=None):
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.asarray(labels)
  if scores.ndim != 2 or scores.shape != labels.shape:
    raise ValueError(f"scores and labels must both be [items, candidates]; got {scores.shape} "
                     f"and {labels.shape}")
  if not np.isin(labels, (0, 1)).all():
    raise ValueError("labels must be 0 or 1")
  if mask is not None:
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != scores.shape:
      raise ValueError(f"mask must have the shape of scores {scores.shape}; got {mask.shape}")
    scores = np.where(mask, scores, -np.inf)
    labels = np.where(mask, labels, 0)
  return scores, labels.astype(np.int64)


def _bootstrap(statistic, *samples, num_bootstrap, seed, paired=False) -> tuple[float, float]:
  """Percentile interval of `statistic` over items resampled with replacement."""
  if len(samples[0]) < 2:
    value = float(statistic(*samples, axis=-1))
    return value, value
  from scipy import stats  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    # Tiny samples can resample to constant vectors (an undefined correlation): a NaN bound.
    warnings.simplefilter("ignore", stats.DegenerateDataWarning)
    result = stats.bootstrap(samples, statistic, n_resamples=num_bootstrap,
                             confidence_level=CONFIDENCE, method="percentile", paired=paired,
                             vectorized=True, random_state=np.random.default_rng(seed))
  return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _mean_estimate(credit: np.ndarray, num_bootstrap: int, seed: int) -> Estimate:
  if credit.size == 0:
    return Estimate(math.nan, math.nan, math.nan)
  low, high = _bootstrap(np.mean, credit, num_bootstrap=num_bootstrap, seed=seed)
  return Estimate(float(credit.mean()), low, high)


def top_k_credit(scores, labels, k: int, mask=None) -> np.ndarray:
  """Per item: probability that the k best-scored candidates are all correct (ties random)."""
  scores, labels = _check_scores_labels(scores, labels, mask)
  credit = np.zeros(len(scores))
  for i, (row, gold) in enumerate(zip(scores, labels)):
    if np.isfinite(row).sum() < k:
      raise ValueError(f"item {i}: needs at least {k} candidates")
    kth = np.sort(row)[::-1][k - 1]
    above, tied = row > kth, row == kth
    if gold[above].all():
      draws = k - int(above.sum())
      credit[i] = math.comb(int(gold[tied].sum()), draws) / math.comb(int(tied.sum()), draws)
  return credit


def accuracy(scores, labels, *, mask=None, num_bootstrap=NUM_BOOTSTRAP, seed=0) -> Estimate:
  """Fraction of items whose best-scored candidate is correct. scores, labels: [N, K]."""
  return _mean_estimate(top_k_credit(scores, labels, 1, mask), num_bootstrap, seed)


def two_best_accuracy(scores, labels, *, mask=None, num_bootstrap=NUM_BOOTSTRAP,
                      seed=0) -> Estimate:
  """Fraction of items whose two best-scored candidates are both correct (TimeDial)."""
  return _mean_estimate(top_k_credit(scores, labels, 2, mask), num_bootstrap, seed)


def pairwise_credit(good_scores, bad_scores) -> np.ndarray:
  """Per pair: 1 when the preferred response scores higher, 0.5 on a tie, else 0."""
  good, bad = np.asarray(good_scores, np.float64), np.asarray(bad_scores, np.float64)
  if good.ndim != 1 or good.shape != bad.shape:
    raise ValueError(f"good and bad scores must be equal-length vectors; got {good.shape} "
                     f"and {bad.shape}")
  return (good > bad) + 0.5 * (good == bad)


def pairwise_accuracy(good_scores, bad_scores, *, num_bootstrap=NUM_BOOTSTRAP,
                      seed=0) -> Estimate:
  """Fraction of pairs where the preferred response scores higher (a tie counts half)."""
  return _mean_estimate(pairwise_credit(good_scores, bad_scores), num_bootstrap, seed)


def preference_pair(scores, gold) -> tuple[float, float]:
  """(good score, bad score) of a preference item: its first gold-1 and first gold-0 candidate."""
  good = next(s for s, y in zip(scores, gold) if y == 1)
  bad = next(s for s, y in zip(scores, gold) if y == 0)
  return float(good), float(bad)


CREDIT_METRICS = ("accuracy", "two_best_accuracy", "pairwise_accuracy")


def item_credit(metric: str, scores: Sequence[float], gold: Sequence[int]) -> float:
  """One item's credit in `metric` (a CREDIT_METRICS name, or a group's "accuracy/C+E"): the one
  per-item definition behind metrics.json, scripts.compare and scripts.analyze, ties included."""
  base = metric.partition("/")[0]
  if base == "pairwise_accuracy":
    good, bad = preference_pair(scores, gold)
    return float(pairwise_credit([good], [bad])[0])
  if base not in ("accuracy", "two_best_accuracy"):
    raise ValueError(f"no per-item credit for metric {metric!r}; these have one: {', '.join(CREDIT_METRICS)}")
  return float(top_k_credit([scores], [gold], 2 if base == "two_best_accuracy" else 1)[0])


def item_groups(target: Mapping[str, Any]) -> set[str]:
  """The pair-type groups an ASQ item counts in (accuracy/GROUP): its "|"-joined `pair_groups`
  when the record has that field, even empty; only a record without it (the TFDS task's) falls
  back on its one `pair_type`. (Falling back whenever `pair_groups` was empty put 8 real items
  typed G by the first round into the second round's group: metrics.json and scripts.analyze
  then counted different items.)"""
  joined = target["pair_groups"] if "pair_groups" in target else target.get("pair_type")
  if isinstance(joined, bytes):
    joined = joined.decode()
  return set(filter(None, (joined or "").split("|")))


def _spearman_rows(x, y, axis=-1):
  """Spearman correlation along the last axis: Pearson correlation of average ranks."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  rx = stats.rankdata(x, axis=axis)
  ry = stats.rankdata(y, axis=axis)
  rx = rx - rx.mean(axis=axis, keepdims=True)
  ry = ry - ry.mean(axis=axis, keepdims=True)
  with np.errstate(invalid="ignore", divide="ignore"):
    return (rx * ry).sum(axis) / np.sqrt((rx * rx).sum(axis) * (ry * ry).sum(axis))


def spearman(predicted, human, *, num_bootstrap=NUM_BOOTSTRAP, seed=0) -> Estimate:
  """Spearman rank correlation between model and human scores (paired bootstrap)."""
  x, y = np.asarray(predicted, np.float64), np.asarray(human, np.float64)
  if x.ndim != 1 or x.shape != y.shape:
    raise ValueError(f"predicted and human must be equal-length vectors; got {x.shape} and "
                     f"{y.shape}")
  if x.size < 3:
    return Estimate(math.nan, math.nan, math.nan)
  from scipy import stats  # pylint: disable=g-import-not-at-top
  value = float(stats.spearmanr(x, y).statistic)
  low, high = _bootstrap(_spearman_rows, x, y, num_bootstrap=num_bootstrap, seed=seed,
                         paired=True)
  return Estimate(value, low, high)


def rule_error_rates(scores, labels, rules: Sequence[Sequence[str]], *, mask=None,
                     num_bootstrap=NUM_BOOTSTRAP, seed=0) -> dict[str, Estimate]:
  """Per negative-option rule: how often a negative of that rule outscores a correct option.

  TimeDial labels each incorrect option with the rule that made it ("Rule 1" phrase matching,
  "Rule 2" numeral matching, "Rule 3" open-ended); the rate is over the negatives of that rule.
  """
  scores, labels = _check_scores_labels(scores, labels, mask)
  errors: dict[str, list[float]] = {}
  for row, gold, row_rules in zip(scores, labels, rules):
    worst_correct = row[gold == 1].min()
    for score, is_gold, rule in zip(row, gold, row_rules):
      if is_gold or not rule or not np.isfinite(score):
        continue
      # A negative tied with the weakest correct option wins half the time.
      errors.setdefault(rule, []).append(float(score > worst_correct) +
                                         0.5 * float(score == worst_correct))
  return {rule: _mean_estimate(np.asarray(v), num_bootstrap, seed)
          for rule, v in sorted(errors.items())}


def _flatten(name: str, estimate: Estimate) -> dict[str, float]:
  return {name: estimate.value, f"{name}_low": estimate.low, f"{name}_high": estimate.high}


def _stack_candidates(targets: Sequence[Mapping[str, Any]], scores: Sequence[Sequence[float]]):
  """Pads per-item candidate scores and labels into [N, K] arrays with a mask."""
  if len(targets) != len(scores):
    raise ValueError(f"{len(targets)} targets but {len(scores)} score lists")
  width = max(len(s) for s in scores)
  padded_scores = np.zeros((len(scores), width))
  padded_labels = np.zeros((len(scores), width), np.int64)
  mask = np.zeros((len(scores), width), bool)
  for i, (target, row) in enumerate(zip(targets, scores)):
    gold = np.asarray(target["candidate_labels"])
    if len(gold) != len(row):
      raise ValueError(f"item {i}: {len(row)} scores for {len(gold)} candidates")
    padded_scores[i, :len(row)], padded_labels[i, :len(row)], mask[i, :len(row)] = row, gold, True
  return padded_scores, padded_labels, mask


def timedial_metric_fn(targets, scores) -> dict[str, float]:
  """seqio score metric: 2-best accuracy, accuracy and error rate per negative-option rule.

  targets: per item, the dict made by `tasks.candidate_targets` (candidate_labels,
  candidate_rules, ...); scores: per item, one score per candidate.
  """
  s, y, mask = _stack_candidates(targets, scores)
  out = {}
  if (y.sum(1) >= 2).all():
    out.update(_flatten("two_best_accuracy", two_best_accuracy(s, y, mask=mask)))
  out.update(_flatten("accuracy", accuracy(s, y, mask=mask)))
  rules = [list(t.get("candidate_rules", [""] * len(t["candidate_labels"]))) for t in targets]
  for rule, estimate in rule_error_rates(s, y, rules, mask=mask).items():
    out.update(_flatten(f"error_rate/{rule}", estimate))
  return out


ASQ_SEED = 0  # metrics.json's bootstrap seed of every ASQ accuracy (scripts.analyze asq's default too)


def asq_group_accuracy(credit, *, seed: int = ASQ_SEED) -> Estimate:
  """Accuracy with its interval over one ASQ population (all items, or one pair type's) from the
  items' credit (`item_credit`): the one computation behind metrics.json's accuracy and
  accuracy/GROUP and scripts.analyze asq's Table 4 cells (ASQ Table 4), so the same predictions
  get the same interval in both. The seed is the group's as given (ASQ_SEED in metrics.json), not
  derived from the group, so a group of the same items resamples alike wherever it is computed."""
  return _mean_estimate(np.asarray(credit, np.float64), NUM_BOOTSTRAP, seed)


def asq_metric_fn(targets, scores) -> dict[str, float]:
  """seqio score metric: accuracy, and accuracy per annotated pair type when known.

  The ASQ pair groups overlap (C+C and L+{U,I} lie inside C+{C,I}); an item counts in
  every group `item_groups` gives it. `accuracy` is over every scored item, annotated or not
  (on the `annotation` split: all 500, of which the rounds annotated 200).
  """
  s, y, mask = _stack_candidates(targets, scores)
  credit = top_k_credit(s, y, 1, mask)
  out = _flatten("accuracy", asq_group_accuracy(credit))
  groups = [item_groups(t) for t in targets]
  for pair_type in sorted(set().union(*groups)):
    rows = np.asarray([pair_type in g for g in groups])
    out.update(_flatten(f"accuracy/{pair_type}", asq_group_accuracy(credit[rows])))
  return out


def output_scores(targets, scores) -> tuple[np.ndarray, np.ndarray]:
  """(model score, human score) of each distinct output of a split: one per (context_id, text).

  An output is compared with several others of its context, so it appears in several items;
  counting it once per item would weight it by how often it was compared. HEAP §5 correlates
  the model's scores of the outputs with their human scores (Table 2's Spearman). The model's
  occurrences are averaged (batch padding may move a score by float rounding); a text judged
  more than once in a context (two systems wrote the same update in the real defeasible-inference
  file: 3 such texts for DIA, 4 for DII) takes the mean of the distinct human scores it was given.
  """
  model: dict[tuple, list[float]] = {}
  human: dict[tuple, dict[float, None]] = {}
  for i, (target, row) in enumerate(zip(targets, scores)):
    if "context_id" not in target or "candidate_scores" not in target:
      raise ValueError(f"item {i}: ranked Spearman needs context_id and candidate_scores")
    texts = target.get("candidate_texts") or target.get("candidate_ids")
    if texts is None or len(texts) != len(row) or len(target["candidate_scores"]) != len(row):
      raise ValueError(f"item {i}: needs one text (or token ids) and one human score per candidate")
    for text, score, graded in zip(texts, row, target["candidate_scores"]):
      key = (target["context_id"], text if isinstance(text, str) else tuple(text))
      human.setdefault(key, {})[float(graded)] = None  # each distinct judgment once
      model.setdefault(key, []).append(float(score))
  keys = list(model)
  return (np.asarray([np.mean(model[k]) for k in keys], np.float64),
          np.asarray([np.mean(list(human[k])) for k in keys], np.float64))


def preference_metric_fn(targets, scores, *, ranked: bool = False) -> dict[str, float]:
  """seqio score metric: pairwise accuracy (a tie counts half); with `ranked`, also Spearman of
  model vs human scores over the split's distinct outputs (`output_scores`).

  HEAP Table 2 reports Spearman only for criteria whose data rank several outputs of a context
  (`heap.Criterion.ranked`); summarize-from-feedback and the other criteria: accuracy only.
  """
  s, y, _ = _stack_candidates(targets, scores)
  good, bad = np.asarray([preference_pair(row, gold) for row, gold in zip(s, y)]).reshape(-1, 2).T
  out = _flatten("pairwise_accuracy", pairwise_accuracy(good, bad))
  if not ranked:
    return out
  model, human = output_scores(targets, scores)
  if len(set(human.tolist())) > 1:  # else the correlation is undefined
    out.update(_flatten("spearman", spearman(model, human)))
  return out


def _pooled_mean(values, weights, axis=-1):
  return values.sum(axis=axis) / weights.sum(axis=axis)


def perplexity_metric_fn(targets, scores) -> dict[str, float]:
  """seqio score metric of a generation task: the reference targets' loss (mean negative
  log-likelihood per target token, EOS included, pooled over every token of the split) and
  perplexity = exp(loss), with 95% bootstrap intervals over items.

  Reads the summed `log_likelihoods` and `tokens` of each item's candidates (its references),
  which runner/evaluate.py records with the likelihood scorer; `scores` (normalised) are unused.
  TuringAdvice §3.2 chooses epochs and learning rates by this validation perplexity.
  """
  del scores
  if not targets or any("log_likelihoods" not in t or "tokens" not in t for t in targets):
    raise ValueError("perplexity needs each item's log_likelihoods and tokens (the likelihood "
                     "scorer records them); a reward model has no perplexity")
  nll = np.asarray([-sum(t["log_likelihoods"]) for t in targets], np.float64)
  tokens = np.asarray([sum(t["tokens"]) for t in targets], np.float64)
  loss = float(_pooled_mean(nll, tokens))
  low, high = _bootstrap(_pooled_mean, nll, tokens, num_bootstrap=NUM_BOOTSTRAP, seed=0, paired=True)
  out = _flatten("loss", Estimate(loss, low, high))
  out.update(_flatten("perplexity", Estimate(math.exp(loss), math.exp(low), math.exp(high))))
  return out


HEAP_GROUP = "heap"  # metrics.json's average over every evaluated HEAP criterion


def cluster_group(cluster: str) -> str:
  """metrics.json's name of a HEAP cluster's average."""
  return f"heap_cluster_{cluster}"


def heap_metric_groups(task_names: Sequence[str], clusters: Mapping[str, Sequence[str]] | None = None,
                       criteria: Sequence[str] | None = None,
                       task_name: Callable[[str], str] | None = None) -> dict[str, list[str]]:
  """{group: [task names]} of the evaluated HEAP criteria, for evaluation's averages (offline, and
  during training: gin/runs/finetune.gin binds it as EVAL_METRIC_GROUPS).

  "heap" holds every evaluated criterion (Table 2's Average), "heap_cluster_<cluster>" the
  evaluated ones of each cluster (Table 3's cluster Averages; §6's same-dataset ones); a group
  with none evaluated is left out. A criterion's task is `heap_<abbreviation>` or its `_tfds`
  twin. `clusters`, `criteria` and `task_name` default to HEAP's own (t5_tasks.heap).
  """
  if clusters is None or criteria is None or task_name is None:
    from t5_tasks import heap  # pylint: disable=g-import-not-at-top  # HEAP's family imports this module
    clusters = heap.CLUSTERS if clusters is None else clusters
    criteria = tuple(heap.HEAP_CRITERIA) if criteria is None else criteria
    task_name = heap.task_name if task_name is None else task_name
  evaluated = set(task_names)

  def tasks_of(abbreviations):
    return [name for a in abbreviations for name in (task_name(a), f"{task_name(a)}_tfds")
            if name in evaluated]
  groups = {HEAP_GROUP: tasks_of(criteria)}
  groups.update({cluster_group(cluster): tasks_of(members) for cluster, members in clusters.items()})
  return {group: names for group, names in groups.items() if names}
