"""The papers' reference figures per task, to place a model's metrics among them.

`REFERENCES[task]` lists `(metric, label, value, source)`: `metric` is the name metrics.json
uses (t5_tasks.metrics: "two_best_accuracy", "accuracy", "accuracy/C+E", "pairwise_accuracy"),
`value` is on the metric's 0..1 scale (the papers print percentages), and `source` names the
paper, table and row each number was read from in /work/shared/papers/. Chance levels are
derived, and their source says how. tests/t5_tasks/test_references.py checks numbers against
the papers' text. runner/report.py draws them as lines on the charts and lists them in a table.

The papers' conditions differ from ours (models, data splits, training): these figures place
a number, they are not targets it must reproduce.
"""
from typing import Iterable

from t5_tasks import heap

Reference = tuple[str, str, float, str]  # (metric, label, value, source)

TFDS_SUFFIX = "_tfds"  # a task's TFDS twin reads the same items (t5_tasks.tasks)

# TimeDial §5: 2-best accuracy counts an item right when the two top-ranked options are both
# correct. Ranking 4 options at random makes the top two a uniformly random pair of the
# C(4, 2) = 6 pairs, of which exactly one holds the 2 correct options: chance is 1/6. Top-1
# accuracy picks one option of 4 at random, 2 of them correct: chance is 2/4.
TIMEDIAL_CHANCE: tuple[Reference, ...] = (
    ("two_best_accuracy", "chance", 1 / 6, "derived: 2 correct of 4 options, 1 of C(4,2)=6 pairs"),
    ("accuracy", "chance", 0.5, "derived: 2 correct of 4 options"),
)

# TimeDial Table 5 uses the full dialog context for every model (its caption); Table 7's
# context-scope numbers are too garbled in the extracted text to read reliably.
TIMEDIAL_FULL: tuple[Reference, ...] = TIMEDIAL_CHANCE + (
    ("two_best_accuracy", "human", 0.978, "TimeDial Table 5, row 'human'"),
    ("two_best_accuracy", "T5-large in-domain", 0.748, "TimeDial Table 5, row 'T5 large-in'"),
    ("two_best_accuracy", "T5-base in-domain", 0.592, "TimeDial Table 5, row 'T5 base-in'"),
    ("two_best_accuracy", "T5-large zero-shot", 0.391, "TimeDial Table 5, row 'T5 large-zero'"),
    ("two_best_accuracy", "BERT-large mask filling in-domain", 0.700,
     "TimeDial Table 5, row 'mask filling (BERT) large-in'"),
)

# ASQ Table 4 reports the similarity baseline (SIM), the fine-tuned transformer LM (FT-LM) and
# humans on the 200 human-annotated instances, overall and per pair type; footnote 16: "By
# construction, random accuracy is 50%" (one question of two). Table 5 (held-out) is garbled.
ASQ: tuple[Reference, ...] = (
    ("accuracy", "chance", 0.5, "ASQ footnote 16: 'random accuracy is 50%'"),
    ("accuracy", "human", 0.90, "ASQ Table 4, row 'OVERALL', column HUMAN"),
    ("accuracy", "FT-LM", 0.80, "ASQ Table 4, row 'OVERALL', column FT-LM"),
    ("accuracy", "similarity baseline", 0.76, "ASQ Table 4, row 'OVERALL', column SIM"),
    ("accuracy/C+E", "human", 1.00, "ASQ Table 4, row 'C + E', column HUMAN"),
    ("accuracy/C+E", "FT-LM", 0.88, "ASQ Table 4, row 'C + E', column FT-LM"),
    ("accuracy/C+{C,I}", "human", 0.89, "ASQ Table 4, row 'C + {C, I}', column HUMAN"),
    ("accuracy/C+{C,I}", "FT-LM", 0.74, "ASQ Table 4, row 'C + {C, I}', column FT-LM"),
    ("accuracy/C+C", "human", 0.84, "ASQ Table 4, row 'C + C', column HUMAN"),
    ("accuracy/C+C", "FT-LM", 0.73, "ASQ Table 4, row 'C + C', column FT-LM"),
    ("accuracy/L+{U,I}", "human", 1.00, "ASQ Table 4, row 'L + {U, I}', column HUMAN"),
    ("accuracy/L+{U,I}", "FT-LM", 0.75, "ASQ Table 4, row 'L + {U, I}', column FT-LM"),
)

# HEAP Table 2, accuracy (%, mean of 5 seeds): (Base, Single-task) per criterion, in its row
# order. The extracted text garbles a few cells ("4\overline{4.35...}" is AV's 44.35; the row
# "SRPI" is SRPl); the test reads every row back from the text.
HEAP_TABLE_2_ACCURACY = {
    "AH": (52.55, 67.33), "AG": (58.97, 69.47), "AV": (53.9, 44.35), "QA": (46.35, 58.96),
    "HS": (49.76, 67.91), "CR": (49.07, 77.96), "BCN": (47.33, 50.60), "CCN": (44.19, 64.54),
    "CNG": (56.32, 77.67), "CNSp": (51.17, 54.39), "CNSu": (43.24, 58.64), "CNI": (41.77, 83.59),
    "CNO": (55.07, 67.35), "CNSt": (47.04, 76.39), "HSO": (46.15, 68.81), "SRC": (44.81, 51.80),
    "SRE": (37.5, 49.64), "SRPl": (45.89, 70.72), "SRPr": (40.67, 49.60), "SRS": (52.22, 55.33),
    "DIA": (48.24, 65.43), "DII": (49.93, 60.82),
}


def _heap(abbreviation: str) -> tuple[Reference, ...]:
  base, single = HEAP_TABLE_2_ACCURACY[abbreviation]
  row = f"HEAP Table 2, row '{abbreviation}'"
  return (
      # One output of a pair is better: a random choice is right half the time (HEAP's results
      # call the base model's 50.58% average "akin to a random baseline").
      ("pairwise_accuracy", "chance", 0.5, "derived: one of two outputs"),
      ("pairwise_accuracy", "BART-base, no fine-tuning", base / 100, f"{row}, column Accuracy Base"),
      ("pairwise_accuracy", "BART-base single-task", single / 100, f"{row}, column Accuracy Single-task"),
  )


# Summarize from Feedback, Appendix G.7 Table 20 (comparisons of 1.3B supervised samples at
# T=0.7 on TL;DR): agreement with a labeler, the row 'labeler'. Appendix C.2: labelers agree
# with each other 72% of the time in the training corpus (the comparisons this task scores).
SUMMARIZE_FEEDBACK: tuple[Reference, ...] = (
    ("pairwise_accuracy", "chance", 0.5, "derived: one of two summaries"),
    ("pairwise_accuracy", "labeler-labeler agreement", 0.72,
     "Summarize from Feedback Appendix C.2: 'Labelers agree with each other 72% of the time'"),
    ("pairwise_accuracy", "6.7B reward model", 0.708,
     "Summarize from Feedback Table 20, row 'labeler', column '6.7B RM'"),
    ("pairwise_accuracy", "1.3B reward model", 0.658,
     "Summarize from Feedback Table 20, row 'labeler', column '1.3B RM'"),
)

REFERENCES: dict[str, tuple[Reference, ...]] = {
    "timedial_cloze_full": TIMEDIAL_FULL,
    "timedial_cloze_local": TIMEDIAL_CHANCE,
    "timedial_cloze_target": TIMEDIAL_CHANCE,
    "asq_intent_cloze": ASQ,
    "summarize_feedback_preference": SUMMARIZE_FEEDBACK,
    **{heap.task_name(a): _heap(a) for a in HEAP_TABLE_2_ACCURACY},
}


def for_tasks(task_names: Iterable[str]) -> dict[str, list[Reference]]:
  """`{task: [(metric, label, value, source), ...]}` for the named tasks that have figures (a
  `_tfds` twin gets its task's), as runner/report.py takes them: plain data, no t5_tasks."""
  out = {}
  for name in task_names:
    base = name[:-len(TFDS_SUFFIX)] if name.endswith(TFDS_SUFFIX) else name
    if base in REFERENCES:
      out[name] = list(REFERENCES[base])
  return out
