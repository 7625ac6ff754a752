"""Agreement between judges of pairwise comparisons, as summarize-from-feedback reports.

Items are `CandidateItem`s oriented [human-preferred, other]. A judge is any
scorer giving each of the two responses a number; on each item it picks the
higher one (a tie is a coin flip). Agreement of two judges on an item is the
probability that they pick the same response. The judges of appendix G.7: length,
copying (G.5), ROUGE against the reference summary, labelers with each other and the
labeler ensemble, each table over the comparisons of one policy at one temperature
(`same_policy_groups`); each labeler's high-confidence threshold (C.1, step 4); and the
length-controlled preference between policies of appendix F.
"""
import collections
import re
from typing import Mapping, Sequence

import numpy as np
from scipy import optimize
from scipy import special
from sklearn import linear_model
from sklearn.feature_extraction import text as sk_text

from t5_tasks.analysis import mean_interval
from t5_tasks.baselines import CandidateItem
from t5_tasks.baselines import preference_heuristics

HUMANS = "humans"
REFERENCE_POLICY = "ref"  # the released comparisons' name for a post's reference (human) summary
# G.4 reports these three; G.7 names its judge only "ROUGE", so the judge is their mean F1.
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
_WORDS = sk_text.CountVectorizer(token_pattern=r"(?u)\b\w+\b").build_analyzer()  # as `response_length`


def picks_preferred(scores) -> np.ndarray:
  """[N] probability that a judge with these [N, 2] scores picks response 0 (NaN: not judged)."""
  scores = np.asarray(scores, dtype=np.float64)
  if scores.ndim != 2 or scores.shape[1] != 2:
    raise ValueError(f"scores must be [items, 2]; got shape {scores.shape}")
  picks = (scores[:, 0] > scores[:, 1]) + 0.5 * (scores[:, 0] == scores[:, 1])
  return np.where(np.isnan(scores).any(axis=1), np.nan, picks)


def agreement_rates(judge_scores: Mapping[str, Sequence[Sequence[float]]], *, seed: int = 0) -> dict:
  """Agreement of every judge with the humans and with each other, bootstrap CI and SE.

  A judge may leave items out (NaN scores, as ROUGE where an item has no reference): two
  judges are compared on the items both judged, and each interval carries its n.
  Returns {"with_humans": {judge: interval}, "between": {a: {b: interval}}} (a != b).
  """
  picks = {HUMANS: None, **{name: picks_preferred(s) for name, s in judge_scores.items()}}
  sizes = {len(p) for p in picks.values() if p is not None}
  if len(sizes) != 1:
    raise ValueError(f"judges score different numbers of items: {sorted(sizes)}")
  n = sizes.pop()
  picks[HUMANS] = np.ones(n)
  for name, p in picks.items():
    if np.isnan(p).all():
      raise ValueError(f"judge {name!r} judged no item")
  names = list(picks)
  between = {a: {} for a in names}
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      both = ~np.isnan(picks[a]) & ~np.isnan(picks[b])
      if not both.any():
        raise ValueError(f"judges {a!r} and {b!r} have no judged item in common")
      pa, pb = picks[a][both], picks[b][both]
      between[a][b] = between[b][a] = mean_interval(pa * pb + (1 - pa) * (1 - pb), seed=seed)
  return {"with_humans": {name: between[name][HUMANS] for name in names if name != HUMANS},
          "between": between}


HEURISTICS = preference_heuristics.SCORERS


def heuristic_scores(items: Sequence[CandidateItem]) -> dict[str, list[list[float]]]:
  """Scores of the length and copying (LCS of bigrams) heuristics on the items."""
  return {name: preference_heuristics.score_items(items, scorer) for name, scorer in HEURISTICS.items()}


def reference_summaries(comparisons: Sequence) -> dict[str, str]:
  """Each post's reference summary: the summary of policy "ref" in any of its comparisons."""
  references = {}
  for c in comparisons:
    for text, policy in zip(c.summaries, c.policies):
      if policy == REFERENCE_POLICY and references.setdefault(c.id, text) != text:
        raise ValueError(f"post {c.id!r} has two different {REFERENCE_POLICY!r} summaries")
  return references


def rouge_scores(items: Sequence[CandidateItem], references: Sequence[str | None]) -> dict:
  """ROUGE as a judge (appendix G.7): each candidate's ROUGE against the item's reference.

  ROUGE compares a summary with the post's reference summary, as in G.4. The score is the
  mean F1 of ROUGE_TYPES (Porter stemming, rouge-score's tokenizer). Items without a
  reference, or whose reference is itself one of the two candidates (ROUGE 1 by
  construction), are not judged: their rows are NaN and the counts say how many.
  """
  from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top  (nltk takes seconds)
  if len(references) != len(items):
    raise ValueError(f"{len(references)} references for {len(items)} items")
  scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
  mean_f1 = lambda reference, summary: float(np.mean(
      [s.fmeasure for s in scorer.score(reference, summary).values()]))
  scores, no_reference, reference_compared = [], 0, 0
  for item, reference in zip(items, references):
    if reference is None:
      no_reference += 1
    elif any(c.strip() == reference.strip() for c in item.candidates):
      reference_compared += 1
    else:
      scores.append([mean_f1(reference, c) for c in item.candidates])
      continue
    scores.append([np.nan, np.nan])
  return {"scores": scores, "n_judged": len(items) - no_reference - reference_compared,
          "n_without_reference": no_reference, "n_reference_is_a_candidate": reference_compared}


def labeler_agreement(comparisons: Sequence, *, seed: int = 0) -> dict:
  """How often two different workers labelling the same comparison chose the same summary.

  A comparison is a post and a pair of summaries (in either order); the labeler row of
  G.7's tables. Each comparison labelled by two or more different workers gives the share
  of its pairs of different workers who agree; the rate is the mean over those comparisons,
  bootstrapped over them. Labels without a worker are left out (counted).
  """
  groups = collections.defaultdict(list)
  for c in comparisons:
    if c.worker:
      groups[(c.id, frozenset(c.summaries))].append((c.worker, c.summaries[c.choice]))
  shares, n_pairs = [], 0
  for labels in groups.values():
    same = [float(chose_a == chose_b) for i, (worker_a, chose_a) in enumerate(labels)
            for worker_b, chose_b in labels[i + 1:] if worker_a != worker_b]
    if same:
      shares.append(np.mean(same))
      n_pairs += len(same)
  return {"rate": mean_interval(shares, seed=seed) if shares else None, "n_comparisons": len(shares),
          "n_label_pairs": n_pairs, "n_labels_without_worker": sum(not c.worker for c in comparisons)}


def scores_from_predictions(items: Sequence[CandidateItem], predictions: Sequence[Mapping],
                            name: str = "predictions") -> list[list[float]]:
  """A scorer's [preferred, other] scores from its prediction records, matched by item id."""
  by_id = {}
  for p in predictions:
    if sorted(p["gold"]) != [0, 1]:
      raise ValueError(f"{name}: item {p['id']!r} is not a two-candidate preference item")
    if p["id"] in by_id:
      raise ValueError(f"{name}: item id {p['id']!r} repeats, so predictions cannot be matched to items")
    good = p["gold"].index(1)
    by_id[p["id"]] = [p["scores"][good], p["scores"][1 - good]]
  missing = [it.id for it in items if it.id not in by_id]
  if missing:
    raise ValueError(f"{name}: no prediction for {len(missing)} items, e.g. {missing[0]!r}")
  return [by_id[it.id] for it in items]


def _log_length_ratio(a: str, b: str) -> float:
  length = preference_heuristics.response_length
  return float(np.log(max(length("", a), 1.0) / max(length("", b), 1.0)))


def _policy_comparisons(items: Sequence[CandidateItem]) -> list[tuple[str, str, float]]:
  """(preferred policy, other policy, log length ratio preferred / other) of items naming them."""
  return [(it.metadata["systems"][0], it.metadata["systems"][1],
           _log_length_ratio(it.candidates[0], it.candidates[1]))
          for it in items if it.metadata.get("systems")]


def _groups(comparisons) -> dict[str, str]:
  """Each policy's linked group (chains of comparisons between different policies), named by
  its first policy in sorted order."""
  group = {p: p for won, lost, _ in comparisons for p in (won, lost)}

  def root(p):
    while group[p] != p:
      p = group[p]
    return p
  for won, lost, _ in comparisons:
    a, b = sorted((root(won), root(lost)))
    group[b] = a
  return {p: root(p) for p in sorted(group)}


def _linked(comparisons, a: str, b: str) -> bool:
  groups = _groups(comparisons)
  return a in groups and b in groups and groups[a] == groups[b]


def _separable(z: np.ndarray) -> bool:
  """Whether the logistic likelihood of the comparisons `z` has no maximum.

  It has none when some w gives z @ w >= 0 on every comparison and > 0 on one (Albert &
  Anderson 1984): along w the likelihood rises for ever. A linear program looks for w.
  """
  result = optimize.linprog(-z.sum(axis=0), A_ub=-z, b_ub=np.zeros(len(z)), bounds=(-1, 1),
                            method="highs")
  return result.status == 0 and -result.fun > 1e-6


def _separation_error(comparisons) -> ValueError:
  record = collections.defaultdict(lambda: [0, 0])  # wins, losses against other policies
  for won, lost, _ in comparisons:
    if won != lost:
      record[won][0] += 1
      record[lost][1] += 1
  one_sided = [f"{p!r} {'loses' if wins == 0 else 'wins'} all {wins + losses} of its comparisons"
               for p, (wins, losses) in sorted(record.items()) if wins == 0 or losses == 0]
  why = "; ".join(one_sided) or "policies and length ratios together predict every choice"
  return ValueError(f"length control: the logistic regression has no finite fit, because the "
                    f"comparisons are separable ({why})")


def _fit(comparisons) -> tuple[dict[str, float], float] | None:
  """Maximum-likelihood policy effects and length coefficient; None if there is no maximum.

  Features of a comparison: +1 at the preferred policy, -1 at the other, and the log length
  ratio; no intercept, no penalty. Only differences within a linked group are identified: the
  group's first policy is held at 0 (it has no column), as is a length coefficient that
  only equal lengths leave free.
  """
  groups = _groups(comparisons)
  column = {p: i for i, p in enumerate(p for p, first in groups.items() if p != first)}
  z = np.zeros((len(comparisons), len(column) + 1))
  for row, (won, lost, ratio) in enumerate(comparisons):
    if won in column:
      z[row, column[won]] += 1
    if lost in column:
      z[row, column[lost]] -= 1
    z[row, -1] = ratio
  has_length = bool(np.any(z[:, -1]))
  z = z if has_length else z[:, :-1]
  if not z.shape[1] or _separable(z):
    return None
  # A comparison read in the other order (-z, not preferred) is the same comparison: both go
  # in, which gives the fit both classes and leaves the maximum where it was.
  model = linear_model.LogisticRegression(C=np.inf, fit_intercept=False, solver="newton-cholesky",
                                          tol=1e-10, max_iter=1000)
  w = model.fit(np.concatenate([z, -z]), np.repeat([1, 0], len(z))).coef_[0]
  effects = {p: float(w[column[p]]) if p in column else 0.0 for p in groups}
  return effects, float(w[-1]) if has_length else 0.0


def length_controlled_preferences(items: Sequence[CandidateItem], pairs: Sequence[tuple[str, str]],
                                  *, seed: int = 0, n_resamples: int = 200) -> dict:
  """How often humans prefer policy a over policy b, raw and at equal length, for each pair.

  Appendix F: "we train a logistic regression model to predict the human-preferred summary
  on our dataset of human comparisons. We provide this model with 2 features: the identity
  of each policy, and the log ratio of the summary lengths", then "give each policy ID to
  our trained logistic regression model and set the log length ratio to zero". One model
  over every comparison of the items that name their policies (metadata "systems"):
  P(first preferred) = sigmoid(e[first] - e[second] + c * log(len first / len second)),
  lengths in words, maximum likelihood without penalty. At log ratio 0, a over b is
  sigmoid(e[a] - e[b]), so a and b need no direct comparison, only a chain of them.

  The 95% interval resamples the comparisons; a resample in which the maximum does not
  exist (separable, or a pair no longer linked) is left out and counted.
  """
  comparisons = _policy_comparisons(items)
  if not comparisons:
    raise ValueError("length control: no item names its policies (metadata 'systems')")
  policies = sorted({p for won, lost, _ in comparisons for p in (won, lost)})
  for a, b in pairs:
    for policy in (a, b):
      if policy not in policies:
        raise ValueError(f"length control: policy {policy!r} is in no comparison; "
                         f"policies: {', '.join(policies)}")
    if a == b:
      raise ValueError(f"length control: {a!r} is compared with itself")
    if not _linked(comparisons, a, b):
      raise ValueError(f"length control: no chain of comparisons links {a!r} and {b!r}")
  fit = _fit(comparisons)
  if fit is None:
    raise _separation_error(comparisons)
  effects, length_coefficient = fit
  at_equal_length = lambda e, a, b: float(special.expit(e[a] - e[b]))
  rng = np.random.default_rng(seed)
  draws, without_fit = [], 0
  for _ in range(n_resamples):
    sample = [comparisons[r] for r in rng.integers(len(comparisons), size=len(comparisons))]
    sample_fit = _fit(sample) if all(_linked(sample, a, b) for a, b in pairs) else None
    if sample_fit is None:
      without_fit += 1
    else:
      draws.append([at_equal_length(sample_fit[0], a, b) for a, b in pairs])
  if len(draws) < 2:
    raise ValueError(f"length control: only {len(draws)} of {n_resamples} resamples of the "
                     f"{len(comparisons)} comparisons have a finite fit, too few for an interval")
  draws = np.asarray(draws)
  results = []
  for j, (a, b) in enumerate(pairs):
    direct = [(won == a, ratio if won == a else -ratio) for won, lost, ratio in comparisons
              if won != lost and {won, lost} == {a, b}]
    low, high = np.percentile(draws[:, j], [2.5, 97.5])
    results.append({
        "a": a, "b": b, "n_direct": len(direct),
        "raw": mean_interval([chose_a for chose_a, _ in direct], seed=seed) if direct else None,
        "length_controlled": {"value": at_equal_length(effects, a, b), "low": float(low),
                              "high": float(high), "se": float(draws[:, j].std(ddof=1))},
        "mean_log_length_ratio": float(np.mean([r for _, r in direct])) if direct else None,
    })
  return {"n_comparisons": len(comparisons), "policies": policies, "policy_effects": effects,
          "length_coefficient": length_coefficient, "n_resamples": n_resamples,
          "n_resamples_without_fit": without_fit, "pairs": results}


# G.7: "all of the summary comparisons are generated by the same policy at the same temperature"
# (Table 20: the 1.3B supervised model at T=0.7). A released policy name may end in its sampling
# temperature, `_t0.7` or `_t.7`; without one the temperature is not recorded (None).
_TEMPERATURE_SUFFIX = re.compile(r"^(?P<policy>.+?)_t(?P<temperature>\d*\.?\d+)$")


def policy_and_temperature(policy: str) -> tuple[str, float | None]:
  """(policy, sampling temperature or None) of a released policy name."""
  match = _TEMPERATURE_SUFFIX.match(policy)
  return (match["policy"], float(match["temperature"])) if match else (policy, None)


def same_policy_groups(comparisons: Sequence) -> dict[tuple[str, float | None], list[int]]:
  """{(policy, temperature): indices of the comparisons whose two summaries it sampled} (G.7's
  tables, one each); comparisons of two different policies or temperatures are in none."""
  groups = collections.defaultdict(list)
  for index, c in enumerate(comparisons):
    first, second = (policy_and_temperature(p) for p in c.policies)
    if first == second:
      groups[first].append(index)
  return dict(groups)


def _labels_by_comparison(comparisons: Sequence) -> dict:
  """{(post id, pair of summaries): [(index, worker, chosen summary)]} of the labels naming a worker."""
  groups = collections.defaultdict(list)
  for index, c in enumerate(comparisons):
    if c.worker:
      groups[(c.id, frozenset(c.summaries))].append((index, c.worker, c.summaries[c.choice]))
  return groups


def _majority(chosen: Sequence[str], summary: str) -> float:
  """How often a majority vote over `chosen` picks `summary`: 1, 0, or 0.5 on a tie (a coin flip)."""
  votes = sum(c == summary for c in chosen)
  return 0.5 if 2 * votes == len(chosen) else float(2 * votes > len(chosen))


def labeler_ensemble(comparisons: Sequence, judge_scores: Mapping[str, Sequence[Sequence[float]]] = (),
                     *, min_workers: int = 3, seed: int = 0) -> dict:
  """The labeler ensemble as a judge (G.7, Tables 20-23): the modal label of the workers who
  labelled a comparison, on comparisons labelled by at least `min_workers` different workers
  ("All ensembles have at least 3 workers"); a tied vote is a coin flip.

  Against a labeler the ensemble leaves that labeler out ("the ensembles are slightly smaller ...
  because we need to exclude the labeler being predicted"): one value per label. Against another
  judge (`judge_scores`, [preferred, other] per comparison as `agreement_rates` takes them) it is
  every worker's vote: one value per comparison, judged on its first label's orientation.
  Returns {"with_labelers": interval or None, "with_judges": {judge: interval}, "n_comparisons"}.
  """
  with_labelers, with_judges = [], collections.defaultdict(list)
  picks = {name: picks_preferred(s) for name, s in dict(judge_scores).items()}
  n_comparisons = 0
  for labels in _labels_by_comparison(comparisons).values():
    if len({worker for _, worker, _ in labels}) < min_workers:
      continue
    n_comparisons += 1
    for _, worker, chosen in labels:
      others = [c for _, w, c in labels if w != worker]
      with_labelers.append(_majority(others, chosen))
    first, _, first_chosen = labels[0]
    ensemble = _majority([c for _, _, c in labels], first_chosen)  # P(the ensemble picks item 0)
    for name, p in picks.items():
      if not np.isnan(p[first]):
        with_judges[name].append(ensemble * p[first] + (1 - ensemble) * (1 - p[first]))
  return {"with_labelers": mean_interval(with_labelers, seed=seed) if with_labelers else None,
          "with_judges": {name: mean_interval(v, seed=seed) for name, v in with_judges.items()},
          "n_comparisons": n_comparisons}


def confidence_thresholds(comparisons: Sequence, *, target: float = 0.8, min_others: int = 2) -> dict:
  """Each labeler's high-confidence threshold (appendix C.1, step 4): the lowest confidence c on
  the 1-9 scale such that the labeler's labels of confidence c or more agree with the reference
  at least `target` (80%) of the time on average, so that the threshold keeps the most labels.

  The paper's reference is the researchers' label, which the released comparisons do not hold;
  here it is the majority of the other workers who labelled the same comparison (at least
  `min_others`; a tied majority is no reference). Labels without a confidence do not count.
  Returns {worker: {"threshold": c or None (no c reaches the target), "agreement", "n", "n_labels"}},
  "agreement" and "n" at the threshold (at the highest confidence if none is reached).
  """
  scored = collections.defaultdict(list)  # worker -> [(confidence, agrees with the reference)]
  for labels in _labels_by_comparison(comparisons).values():
    for index, worker, chosen in labels:
      others = [c for _, w, c in labels if w != worker]
      confidence = comparisons[index].confidence
      reference = _majority(others, chosen) if len(others) >= min_others else 0.5
      if confidence is not None and reference != 0.5:
        scored[worker].append((confidence, reference))
  thresholds = {}
  for worker, labels in sorted(scored.items()):
    for c in range(1, 10):
      kept = [agrees for confidence, agrees in labels if confidence >= c]
      if kept and (np.mean(kept) >= target or c == max(confidence for confidence, _ in labels)):
        reached = bool(np.mean(kept) >= target)
        thresholds[worker] = {"threshold": c if reached else None, "agreement": float(np.mean(kept)),
                              "n": len(kept), "n_labels": len(labels)}
        break
  return thresholds
