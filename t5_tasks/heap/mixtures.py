"""HEAP's training protocols (§4.2) as the names and tasks of mixtures; `t5_tasks.mixtures`
registers them."""
from t5_tasks.heap import criteria


def protocol_mixtures() -> dict[str, list[str]]:
  """HEAP's training protocols (§4.2) as mixtures of its 22 criteria and nothing else.

  Single-task trains on `heap_<criterion>` itself. Multi-task: `heap_multitask`, every criterion.
  Cross-task: `heap_cross_task_<criterion>`, every criterion but the target. Cross-cluster:
  `heap_cross_cluster_<cluster>_<criterion>`, the target's cluster without the target (Table 3's
  C^{/t}; clusters in `criteria.CLUSTERS`, §6's same-dataset ones included), and `heap_cluster_<cluster>`
  the whole cluster, to evaluate on. Each protocol is tested on the target's test split.
  """
  every = [criteria.task_name(a) for a in criteria.HEAP_CRITERIA]
  out = {"heap_multitask": every}
  for abbreviation in criteria.HEAP_CRITERIA:
    target = criteria.task_name(abbreviation)
    out[f"heap_cross_task_{abbreviation.lower()}"] = [t for t in every if t != target]
  for cluster, members in criteria.CLUSTERS.items():
    names = [criteria.task_name(a) for a in members]
    out[f"heap_cluster_{cluster}"] = names
    for target in names:
      out[f"heap_cross_cluster_{cluster}_{target[len('heap_'):]}"] = [t for t in names if t != target]
  return out
