"""The papers' simple baselines, evaluable like a model.

A baseline scores the candidates of a registered task's own examples (the dicts of
`task.source.examples(split)`, the items the model evaluation scores), reading each
example's context through `example_context`; scripts/run_baseline.py turns the scores into
the model evaluation's prediction records and metrics. `CandidateItem` holds the released
comparisons that the agreement analysis (t5_tasks.analysis.agreement) judges.
"""
import dataclasses
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class CandidateItem:
  """One cloze or preference item: a context and K candidates, gold[k] = 1 if correct."""
  task: str
  id: str
  context: str
  candidates: tuple[str, ...]
  gold: tuple[int, ...]
  metadata: Mapping[str, object] = dataclasses.field(default_factory=dict)


def example_context(example: Mapping[str, object]) -> str:
  """The text a task example's candidates answer, from its raw fields (t5_tasks.families SIGNATURES).

  TimeDial: the dialog's turns; HEAP: the context fields' texts; summarize-from-feedback: title
  and post; ASQ: the narrative (its `inputs`).
  """
  if "conversation" in example:
    return "\n".join(example["conversation"])
  if "context_texts" in example:
    return "\n".join(example["context_texts"])
  if "post" in example:
    return f"{example['title']}\n{example['post']}"
  if isinstance(example.get("inputs"), str):
    return example["inputs"]
  raise ValueError(f"example {example.get('id')!r}: no context field (conversation, context_texts, "
                   f"post or inputs) among {sorted(example)}")
