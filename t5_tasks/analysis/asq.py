"""ASQ human annotations: accuracy, agreement between rounds, question-type pairs.

Works on `t5_tasks.sources.asq.AsqAnnotation` records. The paper's pair types
(C+E, C+{C,I}, C+C, L+{U,I}) overlap, so an item counts in every group it
belongs to (`t5_tasks.sources.asq.pair_groups`).

Table 4 (Fu et al. 2019) is the first round's: its 200 instances give the HUMAN
column (C+C 0.84, C+{C,I} 0.89) and "% in data" (38/46/32/30); the second round
(75 of them, footnote 15) only measures agreement. Pooling both rounds moves the
human rows off the paper's (C+C 0.86, C+{C,I} 0.90).
"""
from typing import Mapping, Sequence

from sklearn import metrics as sk_metrics

from t5_tasks import metrics
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


def accuracy_interval(credit: Sequence[float], *, seed: int = metrics.ASQ_SEED) -> dict:
  """{"value", "low", "high", "n"}: metrics.json's accuracy and interval of these credits
  (`metrics.asq_group_accuracy`), with the count."""
  if not len(credit):
    raise ValueError("accuracy_interval: no items")
  return {**metrics.asq_group_accuracy(credit, seed=seed).as_dict(), "n": len(credit)}


def human_accuracy(annotations: Sequence, *, seed: int = metrics.ASQ_SEED) -> dict:
  """Share of annotations whose chosen question is the one the narrator asked."""
  return accuracy_interval([float(a.annotated_label == a.true_label) for a in annotations], seed=seed)


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


def accuracy_by_pair_type(correct: Sequence[tuple[Sequence[str], float]], *,
                          seed: int = metrics.ASQ_SEED) -> dict[str, dict]:
  """Accuracy with CI over all and within each pair-type group, from (groups, credit) pairs."""
  groups: dict[str, list[float]] = {ALL_ITEMS: []}
  groups.update((name, []) for name in asq_source.PAIR_GROUPS)
  for item_groups, is_correct in correct:
    groups[ALL_ITEMS].append(is_correct)
    for name in item_groups:
      groups[name].append(is_correct)
  return {name: accuracy_interval(values, seed=seed) for name, values in groups.items() if values}


def system_credit(predictions: Sequence[Mapping]) -> list[tuple[str, float]]:
  """(id, credit) from prediction records: each item's accuracy credit from its scores, as
  metrics.json counts it (`t5_tasks.metrics.item_credit`: a tie gets 0.5, not the credit of the
  candidate `prediction` happens to name)."""
  result = []
  for i, p in enumerate(predictions):
    try:
      result.append((p["id"], metrics.item_credit("accuracy", p["scores"], p["gold"])))
    except (KeyError, IndexError, TypeError, ValueError) as e:
      raise ValueError(f"prediction {i}: needs 'id', and 'scores' and 'gold' lists of one length ({e!r})") from e
  return result


def groups_by_id(*rounds: Sequence) -> dict[str, tuple[str, ...]]:
  """{item id: its pair groups} by the first round that annotated the item, even when that round
  puts it in no group (as `t5_tasks.families.asq_examples` writes pair_groups into each record)."""
  groups: dict[str, tuple[str, ...]] = {}
  for annotations in rounds:
    for a in annotations:
      groups.setdefault(a.id, groups_of(a))
  return groups


def pair_type_shares(annotations: Sequence) -> dict[str, dict]:
  """Table 4's "% in data": {group: {"n", "share"}} over the annotated instances."""
  return {name: {"n": n, "share": n / len(annotations)} for name in asq_source.PAIR_GROUPS
          for n in [sum(name in groups_of(a) for a in annotations)]}


def analyze(first: Sequence, second: Sequence = (),
            system_predictions: Mapping[str, Sequence[Mapping]] | None = None, *,
            seed: int = metrics.ASQ_SEED) -> dict:
  """Human accuracy per round, kappa, pair-type table, Table 4's accuracy by pair type (humans:
  the first round, as the paper's), and each system's accuracy by pair type on the annotated items.

  `warnings` holds one line per system none of whose items is annotated (it has no Table 4 row).
  """
  result = {
      "human_accuracy": {"first": human_accuracy(first, seed=seed)},
      "qn_type_pairs": {"first": qn_type_pairs(first)},
      "pair_type_shares": pair_type_shares(first),
      "by_pair_type": {"humans": accuracy_by_pair_type(
          [(groups_of(a), a.annotated_label == a.true_label) for a in first], seed=seed)},
      "warnings": [],
  }
  if second:
    result["human_accuracy"]["second"] = human_accuracy(second, seed=seed)
    result["qn_type_pairs"]["second"] = qn_type_pairs(second)
    result["agreement"] = round_agreement(first, second)
  groups = groups_by_id(first, second)
  untyped = sum(not g for g in groups.values())
  # The two overall rows are over different items; each says which. Table 4's OVERALL HUMAN (90%)
  # is the first round's 200 items, the "all" row's population.
  result["overall_rows"] = {
      ALL_ITEMS: f"overall (the {len(groups)} items a round annotated, {untyped} of them in no pair type)",
      "system_accuracy": "overall (every item the system scored: metrics.json's accuracy)"}
  result["system_accuracy"] = {}
  if seed != metrics.ASQ_SEED and system_predictions:
    result["warnings"].append(f"intervals drawn with seed {seed}; metrics.json's are seed {metrics.ASQ_SEED}, "
                              f"so a system's intervals here differ from its metrics.json's")
  for name, predictions in (system_predictions or {}).items():
    credit = system_credit(predictions)
    result["system_accuracy"][name] = accuracy_interval([c for _, c in credit], seed=seed)
    annotated = [(groups[i], c) for i, c in credit if i in groups]
    if annotated:
      result["by_pair_type"][name] = accuracy_by_pair_type(annotated, seed=seed)
    else:
      result["warnings"].append(f"{name}: none of its {len(credit)} items is annotated in these rounds "
                                f"(the annotated items are ASQ's asq_annotation.json), so it has no "
                                f"accuracy-by-pair-type row")
  return result
