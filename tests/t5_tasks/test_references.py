"""The papers' reference figures: numbers read back from the papers' text, tasks registered."""
import re

import pytest

from t5_tasks import references


def _paper(shared_data, name: str) -> str:
  path = shared_data.parent / "papers" / name
  if not path.is_file():
    pytest.skip(f"the paper's text is not at {path}")
  return path.read_text(encoding="utf-8")


def _figure(task: str, metric: str, label: str) -> float:
  values = [v for m, l, v, _ in references.REFERENCES[task] if (m, l) == (metric, label)]
  assert len(values) == 1, (task, metric, label)
  return values[0]


def test_timedial_table_5(shared_data):
  """Table 5's extracted rows run their cells together ("39.850.659.2..."): every cell is
  dd.d, read left to right in the order base-zero, base-out, base-in, large-zero, ..."""
  text = _paper(shared_data, "timedial.txt")
  block = re.search(r"^human\.\n(.*?)table 5: model and human", text, re.S | re.M).group(1)
  classification, mask_filling, generation, human = [
      [float(x) for x in re.findall(r"\d\d\.\d", line)] for line in block.split("\n") if line]
  assert len(classification) == 4 and len(mask_filling) == len(generation) == 6
  columns = ("base-zero", "base-out", "base-in", "large-zero", "large-out", "large-in")
  t5 = dict(zip(columns, generation))
  task = "timedial_cloze_full"
  assert _figure(task, "two_best_accuracy", "human") == pytest.approx(human[0] / 100) == 0.978
  assert _figure(task, "two_best_accuracy", "T5-large in-domain") == pytest.approx(t5["large-in"] / 100)
  assert _figure(task, "two_best_accuracy", "T5-base in-domain") == pytest.approx(t5["base-in"] / 100)
  assert _figure(task, "two_best_accuracy", "T5-large zero-shot") == pytest.approx(t5["large-zero"] / 100)
  assert (_figure(task, "two_best_accuracy", "BERT-large mask filling in-domain")
          == pytest.approx(dict(zip(columns, mask_filling))["large-in"] / 100))
  assert "its 2-best accuracy (74.8)" in text  # the prose agrees with the row read


def test_timedial_chance_is_one_pair_of_six():
  # Both correct options on top: 1 of the C(4, 2) = 6 equally likely top pairs.
  import itertools  # pylint: disable=g-import-not-at-top
  pairs = list(itertools.combinations(["right", "right", "wrong", "wrong"], 2))
  expected = sum(pair == ("right", "right") for pair in pairs) / len(pairs)
  assert _figure("timedial_cloze_full", "two_best_accuracy", "chance") == pytest.approx(expected)


def test_asq_table_4(shared_data):
  text = _paper(shared_data, "asq.txt")
  assert "By construction, random accuracy is 50%" in text
  rows = {"accuracy": "OVERALL", "accuracy/C+E": r"C \+ E", "accuracy/C+{C,I}": r"C \+ \{C, I\}",
          "accuracy/C+C": r"C \+ C", "accuracy/L+{U,I}": r"L \+ \{U, I\}"}
  for metric, row in rows.items():
    sim, ft_lm, human = map(int, re.search(rf"{row} (\d+)% (\d+)% (\d+)%", text).groups())
    assert _figure("asq_intent_cloze", metric, "human") == pytest.approx(human / 100), metric
    assert _figure("asq_intent_cloze", metric, "FT-LM") == pytest.approx(ft_lm / 100), metric
    if metric == "accuracy":
      assert _figure("asq_intent_cloze", metric, "similarity baseline") == pytest.approx(sim / 100)


def _first_number(cell: str) -> float:
  # Garbled LaTeX around cells: "$4\overline{4.35\pm10.03}$" is 44.35.
  cleaned = re.sub(r"\\overline|[${}]", "", cell)
  return float(re.match(r"\s*(\d+(?:\.\d+)?)", cleaned).group(1))


def test_heap_table_2_base_and_single_task(shared_data):
  text = _paper(shared_data, "heap.txt")
  table = text[text.index("Task\tAccuracy"):text.index("Table 2: Accuracy on the test set")]
  read = {}
  for line in table.split("\n")[2:]:
    cells = line.split("\t")
    if len(cells) >= 3:
      name = "SRPl" if cells[0] == "SRPI" else cells[0]  # OCR reads SRPl's l as I
      read[name] = (_first_number(cells[1]), _first_number(cells[2]))
  assert read == references.HEAP_TABLE_2_ACCURACY
  assert _figure("heap_av", "pairwise_accuracy", "BART-base single-task") == pytest.approx(0.4435)
  assert _figure("heap_srpl", "pairwise_accuracy", "BART-base, no fine-tuning") == pytest.approx(0.4589)


def test_summarize_feedback_table_20(shared_data):
  text = _paper(shared_data, "summarize_from_feedback_appendix.txt")
  assert "Labelers agree with each other 72% of the time" in text
  row = re.search(r"^labeler\t77\.7%\t(.*)$", text, re.M).group(1).split("\t")
  # Columns after 'researcher': labeler, ensemble, length, copying, ROUGE, 1.3B sup logprob,
  # 1.3B RM, 6.7B sup logprob, 6.7B RM.
  one_b_rm, six_b_rm = _first_number(row[6]), _first_number(row[8])
  task = "summarize_feedback_preference"
  assert _figure(task, "pairwise_accuracy", "1.3B reward model") == pytest.approx(one_b_rm / 100) == 0.658
  assert _figure(task, "pairwise_accuracy", "6.7B reward model") == pytest.approx(six_b_rm / 100) == 0.708


def test_every_figure_has_a_source_and_a_0_to_1_value():
  for task, figures in references.REFERENCES.items():
    assert figures, task
    for metric, label, value, source in figures:
      assert metric and label and source, (task, metric, label)
      assert 0 <= value <= 1, (task, metric, label, value)
    labels = [(m, l) for m, l, _, _ in figures]
    assert len(labels) == len(set(labels)), task


def test_every_task_named_is_registered():
  import seqio  # pylint: disable=g-import-not-at-top
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  registered = set(seqio.TaskRegistry.names())
  assert set(references.REFERENCES) <= registered
  assert len([t for t in references.REFERENCES if t.startswith("heap_")]) == 22
  twins = references.for_tasks(registered)
  assert twins["heap_ag_tfds"] == list(references.REFERENCES["heap_ag"])
  assert "turingadvice_generation" not in twins
