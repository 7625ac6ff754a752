"""ASQ (Fu, Chang & Danescu-Niculescu-Mizil 2019, NAACL): which of two questions a narrator asked,
with the pair types of the human annotation rounds (Table 4's rows).

Splits (§5, "Baseline systems performance"): `train` and `test` (the 8,865-2,500 split);
`annotation`, the 500 instances set aside for the human rounds (`asq_annotation.json`), so that
one evaluation of it gives a model's Table 4 row, each pair type decided by the first round as the
human row is; and `heldout`, the 10,000 instances the paper reserved for Table 5 ("never-before-seen
held-out"), for whoever holds that file (the public release and ../shared/data have none).
"""
from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks.families import base
from t5_tasks.sources import asq


def asq_examples(files: base.Files) -> base.Examples:
  """Narrative and both questions; annotated pair types joined by id where they exist."""
  rounds = [base.read(asq.read_asq_annotations, path) for path in files["asq_annotations"].values()]
  groups = {}
  for annotations in rounds:
    for a in annotations:
      groups.setdefault(a.id, asq.pair_groups(a.true_qn_type, a.paired_qn_type))
  kinds = asq.pair_types_by_id(*rounds)
  return {split: [dict(id=item.id, inputs=item.narrative, candidates=list(item.questions),
                       candidate_labels=base.one_hot(item.label, 2),
                       pair_type=kinds.get(item.id, ""),
                       pair_groups="|".join(groups.get(item.id, ())))
                  for item in base.read(asq.read_asq, path)]
          for split, path in files["asq"].items()}


ASQ_INTENT_CLOZE = base.TaskFamily(
    name="asq_intent_cloze",
    examples=asq_examples,
    signature=base.SIGNATURES["asq"],
    splits=("train", "test", "annotation", "heldout"),
    # No quickstart annotation file: the quickstart's rounds annotate its test items; the release's
    # asq_annotation.json is read from where it lies (../shared/data/asq), bound as 'annotation'.
    quickstart_files={"asq": {"train": "asq_train.json", "test": "asq_test.json",
                              "heldout": "asq_heldout.json"},
                      "asq_annotations": {"first": "asq_human_annotation_first.json",
                                          "second": "asq_human_annotation_second.json"}},
    steps=(preprocessors.cloze_targets,),
    metric_fn=metrics.asq_metric_fn,
    # The builder also prepares ASQ's validation file; the task has no such split.
    tfds=base.TfdsSource(
        "asq:3.0.0",
        files={"asq": {"train": ("**/asq_train*.json",),
                       "validation": ("**/asq_valid*.json", "**/asq_val.json"),
                       "test": ("**/asq_test*.json",), "annotation": ("**/asq_annotation.json",),
                       "heldout": ("**/asq_heldout*.json",)},
               "asq_annotations": {"first": ("**/*annotation_first*.json",),
                                   "second": ("**/*annotation_second*.json",)}},
        instructions=("Put the ASQ files in manual_dir: asq_train*.json, asq_valid*.json, "
                      "asq_test*.json, asq_annotation.json and/or asq_heldout*.json, plus the annotation rounds "
                      "*annotation_first*.json and *annotation_second*.json."),
        release_notes={"1.0.0": "The items and the first round's pair type.",
                       "2.0.0": "The task's examples: pair groups kept too.",
                       "3.0.0": "The annotation and held-out splits."}),
)
