"""HEAP (Mehri & Shwartz 2023): one preference task per criterion, `heap_<abbreviation>`, over
the released judgments of its source (`t5_tasks.heap` reads them and renders Table 5's
inputs)."""
import functools
import random

import gin

from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks.families import base
from t5_tasks import heap


# gin names these `t5_tasks.families.<name>`, as when every family was one module.
@gin.configurable(module="t5_tasks.families")
def heap_split(method: str = "paper", seed: int = 0) -> tuple[str, int]:
  """(method, seed) of HEAP's splits: 'paper' (§3: each task's comparisons at random, 80% train,
  10% validation, 10% test; seeded) or 'by_context' (every comparison of one context in one split,
  so no test context is trained on). Asked when the dataset is built."""
  if method not in heap.SPLIT_METHODS:
    raise ValueError(f"heap_split.method must be one of {heap.SPLIT_METHODS}, got {method!r}")
  return method, int(seed)


@gin.configurable(module="t5_tasks.families")
def heap_instruction(template: str | int = "paper", instructions_file: str | None = None,
                     seed: int = 0) -> tuple[str | int, str | None, int]:
  """(template, instructions_file, seed): which instruction each HEAP example carries.

  'paper': Table 5's phrasing (built in). An index: that phrasing of each criterion in
  `instructions_file` (HEAP's instructions.json). 'random': one of the file's phrasings per
  comparison, drawn from (seed, comparison id), so an example keeps its phrasing every epoch.
  """
  if template not in ("paper", "random") and not isinstance(template, int):
    raise ValueError(f"heap_instruction.template must be 'paper', 'random' or an index, got {template!r}")
  if template != "paper" and not instructions_file:
    raise ValueError(f"heap_instruction.template={template!r} needs heap_instruction.instructions_file "
                     "(HEAP's instructions.json)")
  return template, instructions_file, int(seed)


def _heap_instructions(criterion: str, comparisons) -> list[str]:
  """The instruction of each comparison, by `heap_instruction`."""
  template, path, seed = heap_instruction()
  if template == "paper":
    return [heap.HEAP_CRITERIA[criterion].instruction] * len(comparisons)
  templates = base.read(heap.read_instruction_templates, path)[criterion]
  if template == "random":
    return [templates[random.Random(f"{seed}/{c.id}").randrange(len(templates))] for c in comparisons]
  if not 0 <= template < len(templates):
    raise ValueError(f"heap_instruction.template={template}: {path} has {len(templates)} phrasings "
                     f"of {criterion}")
  return [templates[template]] * len(comparisons)


def heap_examples(files: base.Files, criterion: str) -> base.Examples:
  """One example per comparison: Table 5's inputs (`heap.render_inputs`), the good then the bad
  output as candidates, split by `heap_split`."""
  criterion = heap.criterion_of(criterion)
  spec = heap.HEAP_CRITERIA[criterion]
  path = base.single_file(files, f"heap/{spec.source}")
  comparisons = base.read(heap.read_heap_comparisons, path, criterion)
  splits = heap.split_comparisons(comparisons, *heap_split())
  out = {split: [] for split in base.SPLITS}
  for c, instruction in zip(comparisons, _heap_instructions(criterion, comparisons)):
    out[splits[c.id]].append(dict(
        id=c.id, context_id=heap.context_id(c.context), context_texts=[text for _, text in c.context],
        inputs=heap.render_inputs(instruction, c.context, c.output_label, spec.label_input),
        candidates=[c.good, c.bad], candidate_labels=[1, 0],
        candidate_scores=[c.good_score, c.bad_score]))
  return out


# Every source with a hand-written quickstart file; CommonGen, defeasible inference and story
# rewriting must be bound to their released files (../shared/data/heap has them).
_QUICKSTART_FILES = {"turingadvice": {"all": "turingadvice_eval.jsonl"},
                     "tellmewhy": {"all": "tellmewhy_test_caters_sample.csv"},
                     "hellaswag": {"all": "heap_hellaswag.jsonl"},
                     "counter_narratives": {"all": "heap_counter_narratives.csv"},
                     "chasm": {"all": "heap_chasm.json"}}
_TFDS_INSTRUCTIONS = ("Put HEAP's released judgment files in manual_dir (../shared/data works as is): "
                      + "; ".join(f"{s}: {' or '.join(p)}" for s, p in heap.SOURCE_FILES.items()))
_TFDS_RELEASE_NOTES = {
    "1.0.0": "Every comparison in 'test'.",
    "1.1.0": "train/validation/test by context (heap.context_splits), as the file tasks.",
    "2.0.0": "All 22 criteria, named by abbreviation; Table 5's rendered inputs and a context id; "
             "the paper's random 80/10/10 split by default.",
    "3.0.0": "The task's examples as `heap_examples` makes them (candidates and their scores)."}
HEAP = base.TaskFamily(
    name="heap",
    examples=heap_examples,  # each criterion's variant binds the criterion and its source file
    signature=base.SIGNATURES["preference"],
    splits=base.SPLITS,
    quickstart_files={},
    steps=(preprocessors.cloze_targets,),
    metric_fn=metrics.preference_metric_fn,
    variants={abbreviation.lower(): {
        "examples": functools.partial(heap_examples, criterion=abbreviation),
        "quickstart_files": {f"heap/{spec.source}": _QUICKSTART_FILES.get(spec.source, {})},
        # Spearman with the human scores only where Table 2 reports it.
        "metric_fn": functools.partial(metrics.preference_metric_fn, ranked=spec.ranked),
        # `heap_split` and `heap_instruction` as bound when the dataset is prepared are the ones it keeps.
        "tfds": base.TfdsSource(f"heap_comparisons/{abbreviation.lower()}:3.0.0",
                                files={f"heap/{spec.source}": {"all": heap.SOURCE_FILES[spec.source]}},
                                instructions=_TFDS_INSTRUCTIONS, release_notes=_TFDS_RELEASE_NOTES),
    } for abbreviation, spec in heap.HEAP_CRITERIA.items()},
)
