"""Metrics of scored items: each task's own seqio score metrics with their 95% intervals, the
averages over groups of tasks (HEAP's clusters), and the items a model gets most wrong.
"""
from typing import Mapping, Sequence

import numpy as np

from runner import outputs

def _number(value) -> float:
  return float(getattr(value, "value", value))  # seqio metric fns may return seqio.metrics.Scalar


def _interval_entries(task_name: str, flat: dict) -> dict:
  """seqio's flat `{name, name_low, name_high}` -> `{name: {"value", "low", "high"}}`; NaNs dropped."""
  entries = {}
  for name, value in flat.items():
    if name.endswith(("_low", "_high")) and name.rsplit("_", 1)[0] in flat:
      continue
    value = _number(value)
    low, high = _number(flat.get(f"{name}_low", value)), _number(flat.get(f"{name}_high", value))
    if np.isnan((value, low, high)).any():
      print(f"{task_name}: {name} is undefined on these items (NaN); left out of metrics.json")
    else:
      entries[name] = outputs.interval(value, low, high)
  return entries


def task_metrics(task, records: list[dict]) -> dict:
  """The task's seqio score metrics over its records, with their 95% intervals."""
  targets = []
  for r in records:
    example = {k: v for k, v in r.items() if k not in ("task", "scores", "prediction", "gold")}
    targets.append(task.postprocess_fn(None, example={**example, "candidate_labels": r["gold"]},
                                       is_target=True))
  scores = [r["scores"] for r in records]
  metrics = {}
  for metric_fn in task.score_metric_fns:
    metrics.update(_interval_entries(task.name, metric_fn(targets=targets, scores=scores)))
  return metrics


def worst_items(records: Sequence[Mapping], count: int = 5) -> list[dict]:
  """The `count` items whose best wrong candidate outscored their best correct one by the most.

  Each: {"id", "margin" (best wrong score minus best correct score, > 0), "context" (the input
  text predictions.jsonl records, `inputs_pretokenized`), "candidates": [(text, score, correct)]}.
  Items the model ranks right, and items without both a correct and a wrong candidate, have no
  such margin and are left out; ties go by id, so the list is the same on every run.
  """
  wrong = []
  for record in records:
    scores, gold = record["scores"], record["gold"]
    correct = [s for s, y in zip(scores, gold) if y]
    incorrect = [s for s, y in zip(scores, gold) if not y]
    if correct and incorrect and max(incorrect) > max(correct):
      wrong.append((max(incorrect) - max(correct), record))
  wrong.sort(key=lambda pair: (-pair[0], str(pair[1]["id"])))
  return [{"id": record["id"], "margin": margin, "context": record.get("inputs_pretokenized", ""),
           "candidates": list(zip(_candidate_texts(record), record["scores"],
                                  (bool(y) for y in record["gold"])))}
          for margin, record in wrong[:count]]


def _candidate_texts(record: Mapping) -> list[str]:
  texts = record.get("candidates_pretokenized") or record.get("candidate_texts")
  if texts is None or len(texts) != len(record["scores"]):
    return [f"candidate {j}" for j in range(len(record["scores"]))]
  return [str(t) for t in texts]


def group_metrics(metrics: Mapping[str, Mapping[str, Mapping[str, float]]],
                  metric_groups: Mapping[str, Sequence[str]] | None) -> dict:
  """`{group: {metric: {"value", "low", "high", "tasks"}}}`: per group of tasks, each metric that
  every evaluated member reports, averaged over them unweighted; `tasks` counts them.

  A group with no evaluated member is left out; members not evaluated are not counted (HEAP
  Tables 2 and 3 average accuracy over the criteria of a cluster, each criterion once). The
  interval is the members' bounds averaged: exact if their errors moved together, wider than
  the group's own otherwise (the members share no items to resample jointly).
  """
  out = {}
  for group, names in (metric_groups or {}).items():
    if group in metrics:
      raise ValueError(f"metric group {group!r} is named like a task; groups need their own names")
    members = [metrics[name] for name in dict.fromkeys(names) if name in metrics]
    shared = [metric for metric in (members[0] if members else ())
              if all(metric in member for member in members)]
    if shared:
      out[group] = {metric: {**outputs.interval(*(np.mean([m[metric][k] for m in members])
                                                   for k in ("value", "low", "high"))),
                             "tasks": len(members)}
                    for metric in shared}
  return out
