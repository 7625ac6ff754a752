"""ASQ human annotations: accuracy, agreement between rounds, question-type pairs.

Works on `t5_tasks.sources.asq.AsqAnnotation` records. The paper's pair types
(C+E, C+{C,I}, C+C, L+{U,I}) overlap, so an item counts in every group it
belongs to (`t5_tasks.sources.asq.pair_groups`).
"""
from typing import Mapping, Sequence

from sklearn import metrics as sk_metrics

from t5_tasks.analysis import mean_interval
from t5_tasks.sources import asq as asq_source

QN_TYPES = tuple(asq_source.QN_TYPES)
ALL_ITEMS = "all"


def _by_id(annotations: Sequence, name: str) -> dict:
  result = {}
  for a in annotations:
    if a.id in result:
      raise ValueError(f"{name}: id {a.id!r} annotated twice")
    result[a.id] = a
  return result


def human_accuracy(annotations: Sequence, *, seed: int = 0) -> dict:
  """Share of annotations whose chosen question is the one the narrator asked."""
  return mean_interval([a.annotated_label == a.true_label for a in annotations], seed=seed)


def round_agreement(first: Sequence, second: Sequence) -> dict:
  """Cohen's kappa and raw agreement between two rounds on their shared items."""
  a, b = _by_id(first, "first round"), _by_id(second, "second round")
  shared = [i for i in a if i in b]
  if not shared:
    raise ValueError("the two annotation rounds share no item ids")
  x = [a[i].annotated_label for i in shared]
  y = [b[i].annotated_label for i in shared]
  return {
      "n_shared": len(shared),
      "kappa": float(sk_metrics.cohen_kappa_score(x, y)),
      "raw_agreement": sum(p == q for p, q in zip(x, y)) / len(shared),
      "accuracy_first": sum(a[i].annotated_label == a[i].true_label for i in shared) / len(shared),
      "accuracy_second": sum(b[i].annotated_label == b[i].true_label for i in shared) / len(shared),
  }


def qn_type_pairs(annotations: Sequence) -> dict:
  """Counts of (actual question type, alternative question type) over annotations.

  Each round typed the questions anew (the rounds disagree on some items), so
  the table counts annotations, not items.
  """
  counts = [[0] * len(QN_TYPES) for _ in QN_TYPES]
  for a in annotations:
    counts[a.true_qn_type][a.paired_qn_type] += 1
  return {"qn_types": [asq_source.QN_TYPES[t] for t in QN_TYPES], "counts": counts, "n": len(annotations)}


def groups_of(annotation) -> tuple[str, ...]:
  return asq_source.pair_groups(annotation.true_qn_type, annotation.paired_qn_type)


def accuracy_by_pair_type(correct: Sequence[tuple[Sequence[str], bool]], *, seed: int = 0) -> dict[str, dict]:
  """Accuracy with CI over all and within each pair-type group, from (groups, correct) pairs."""
  groups: dict[str, list[bool]] = {ALL_ITEMS: []}
  groups.update((name, []) for name in asq_source.PAIR_GROUPS)
  for item_groups, is_correct in correct:
    groups[ALL_ITEMS].append(is_correct)
    for name in item_groups:
      groups[name].append(is_correct)
  return {name: mean_interval(values, seed=seed) for name, values in groups.items() if values}


def system_correct(predictions: Sequence[Mapping]) -> list[tuple[str, bool]]:
  """(id, correct) from prediction records: correct when the predicted candidate is gold."""
  result = []
  for i, p in enumerate(predictions):
    try:
      result.append((p["id"], p["gold"][p["prediction"]] == 1))
    except (KeyError, IndexError, TypeError) as e:
      raise ValueError(f"prediction {i}: needs 'id', 'prediction' and a 'gold' list ({e!r})") from e
  return result


def analyze(first: Sequence, second: Sequence = (),
            system_predictions: Mapping[str, Sequence[Mapping]] | None = None, *, seed: int = 0) -> dict:
  """Human accuracy per round and pooled, kappa, pair-type table, accuracy by pair type."""
  everything = list(first) + list(second)
  result = {
      "human_accuracy": {"first": human_accuracy(first, seed=seed)},
      "qn_type_pairs": {"first": qn_type_pairs(first)},
      "by_pair_type": {"humans": accuracy_by_pair_type(
          [(groups_of(a), a.annotated_label == a.true_label) for a in everything], seed=seed)},
  }
  if second:
    result["human_accuracy"]["second"] = human_accuracy(second, seed=seed)
    result["human_accuracy"]["pooled"] = human_accuracy(everything, seed=seed)
    result["qn_type_pairs"]["second"] = qn_type_pairs(second)
    result["agreement"] = round_agreement(first, second)
  # Systems are broken down on the annotated items, by the first round that typed each.
  groups_by_id: dict[str, tuple[str, ...]] = {}
  for a in everything:
    groups_by_id.setdefault(a.id, groups_of(a))
  result["system_accuracy"] = {}
  for name, predictions in (system_predictions or {}).items():
    correct = system_correct(predictions)
    result["system_accuracy"][name] = mean_interval([c for _, c in correct], seed=seed)
    annotated = [(groups_by_id[i], c) for i, c in correct if i in groups_by_id]
    if annotated:
      result["by_pair_type"][name] = accuracy_by_pair_type(annotated, seed=seed)
  return result
