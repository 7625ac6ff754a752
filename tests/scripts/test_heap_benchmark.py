"""scripts.heap: HEAP's protocols as one command, and Tables 2 and 3 from each target's own run.

The paper's figures the tables print are read back from the paper's own text (Tables 2 and 3 of
../shared/papers/heap.txt, accuracy and Spearman, the extraction's LaTeX, underlines and its "SRPI"
undone). The commands run as
their `__main__` runs them, in this process (tests/helpers/cli.py: a fresh interpreter would prove
nothing more and import TensorFlow and seqio again for each command), on the quickstart files, the
tiny model, one or two steps; a cell is checked against the items of its own run's
predictions.jsonl and metrics.json.
"""
import json
import math
import os
import pathlib
import re
import shlex
import sys

import numpy as np
import pytest

from runner import heap_benchmark as bench
from runner import outputs
from t5_tasks import heap
from tests.conftest import PROJECT_ROOT
from tests.helpers import cli
from tests.t5_tasks.test_tasks import write_heap_fixtures

PAPER = PROJECT_ROOT.parent / "shared" / "papers" / "heap.txt"
# Bytes in place of the recipes' SentencePiece file (a download), as for any random-weights trial.
TINY = ("--model_gin=gin/models/t5_1_1/tiny.gin", "--seeds=0", "--accumulation_steps=1",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 256, 'targets': 64}", "--gin.SENTENCEPIECE_MODEL_PATH=None")


def _cell(text: str) -> tuple[float, float]:
  """'$\\overline{62.84 \\pm 2.89}$' or '4\\overline{4.35\\pm10.03}' -> (62.84, 2.89)."""
  text = re.sub(r"\\overline|[${} ]", "", text).replace("\\pm", "±")
  mean, std = text.split("±")
  return float(mean), float(std)


def _paper_rows(lines) -> dict[str, list[str]]:
  rows = {}
  for line in lines:
    name, *cells = line.split("\t")
    name = "SRPl" if name == "SRPI" else name  # the extraction's l as I
    if name in heap.HEAP_CRITERIA:
      rows[name] = cells
  return rows


def paper_lines() -> list[str]:
  if not PAPER.is_file():
    pytest.skip(f"{PAPER} is not here")
  return PAPER.read_text(encoding="utf-8").splitlines()


def test_the_paper_figures_are_tables_2_and_3_of_heap_txt():
  lines = paper_lines()
  start = next(i for i, line in enumerate(lines) if line.startswith("Task\tAccuracy"))
  end = next(i for i, line in enumerate(lines) if line.startswith("Table 2:"))
  table_2 = _paper_rows(lines[start:end])
  assert list(table_2) == list(heap.HEAP_CRITERIA)  # every row, in Table 2's order
  assert {t: tuple(_cell(c) for c in cells[:4]) for t, cells in table_2.items()} == bench.PAPER_TABLE_2
  clusters = [i for i, line in enumerate(lines) if line.startswith("Cluster ")]
  ends = clusters[1:] + [next(i for i, line in enumerate(lines) if line.startswith("Table 3:"))]
  for cluster, first, last in zip(bench.TABLE_3_CLUSTERS, clusters, ends):
    rows = _paper_rows(lines[first:last])
    assert list(rows) == list(heap.CLUSTERS[cluster])  # Table 3's members are heap.CLUSTERS'
    assert {t: _cell(cells[2]) for t, cells in rows.items()} == bench.PAPER_TABLE_3[cluster]
    assert {t: _cell(cells[1]) for t, cells in rows.items()} == {t: bench.PAPER_TABLE_2[t][3] for t in rows}
    average = next(line for line in lines[first:last] if line.startswith("Average")).split("\t")
    assert (float(average[2]), float(average[3])) == bench.PAPER_TABLE_3_AVERAGE[cluster]


def test_the_paper_spearman_figures_are_table_2s_other_half():
  lines = paper_lines()
  start = next(i for i, line in enumerate(lines) if line.startswith("Task\tAccuracy"))
  end = next(i for i, line in enumerate(lines) if line.startswith("Table 2:"))
  assert lines[start].split("\t")[5] == "Spearman Rank-order Correlation"
  assert lines[start + 1].split("\t")[5:9] == ["Base", "Single-task", "Multi-task", "Cross-task"]
  table_2 = _paper_rows(lines[start:end])
  read = {t: tuple(None if c == "-" else float(re.sub(r"</?u>", "", c)) for c in cells[4:])
          for t, cells in table_2.items()}
  assert read == bench.PAPER_TABLE_2_SPEARMAN
  # The rows with figures are the criteria the evaluation computes Spearman for.
  assert {t for t, row in read.items() if row != (None,) * 4} == {t for t, c in heap.HEAP_CRITERIA.items() if c.ranked}
  assert all(None not in row for row in read.values() if row != (None,) * 4)  # no cell unreadable
  # The underline (second-best) marks each row's second-highest figure: the columns are in order.
  for t, cells in table_2.items():
    for i, c in enumerate(cells[4:]):
      if c.startswith("<u>"):
        assert sorted(read[t], reverse=True)[1] == read[t][i], t


def test_each_protocol_plans_one_run_per_target_and_seed():
  def count(criterion):
    return 10
  plans = {p: bench.plan(p, heap, out_dir="runs", seeds=[0, 1], train_examples=count) for p in bench.PROTOCOLS}
  assert {p: len(runs) for p, runs in plans.items()} == {
      "base": 2, "single_task": 44, "multitask": 2, "cross_task": 44, "cross_cluster": 2 * (9 + 10 + 9)}
  cng = next(r for r in plans["cross_cluster"] if r.name == "hate_speech_cng" and r.seed == 1)
  row = heap.TABLE_4["cross_task"]["CNG"]  # Table 4 has no cross-cluster rows
  assert cng.targets == ("CNG",) and set(cng.trained) == set(heap.CLUSTERS["hate_speech"]) - {"CNG"}
  assert (cng.batch_size, cng.train_steps) == (8 * row.gradient_accumulation,
                                               math.ceil(row.epochs * 8 * 10 / (8 * row.gradient_accumulation)))
  assert cng.eval_dir("CNG") == "runs/cross_cluster/hate_speech_cng/seed_1/eval_cng"
  with pytest.raises(ValueError, match="unknown HEAP cluster.*hate; known: context"):
    bench.plan("cross_cluster", heap, out_dir="runs", seeds=[0], clusters=["hate"], train_steps=1)
  with pytest.raises(ValueError, match="cross_cluster: no run tests AG, DIA in the clusters hate_speech"):
    bench.plan("cross_cluster", heap, out_dir="runs", seeds=[0], targets=["AG", "DIA"], clusters=["hate_speech"],
               train_steps=1)


def _evaluation(folder: pathlib.Path, task: str, pairs, fingerprint: str, recorded=None, spearman=None,
                **provenance) -> str:
  """An evaluation folder as runner/evaluate.py writes it: (good, bad) scores of each item, and
  `spearman` when given."""
  folder.mkdir(parents=True)
  outputs.write_predictions(str(folder), [
      {"task": task, "id": f"{task}-{i}", "scores": [good, bad], "gold": [1, 0], "prediction": int(bad > good)}
      for i, (good, bad) in enumerate(pairs)])
  half = np.mean([(g > b) + 0.5 * (g == b) for g, b in pairs])
  value = half if recorded is None else recorded
  metrics = {"pairwise_accuracy": {"value": value, "low": 0.0, "high": 1.0}}
  if spearman is not None:
    metrics["spearman"] = outputs.interval(spearman, -1.0, 1.0)
  outputs.write_metrics(str(folder), {task: metrics},
                        provenance={"params_fingerprint": fingerprint, "checkpoint_step": 2, **provenance})
  return str(folder)


def _table_2(markdown: str) -> dict[str, dict[str, str]]:
  """heap_tables.md's Table 2: criterion -> {column: cell}."""
  lines = markdown.split("### Table 2")[1].split("### ")[0].strip().splitlines()
  header = [c.strip() for c in lines[2].strip("|").split("|")]
  return {cells[0]: dict(zip(header, cells)) for line in lines[4:]
          for cells in [[c.strip() for c in line.strip("|").split("|")]]}


def test_table_2_writes_each_setups_spearman_beside_the_papers(tmp_path):
  # CNG: single-task over three seeds; multi-task over two, a third without Spearman (its humans'
  # scores tied); AH (no ranked data) cross-task: accuracy only.
  spearman = {("single_task", "cng"): [0.5, 0.2, -0.1], ("multitask", "all"): [0.3, 0.6, None]}
  for (protocol, name), values in spearman.items():
    for seed, value in enumerate(values):
      _evaluation(tmp_path / protocol / name / f"seed_{seed}" / "eval_cng", "heap_cng",
                  [(1.0, 0.0), (0.0, 1.0), (float(seed), 0.5)], f"{protocol} {seed}", spearman=value)
  _evaluation(tmp_path / "cross_task" / "ah" / "seed_0" / "eval_ah", "heap_ah", [(1.0, 0.0)], "ah")
  tables = bench.assemble(heap, out_dir=str(tmp_path), seeds=[0, 1, 2])
  json_path, md_path = bench.write_tables(tables, str(tmp_path))
  written = json.loads(pathlib.Path(json_path).read_text())
  rows = _table_2(pathlib.Path(md_path).read_text())
  assert list(rows) == [*heap.HEAP_CRITERIA, "Average"]
  for (protocol, name), values in spearman.items():
    cell = written["table_2"]["CNG"][protocol]
    # Each seed's figure is its own evaluation's metrics.json.
    assert [s["spearman"] for s in cell["seeds"]] == [
        outputs.read_metrics(s["eval_dir"])["heap_cng"].get("spearman", {}).get("value") for s in cell["seeds"]]
    assert [s["spearman"] for s in cell["seeds"]] == values
    present = [v for v in values if v is not None]
    mean, std = sum(present) / len(present), math.sqrt(
        sum((v - sum(present) / len(present)) ** 2 for v in present) / (len(present) - 1))
    assert (cell["spearman"]["mean"], cell["spearman"]["std"]) == (pytest.approx(mean), pytest.approx(std))
    column = {"single_task": "Single-task", "multitask": "Multi-task"}[protocol]
    assert rows["CNG"][f"{column} Spearman"] == f"{mean:.3f} ± {std:.3f} ({len(present)})"
    assert rows["CNG"][column].endswith(f" ({len(values)})")  # accuracy: every seed
  paper = {"Base": "0.089", "Single-task": "0.472", "Multi-task": "0.538", "Cross-task": "0.193"}  # Table 2, CNG
  assert {c: rows["CNG"][f"{c} Spearman (paper)"] for c in paper} == paper
  assert written["paper_table_2"]["CNG"]["multitask"] == {"accuracy_percent": [82.17, 1.78], "spearman": 0.538}
  assert (rows["CNG"]["Base Spearman"], rows["CNG"]["Cross-task Spearman"]) == ("-", "-")  # not run
  assert rows["AH"]["Cross-task"] == "100.00 (1)"
  assert (rows["AH"]["Cross-task Spearman"], rows["AH"]["Cross-task Spearman (paper)"]) == ("-", "-")
  assert [rows["Average"][f"{c} Spearman (paper)"] for c in paper] == ["-"] * 4  # the paper averages accuracy


def test_a_tie_is_wrong_and_half_right_only_in_the_named_variant(tmp_path):
  folder = _evaluation(tmp_path / "e", "heap_cng", [(1.0, 0.0), (0.5, 0.5), (0.0, 1.0), (2.0, 1.0)], "a")
  entry = bench.run_accuracy(folder, "heap_cng")
  assert (entry["accuracy"], entry["accuracy_ties_half"], entry["ties"]) == (0.5, 0.625, 1)
  wrong = _evaluation(tmp_path / "w", "heap_cng", [(1.0, 0.0)], "a", recorded=0.25)
  with pytest.raises(ValueError, match=r"w/metrics.json: heap_cng pairwise_accuracy 0.25 disagrees"):
    bench.run_accuracy(wrong, "heap_cng")


def test_two_evaluations_of_one_checkpoint_are_not_two_seeds(tmp_path):
  runs = bench.plan("single_task", heap, out_dir=str(tmp_path), seeds=[0, 1], targets=["CNG"], train_steps=1)
  for run in runs:
    _evaluation(pathlib.Path(run.eval_dir("CNG")), "heap_cng", [(1.0, 0.0)], "same parameters")
  with pytest.raises(ValueError, match="seed_1/eval_cng and .*seed_0/eval_cng evaluated the same parameters"):
    bench.cell(runs, "CNG", heap.task_name)


def heap_run(*arguments) -> cli.CommandResult:
  """`python -m scripts.heap ARGUMENTS`, run in this process as its `__main__` runs it."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import heap as heap_script  # pylint: disable=g-import-not-at-top
  if "protocol" not in flags.FLAGS:  # its own flags, beside the gin ones, once per process
    heap_script.define_flags()
  return cli.run_script(heap_script.main, arguments, program="heap")


def heap_command(*arguments) -> cli.CommandResult:
  result = heap_run(*arguments)
  assert result.code == 0 and "Traceback" not in result.stderr, result.stdout[-3000:] + result.stderr[-3000:]
  return result


def test_dry_run_prints_the_22_run_cross_task_plan(tmp_path):
  import gin  # pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  files = write_heap_fixtures(tmp_path)  # the sources without quickstart files
  result = heap_command("--protocol=cross_task", "--dry_run", f"--out_dir={tmp_path / 'runs'}", "--seeds=0",
                        f"--gin.t5_tasks.tasks.data_files.files={files!r}")
  lines = [line for line in result.stdout.splitlines() if re.match(r"^ *\d+\. cross_task ", line)]
  assert "cross_task: 22 runs (0 finished)" in result.stdout and len(lines) == 22, result.stdout
  gin.parse_config(f"t5_tasks.tasks.data_files.files = {files!r}")
  try:
    train = {t: seqio.get_mixture_or_task(heap.task_name(t)).num_input_examples("train") for t in heap.HEAP_CRITERIA}
  finally:
    gin.clear_config()
  for line, target in zip(lines, heap.HEAP_CRITERIA):
    row = heap.TABLE_4["cross_task"][target]
    examples = sum(train.values()) - train[target]  # every criterion but the target
    steps = math.ceil(row.epochs * examples / (8 * row.gradient_accumulation))
    assert (f"cross_task {target.lower()} seed 0: trains on heap_cross_task_{target.lower()} (21 criteria), "
            f"batch {8 * row.gradient_accumulation} (accumulation {row.gradient_accumulation}), "
            f"lr {row.learning_rate:g}, {steps} steps") in line and line.split("tests on ")[1].startswith(
                f"{target};"), line
  assert not (tmp_path / "runs").exists()  # a dry run runs nothing


def test_cross_cluster_cells_come_from_each_targets_own_run(tmp_path):
  out = tmp_path / "heap"
  arguments = ("--protocol=cross_cluster", "--clusters=hate_speech", "--targets=cng,hso", f"--out_dir={out}",
               "--train_steps=1", *TINY)
  result = heap_command(*arguments)
  tables = json.loads((out / "heap_tables.json").read_text())
  rows = tables["table_3"]["hate_speech"]["rows"]
  for target in ("CNG", "HSO"):
    eval_dir = out / "cross_cluster" / f"hate_speech_{target.lower()}" / "seed_0" / f"eval_{target.lower()}"
    metrics = outputs.read_metrics(str(eval_dir))
    task = heap.task_name(target)
    # The run evaluated its held-out target alone (the groups average that one task).
    assert {name for name in metrics if not name.startswith("heap_cluster_") and name != "heap"} == {task}
    records = outputs.read_predictions(str(eval_dir / "predictions.jsonl"))
    good = np.array([r["scores"][r["gold"].index(1)] for r in records])
    bad = np.array([r["scores"][r["gold"].index(0)] for r in records])
    cell = rows[target]["cross_cluster"]
    assert cell["accuracy"]["mean"] == pytest.approx(np.mean(good > bad)) and cell["accuracy"]["n"] == 1
    assert cell["accuracy_ties_half"]["mean"] == pytest.approx(metrics[task]["pairwise_accuracy"]["value"])
    assert cell["seeds"][0]["checkpoint_step"] == 1
    shown = f"{100 * np.mean(good > bad):.2f} (1) | {bench.PAPER_TABLE_3['hate_speech'][target][0]:.2f} ±"
    assert re.search(rf"^\| {target} \| - \| - \| [^|]+ \| {re.escape(shown)}", result.stdout, re.M), result.stdout
  assert rows["BCN"]["cross_cluster"] is None  # not run: no figure, and no cluster average
  assert tables["table_3"]["hate_speech"]["average"]["cross_cluster"] is None
  again = heap_command(*arguments)
  assert "cross_cluster: 2 runs, 2 finished, 0 to run" in again.stdout and "===" not in again.stdout


def test_base_scores_the_seeded_head_a_training_run_starts_from(tmp_path):
  import jax  # pylint: disable=g-import-not-at-top
  from models import reward as reward_lib  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top
  out = tmp_path / "heap"
  heap_command("--protocol=base", "--targets=cng", f"--out_dir={out}", *TINY)
  model_dir = out / "base" / "all" / "seed_0"
  config, params = checkpoints.load_params(str(model_dir))
  expected = reward_lib.init_reward_params(config, jax.random.PRNGKey(0))  # runner/train.py's step 0, seed 0
  assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, params, expected))
  tables = json.loads((out / "heap_tables.json").read_text())
  assert tables["table_2"]["CNG"]["base"]["accuracy"]["n"] == 1
  assert tables["table_2"]["CNG"]["single_task"] is None
  # Table 2's Spearman half: the evaluation's own figure (none on the quickstart's four CNG test
  # items, where the evaluation writes none), beside the paper's.
  spearman = outputs.read_metrics(str(model_dir / "eval_cng"))["heap_cng"].get("spearman")
  assert tables["table_2"]["CNG"]["base"]["seeds"][0]["spearman"] == (spearman and spearman["value"])
  row = _table_2((out / "heap_tables.md").read_text())["CNG"]
  ours = "-" if spearman is None else f"{spearman['value']:.3f} (1)"
  assert (row["Base Spearman"], row["Base Spearman (paper)"]) == (ours, "0.089")


def test_a_group_average_is_not_printed_as_a_95_percent_interval():
  from runner import report  # pylint: disable=g-import-not-at-top
  from scripts import evaluate as evaluate_script  # pylint: disable=g-import-not-at-top
  task = {"value": 0.5, "low": 0.25, "high": 0.75}
  printed = evaluate_script.format_metrics({"heap_cng": {"pairwise_accuracy": task},
                                            "heap_cluster_hate_speech": {"pairwise_accuracy": {**task, "tasks": 9}}})
  cng, cluster = printed.splitlines()
  assert cng.split() == ["heap_cng", "pairwise_accuracy", "0.5000", "[0.2500,", "0.7500]"]
  assert cluster.split()[:3] == ["heap_cluster_hate_speech", "pairwise_accuracy", "0.5000"]
  assert "mean of 9 tasks; members' 95% bounds averaged (not a bootstrapped interval" in cluster
  groups = {"heap_cluster_hate_speech": {"pairwise_accuracy": {**task, "tasks": 9}}}
  assert report.groups_table(groups).columns[-2:] == ("members' low, averaged", "members' high, averaged")
  assert report.group_charts(groups)[0].lows is None  # no error bars drawn as if an interval


def test_heap_runs_refuses_what_is_not_seeds_of_one_model(tmp_path, capsys):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import analyze  # pylint: disable=g-import-not-at-top
  first = _evaluation(tmp_path / "a" / "eval", "heap_cng", [(1.0, 0.0), (0.0, 1.0)], "sha256:same")
  again = _evaluation(tmp_path / "a" / "eval_again", "heap_cng", [(1.0, 0.0), (0.0, 1.0)], "sha256:same")
  other = _evaluation(tmp_path / "b" / "eval", "heap_cng", [(1.0, 0.0), (1.0, 0.0)], "sha256:other")

  def heap_runs(*eval_dirs):
    fv = flags.FlagValues()
    analyze.define_flags(fv)
    fv(["analyze", f"--eval_dirs={','.join(eval_dirs)}"])
    return analyze.run("heap_runs", fv)
  with pytest.raises(ValueError, match=f"{again} and {first} evaluated the same parameters"):
    heap_runs(first, again)
  table = heap_runs(first, other, first)  # a folder named twice is one run
  assert table["criteria"]["CNG"]["pairwise_accuracy"]["values"] == [0.5, 1.0]
  assert re.search(r"^CNG +2 +75\.00 ± 35\.36 ", capsys.readouterr().out, re.M)
  # Runs of two protocols (what their checkpoints trained on, from their config.gin) are two models.
  trained = {}
  for name, mixture in (("cross_cluster", "heap_cross_cluster_hate_speech_cng"), ("single", "heap_cng")):
    model_dir = tmp_path / name
    model_dir.mkdir()
    (model_dir / "config.gin").write_text(f"MIXTURE_OR_TASK_NAME = '{mixture}'\n")
    trained[name] = _evaluation(model_dir / "eval", "heap_cng", [(1.0, 0.0)], f"sha256:{name}",
                                checkpoint_path=str(model_dir))
  with pytest.raises(ValueError, match=re.escape(
      f"not seeds of one model: {trained['cross_cluster']} (heap_cross_cluster_hate_speech_cng), "
      f"{trained['single']} (heap_cng)")):
    heap_runs(trained["cross_cluster"], trained["single"])


def test_print_commands_prints_each_runs_training_and_its_own_evaluation(tmp_path):
  result = heap_command("--protocol=cross_cluster", "--clusters=hate_speech", "--print_commands",
                        f"--out_dir={tmp_path}", "--seeds=0,1", "--train_steps=7", "--gin.EVAL_EVERY=0")
  lines = result.stdout.strip().splitlines()
  assert len(lines) == 2 * 9 * 2, result.stdout  # a training and an evaluation per target and seed
  train, evaluate = (shlex.split(line) for line in lines[:2])
  row = heap.TABLE_4["cross_task"]["BCN"]  # the first target, in Table 3's order
  # The Python that runs it, from the folder it ran in (.venv/bin/python), not a bare `python`.
  assert os.path.join(PROJECT_ROOT, train[0]) == sys.executable and evaluate[0] == train[0]
  assert not os.path.isabs(train[0]) or not sys.executable.startswith(f"{PROJECT_ROOT}{os.sep}"), train[0]
  assert train[1:3] == ["-m", "scripts.train"] and evaluate[1:3] == ["-m", "scripts.evaluate"]
  assert {"--gin_file=gin/recipes/heap/cross_cluster.gin",
          "--gin.MIXTURE_OR_TASK_NAME='heap_cross_cluster_hate_speech_bcn'",
          f"--gin.MODEL_DIR='{tmp_path}/cross_cluster/hate_speech_bcn/seed_0'", "--gin.TRAIN_STEPS=7",
          f"--gin.ACCUMULATION_STEPS={row.gradient_accumulation}", f"--gin.BATCH_SIZE={8 * row.gradient_accumulation}",
          f"--gin.LEARNING_RATE={row.learning_rate!r}", "--gin.SEED=0", "--gin.EVAL_EVERY=0"} <= set(train)
  assert {"--gin_file=gin/recipes/heap/evaluate.gin", "--gin.MIXTURE_OR_TASK_NAME='heap_bcn'",
          f"--gin.EVAL_OUTPUT_DIR='{tmp_path}/cross_cluster/hate_speech_bcn/seed_0/eval_bcn'"} <= set(evaluate)
  assert not list(tmp_path.iterdir())  # nothing ran


def test_a_macro_the_plan_sets_is_refused_with_the_flag_to_use():
  result = heap_run("--protocol=single_task", "--dry_run", "--gin.TRAIN_STEPS=5")
  assert result.code == 1 and result.stderr.strip().splitlines()[-1] == (
      "error: --gin.TRAIN_STEPS: scripts.heap sets it for each run; use --train_steps"), result.stderr[-2000:]
