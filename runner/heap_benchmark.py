"""HEAP's benchmark (Mehri & Shwartz 2023, ../shared/papers/heap.txt): the runs of a protocol, and
Tables 2 and 3 assembled from them.

§4.2's protocols each train one model per target (single-task: on the target; cross-task: on every
other criterion; cross-cluster: on the target's cluster without it) or one for all (multi-task),
and test it "on the test set composed of only t's instances". So a figure of Table 2 or 3 is a
criterion's accuracy from the run that held that criterion out (or trained on it alone), never
from a run that trained on it as one of many; each cell is the mean ± standard deviation over
seeds (Table 2: "the average of 5 runs with different random seeds"). §5's "base" setup scores
the pretrained model with an untrained (seeded) head.

Accuracy is §5's: "the percent of instances for which r_good was greater than r_bad", a tie
counting as wrong; `accuracy_ties_half` is the evaluation's own `pairwise_accuracy` (a tie counts
half), kept beside it. Both are recomputed here from each evaluation's predictions.jsonl. Table
2's other half, §5's "Spearman rank-order correlation between the scores outputted by the model and
the original human evaluation scores", is each evaluation's `spearman` (metrics.json), for the
criteria with ranked data.

The criteria, clusters and Table 4 are t5_tasks.heap's, passed in as `heap` (runner does
not import t5_tasks).
"""
import dataclasses
import json
import math
import re
from typing import Callable, Mapping, Sequence

import numpy as np

from runner import outputs
from runner import run_dir
import storage

PROTOCOLS = ("base", "single_task", "multitask", "cross_task", "cross_cluster")
TABLE_3_CLUSTERS = ("context", "no_context", "hate_speech")  # Table 3's three; §6 adds same-dataset ones
MICROBATCH = 8  # gin/recipes/heap/reward_model.gin: BATCH_SIZE = 8 rows × Table 4's accumulation
RECIPES = "gin/recipes/heap"
# §5's hyper-parameter search "on the validation set": learning rate (2e-5, 2e-4, 3e-4), gradient
# accumulation (4 to 128) and epochs (1-20), every combination (scripts.heap --sweep=paper). EPOCHS
# is no gin macro: a point's TRAIN_STEPS = ceil(EPOCHS x its train examples / BATCH_SIZE), as
# `plan` counts Table 4's epochs. §5's instruction dimension is every phrasing of HEAP's
# instructions.json (INSTRUCTION_TEMPLATE, with Table 5's first) when the file is bound; truncation
# and label input have no setting here and stay Table 4's (SECTION_5_FIXED).
SECTION_5_GRID = {"LEARNING_RATE": (2e-5, 2e-4, 3e-4), "ACCUMULATION_STEPS": (4, 8, 16, 32, 64, 128),
                  "EPOCHS": tuple(range(1, 21))}
INSTRUCTION_TEMPLATE = "t5_tasks.families.heap_instruction.template"
SECTION_5_FIXED = {
    "truncation": "right (seqio cuts the end of the inputs; Table 4 truncates every task on the right)",
    "label_input": "Table 4's per criterion (t5_tasks.heap.HEAP_CRITERIA[...].label_input; no gin setting)"}


def _figures(text: str) -> dict[str, tuple[tuple[float, float], ...]]:
  """'AH 52.55±8.02 67.33±1.60; ...' -> {'AH': ((52.55, 8.02), (67.33, 1.60))}."""
  rows = {}
  for row in text.split(";"):
    name, *cells = row.split()
    rows[name] = tuple(tuple(float(x) for x in cell.split("±")) for cell in cells)
  return rows


# Table 2, Accuracy: Base, Single-task, Multi-task, Cross-task (%, mean ± std of 5 seeds), its rows
# in order. The extracted text garbles AV's single-task cell ("4\overline{4.35...}": 44.35) and
# writes SRPl as "SRPI"; tests/scripts/test_heap_benchmark.py reads every row back from heap.txt.
PAPER_TABLE_2 = _figures(
    "AH 52.55±8.02 67.33±1.60 66.94±1.27 55.84±7.22; AG 58.97±14.66 69.47±5.46 78.07±6.62 58.12±3.91; "
    "AV 53.9±2.66 44.35±10.03 65.22±5.75 58.87±10.92; QA 46.35±14.11 58.96±14.58 75.17±2.10 42.19±3.76; "
    "HS 49.76±0.62 67.91±0.42 65.62±0.45 51.19±0.10; CR 49.07±5.29 77.96±4.37 79.32±1.07 54.32±3.86; "
    "BCN 47.33±2.05 50.60±3.29 79.32±1.73 63.00±2.00; CCN 44.19±4.62 64.54±12.48 68.18±1.14 68.16±1.72; "
    "CNG 56.32±2.48 77.67±2.24 82.17±1.78 62.84±2.89; CNSp 51.17±3.94 54.39±4.85 64.03±3.16 48.54±3.95; "
    "CNSu 43.24±5.06 58.64±6.23 68.03±2.45 64.64±1.03; CNI 41.77±5.76 83.59±2.11 76.92±3.39 70.88±4.39; "
    "CNO 55.07±9.47 67.35±6.19 69.12±1.47 28.50±3.64; CNSt 47.04±3.92 76.39±2.78 71.30±5.61 51.60±4.18; "
    "HSO 46.15±7.72 68.81±2.94 66.43±2.53 49.55±0.76; SRC 44.81±3.37 51.80±2.74 57.38±1.64 48.09±6.21; "
    "SRE 37.5±6.36 49.64±9.81 58.93±5.36 56.55±5.16; SRPl 45.89±20.37 70.72±1.21 75.36±6.31 50.24±6.03; "
    "SRPr 40.67±5.73 49.60±7.40 56.00±3.46 44.67±3.06; SRS 52.22±2.83 55.33±7.40 61.67±3.34 55.00±5.00; "
    "DIA 48.24±2.61 65.43±6.25 69.68±1.90 62.03±2.29; DII 49.93±2.43 60.82±3.65 59.26±0.71 61.84±5.09")
TABLE_2_COLUMNS = ("base", "single_task", "multitask", "cross_task")  # PAPER_TABLE_2's cells, in order
# Table 2, Spearman Rank-order Correlation: Base, Single-task, Multi-task, Cross-task, one figure a
# cell (no ±: the caption says accuracy is the average of 5 seeds, not how correlation is), None
# where the paper prints "-" (no ranked data: heap.Criterion.ranked is False). Read as each row's
# last four tab-separated fields of the extraction, which are legible: its "<u>0.211</u>" is the
# paper's underline (second-best; it falls on each row's second-highest figure, so the columns are
# in order), bold is lost. No cell was unreadable. Checked against heap.txt by
# tests/scripts/test_heap_benchmark.py.
PAPER_TABLE_2_SPEARMAN = {
    name: tuple(None if x == "-" else float(x) for x in cells)
    for name, *cells in (row.split() for row in (
        "AH - - - -; AG 0.181 0.379 0.231 0.146; AV 0.063 -0.026 0.293 0.093; QA - - - -; HS - - - -; "
        "CR - - - -; BCN - - - -; CCN - - - -; CNG 0.089 0.472 0.538 0.193; CNSp 0.086 0.211 0.278 0.090; "
        "CNSu -0.152 0.143 0.413 0.081; CNI -0.081 0.574 0.472 -0.014; CNO 0.181 0.440 0.580 -0.125; "
        "CNSt -0.087 0.436 0.461 0.129; HSO -0.170 0.425 0.399 0.086; SRC - - - -; SRE - - - -; "
        "SRPl - - - -; SRPr - - - -; SRS - - - -; DIA -0.009 0.302 0.321 0.268; DII 0.060 0.252 0.215 0.080"
    ).split(";"))}
# §6's averages of Table 2's columns ("50.58%", "63.24%", "68.82%", "54.85%").
PAPER_TABLE_2_AVERAGE = {"base": 50.58, "single_task": 63.24, "multitask": 68.82, "cross_task": 54.85}
# Table 3, column Cross Cluster, per cluster (its Single-Task and Cross All columns repeat Table 2's).
PAPER_TABLE_3 = {cluster: {name: cells[0] for name, cells in _figures(text).items()} for cluster, text in {
    "context": "AH 56.39±2.08; AV 53.9±1.00; QA 52.78±5.79; HS 44.46±0.44; CR 48.77±1.90; BCN 58.00±2.16; "
               "SRC 41.53±4.70; DIA 43.86±2.57; DII 50.61±4.45",
    "no_context": "AG 65.81±8.46; CNG 56.32±1.63; CNSp 51.17±1.49; CNSu 54.96±3.04; CNI 54.85±5.31; "
                  "CNO 43.96±3.62; CNSt 65.75±3.87; HSO 58.06±3.48; SRPl 47.83±1.18; SRPr 58.00±5.89",
    "hate_speech": "BCN 69.00±4.58; CCN 64.05±4.05; CNG 63.22±4.6; CNSp 59.36±0.51; CNSu 64.64±2.17; "
                   "CNI 57.00±2.47; CNO 45.38±4.68; CNSt 67.58±2.85; HSO 52.50±1.48"}.items()}
# Table 3's Average rows: (Cross All, Cross Cluster).
PAPER_TABLE_3_AVERAGE = {"context": (55.26, 50.03), "no_context": (52.96, 55.67), "hate_speech": (56.41, 60.30)}


@dataclasses.dataclass(frozen=True)
class Run:
  """One model of a protocol and seed: what it trains on and the criteria it is tested on."""
  protocol: str
  name: str                   # the target's abbreviation in lower case, "<cluster>_<target>", or "all"
  seed: int
  trained: tuple[str, ...]    # the criteria it trains on (none: the base setup)
  targets: tuple[str, ...]    # the criteria it is tested on, each alone
  mixture: str | None         # the training mixture (t5_tasks.mixtures), None for the base setup
  model_dir: str
  accumulation_steps: int = 1
  batch_size: int = MICROBATCH
  learning_rate: float = 0.0
  epochs: int = 0
  train_examples: int | None = None
  train_steps: int | None = None

  def eval_dir(self, target: str) -> str:
    """Where the run's evaluation on `target`'s test split goes: one folder per target."""
    return storage.join(self.model_dir, f"eval_{target.lower()}")

  def finished(self, target: str) -> bool:
    return storage.exists(run_dir.EvalDir(self.eval_dir(target)).metrics)


def _runs_of(protocol: str, heap, targets: Sequence[str], clusters: Sequence[str]):
  """(name, trained criteria, targets, mixture, Table 4 row) of each model the protocol trains."""
  criteria = tuple(heap.HEAP_CRITERIA)
  if protocol == "base":
    return [("all", (), tuple(targets), None, None)]
  if protocol == "multitask":
    return [("all", criteria, tuple(targets), "heap_multitask", heap.TABLE_4["multitask"])]
  if protocol == "single_task":
    return [(t.lower(), (t,), (t,), heap.task_name(t), heap.TABLE_4["single_task"][t]) for t in targets]
  if protocol == "cross_task":
    return [(t.lower(), tuple(c for c in criteria if c != t), (t,), f"heap_cross_task_{t.lower()}",
             heap.TABLE_4["cross_task"][t]) for t in targets]
  if protocol == "cross_cluster":  # Table 4 gives no cross-cluster rows: the target's cross-task row
    return [(f"{cluster}_{t.lower()}", tuple(c for c in heap.CLUSTERS[cluster] if c != t), (t,),
             f"heap_cross_cluster_{cluster}_{t.lower()}", heap.TABLE_4["cross_task"][t])
            for cluster in clusters for t in heap.CLUSTERS[cluster] if t in targets]
  raise ValueError(f"unknown HEAP protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")


def plan(protocol: str, heap, *, out_dir: str, seeds: Sequence[int], targets: Sequence[str] | None = None,
         clusters: Sequence[str] = TABLE_3_CLUSTERS, train_examples: Callable[[str], int] | None = None,
         train_steps: int | None = None, accumulation_steps: int | None = None,
         microbatch: int = MICROBATCH) -> list[Run]:
  """The runs of `protocol` over `targets` (default: every criterion) and `seeds`, one after another.

  Each run binds its target's Table 4 row (accumulation, learning rate, epochs); its steps are
  ceil(epochs × its training mixture's train examples / BATCH_SIZE), BATCH_SIZE = `microbatch` ×
  accumulation, with `train_examples(criterion)` counting a criterion's train split, unless
  `train_steps` is given (then counting is skipped; with neither, steps stay None: a plan to read
  finished runs by). `accumulation_steps` replaces Table 4's.
  Runs live in `out_dir/<protocol>/<name>/seed_<seed>`.
  """
  targets = tuple(heap.HEAP_CRITERIA) if targets is None else tuple(targets)
  unknown_clusters = [c for c in clusters if c not in heap.CLUSTERS]
  if unknown_clusters:
    raise ValueError(f"unknown HEAP cluster(s) {', '.join(unknown_clusters)}; known: {', '.join(heap.CLUSTERS)}")
  runs = []
  for name, trained, tested, mixture, row in _runs_of(protocol, heap, targets, clusters):
    for seed in dict.fromkeys(seeds):  # a seed given twice is one run
      model_dir = storage.join(out_dir, protocol, name, f"seed_{seed}")
      if row is None:
        runs.append(Run(protocol, name, seed, trained, tested, mixture, model_dir, train_steps=0))
        continue
      accumulation = accumulation_steps or row.gradient_accumulation
      batch = microbatch * accumulation
      examples = sum(map(train_examples, trained)) if train_examples and not train_steps else None
      steps = train_steps or (None if examples is None else max(1, math.ceil(row.epochs * examples / batch)))
      runs.append(Run(protocol, name, seed, trained, tested, mixture, model_dir, accumulation, batch,
                      row.learning_rate, row.epochs, examples, steps))
  if not runs:
    raise ValueError(f"{protocol}: no run tests {', '.join(targets)}"
                     + (f" in the clusters {', '.join(clusters)}" if protocol == "cross_cluster" else ""))
  return runs


def training_command(run: Run, model_gin: str) -> tuple[list[str], list[str]]:
  """(gin files, bindings) of scripts.train for `run`: its protocol's recipe and Table 4's row."""
  files = [model_gin, "gin/runs/finetune.gin", f"{RECIPES}/{run.protocol}.gin"]
  return files, [f"MIXTURE_OR_TASK_NAME = {run.mixture!r}", f"MODEL_DIR = {run.model_dir!r}",
                 f"TRAIN_STEPS = {run.train_steps}", f"ACCUMULATION_STEPS = {run.accumulation_steps}",
                 f"BATCH_SIZE = {run.batch_size}", f"LEARNING_RATE = {run.learning_rate!r}",
                 f"SEED = {run.seed}"]


# The grid names a sweep's point sets through its Run (the rest are bound as they are), and the
# ones it may not name: set for each point from others.
SWEEP_RUN_FIELDS = ("LEARNING_RATE", "ACCUMULATION_STEPS", "EPOCHS", "SEED")
SWEEP_RESERVED = {"BATCH_SIZE": "it is --microbatch x ACCUMULATION_STEPS (sweep ACCUMULATION_STEPS)",
                  "TRAIN_STEPS": "it is EPOCHS x the train examples / BATCH_SIZE, or --train_steps (sweep EPOCHS)",
                  "MIXTURE_OR_TASK_NAME": "--protocol and --targets choose it",
                  "EVAL_MIXTURE_OR_TASK_NAME": "the sweep scores the run's target (heap_multitask's criteria)"}


def sweep_point(run: Run, values: Mapping, model_dir: str) -> tuple[Run, list[str]]:
  """One point of a sweep of `run`: the run with the point's LEARNING_RATE, ACCUMULATION_STEPS
  (BATCH_SIZE = microbatch x accumulation), EPOCHS and SEED in place of Table 4's and --seeds',
  its steps counted again (ceil(epochs x train examples / batch)) unless --train_steps fixed them,
  in `model_dir`; and the point's other names as gin bindings."""
  fields = {"model_dir": model_dir}
  if "LEARNING_RATE" in values:
    fields["learning_rate"] = float(values["LEARNING_RATE"])
  if "ACCUMULATION_STEPS" in values:
    accumulation = int(values["ACCUMULATION_STEPS"])
    fields.update(accumulation_steps=accumulation,
                  batch_size=run.batch_size // run.accumulation_steps * accumulation)
  if "SEED" in values:
    fields["seed"] = int(values["SEED"])
  if "EPOCHS" in values:
    if run.train_examples is None:
      raise ValueError("sweep grid: EPOCHS: --train_steps fixes every point's steps; drop EPOCHS from the grid "
                       "or --train_steps")
    fields["epochs"] = int(values["EPOCHS"])
  point = dataclasses.replace(run, **fields)
  if point.train_examples is not None:
    point = dataclasses.replace(point, train_steps=max(1, math.ceil(point.epochs * point.train_examples
                                                                    / point.batch_size)))
  return point, [f"{name} = {value!r}" for name, value in values.items() if name not in SWEEP_RUN_FIELDS]


def evaluation_command(run: Run, target: str, model_gin: str, task_name: Callable[[str], str]):
  """(gin files, bindings) of scripts.evaluate for `run` on `target`'s test split alone."""
  files = [model_gin, "gin/runs/eval.gin", f"{RECIPES}/evaluate.gin"]
  return files, [f"MIXTURE_OR_TASK_NAME = {task_name(target)!r}",
                 f"CHECKPOINT_PATH = {run.model_dir!r}",
                 f"EVAL_OUTPUT_DIR = {run.eval_dir(target)!r}"]


def write_base_checkpoint(model_dir: str, config, initial_checkpoint_path: str | None, seed: int) -> None:
  """§5's base setup: the pretrained model with the head a training run of `seed` starts from (the
  same draw as runner/train.py's step 0), written as a params-only checkpoint evaluation reads."""
  import jax  # pylint: disable=g-import-not-at-top
  from models import reward as reward_lib  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top
  from runner import model_inputs  # pylint: disable=g-import-not-at-top
  loaded = checkpoints.load_params(initial_checkpoint_path, config)[1] if initial_checkpoint_path else None
  if loaded is not None and reward_lib.HEAD in loaded:
    raise ValueError(f"{initial_checkpoint_path}: already has a reward head; the base setup scores a "
                     "pretrained model with a fresh one")
  params = reward_lib.init_reward_params(config, jax.random.PRNGKey(seed), loaded)
  checkpoints.save_params(storage.join(model_dir, "params"), params)
  checkpoints.write_model_config(model_dir, config)
  model_inputs.copy(initial_checkpoint_path, model_dir)


def run_accuracy(eval_dir: str, task: str) -> dict:
  """`task`'s accuracy in one evaluation, from its predictions.jsonl: strict (§5) and ties half,
  the latter checked against the evaluation's metrics.json; the checkpoint's fingerprint."""
  directory = run_dir.EvalDir(eval_dir)
  metrics = outputs.read_metrics(eval_dir)
  written = {t for t in metrics if t.startswith("heap_") and not t.startswith("heap_cluster_") and t != "heap"}
  if written - {task, f"{task}_tfds"}:
    raise ValueError(f"{directory.metrics}: evaluates {', '.join(sorted(written))}, not {task} alone "
                     "(a table cell comes from its own run's evaluation of its target)")
  good, bad = [], []
  for record in outputs.read_predictions(directory.predictions):
    if record["task"] in (task, f"{task}_tfds"):
      gold = np.asarray(record["gold"])
      scores = np.asarray(record["scores"], np.float64)
      good.append(scores[gold == 1][0])
      bad.append(scores[gold == 0][0])
  if not good:
    raise ValueError(f"{directory.predictions}: no item of {task}")
  good, bad = np.asarray(good), np.asarray(bad)
  strict = float(np.mean(good > bad))
  half = float(np.mean((good > bad) + 0.5 * (good == bad)))
  recorded = (metrics.get(task) or metrics[f"{task}_tfds"])["pairwise_accuracy"]["value"]
  if abs(recorded - half) > 1e-9:
    raise ValueError(f"{directory.metrics}: {task} pairwise_accuracy {recorded} disagrees with its "
                     f"predictions ({half})")
  spearman = (metrics.get(task) or metrics[f"{task}_tfds"]).get("spearman", {}).get("value")
  provenance = outputs.read_provenance(eval_dir) or {}
  return {"accuracy": strict, "accuracy_ties_half": half, "items": len(good), "ties": int(np.sum(good == bad)),
          "spearman": spearman, "params_fingerprint": provenance.get("params_fingerprint"),
          "checkpoint_step": provenance.get("checkpoint_step"), "eval_dir": eval_dir}


def _spread(values: Sequence[float]) -> dict:
  return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
          "n": len(values)}


def cell(runs: Sequence[Run], target: str, task_name: Callable[[str], str]) -> dict | None:
  """`target`'s figures over the seeds of one protocol's runs that tested it (None: none finished).
  Seeds must be distinct models: two evaluations of one checkpoint are refused."""
  per_seed = [run_accuracy(run.eval_dir(target), task_name(target)) for run in runs
              if target in run.targets and run.finished(target)]
  if not per_seed:
    return None
  seen = {}
  for entry in per_seed:
    twin = seen.setdefault(entry["params_fingerprint"], entry["eval_dir"])
    if entry["params_fingerprint"] and twin != entry["eval_dir"]:
      raise ValueError(f"{entry['eval_dir']} and {twin} evaluated the same parameters: seeds must be "
                       "different runs")
  out = {name: _spread([e[name] for e in per_seed]) for name in ("accuracy", "accuracy_ties_half")}
  spearman = [e["spearman"] for e in per_seed if e["spearman"] is not None]
  if spearman:
    out["spearman"] = _spread(spearman)
  out["seeds"] = [{k: e[k] for k in ("eval_dir", "accuracy", "accuracy_ties_half", "spearman", "items", "ties",
                                     "checkpoint_step")} for e in per_seed]
  return out


def assemble(heap, *, out_dir: str, seeds: Sequence[int]) -> dict:
  """Tables 2 and 3 from every finished evaluation under `out_dir` (all protocols, `seeds`).

  Table 2: per criterion and protocol, the cell of the runs that tested it (single-task and
  cross-task: the target's own run). Table 3: per cluster (all of heap.CLUSTERS), each member's
  single-task, cross-all (cross-task) and cross-cluster cell, the latter from the run that held
  the member out of that cluster; the Average row is the mean of the members' means, once every
  member has one. Figures are fractions; the paper's are in %.
  """
  every = {protocol: plan(protocol, heap, out_dir=out_dir, seeds=seeds, clusters=tuple(heap.CLUSTERS))
           for protocol in PROTOCOLS}
  table_2 = {t: {p: cell(every[p], t, heap.task_name) for p in TABLE_2_COLUMNS} for t in heap.HEAP_CRITERIA}
  table_3 = {}
  for cluster, members in heap.CLUSTERS.items():
    rows = {}
    for t in members:
      own = [run for run in every["cross_cluster"] if run.name == f"{cluster}_{t.lower()}"]
      rows[t] = {"single_task": table_2[t]["single_task"], "cross_task": table_2[t]["cross_task"],
                 "cross_cluster": cell(own, t, heap.task_name)}
    table_3[cluster] = {"rows": rows, "average": {
        column: (float(np.mean([rows[t][column]["accuracy"]["mean"] for t in members]))
                 if all(rows[t][column] for t in members) else None)
        for column in ("single_task", "cross_task", "cross_cluster")}}
  average_2 = {p: (float(np.mean([table_2[t][p]["accuracy"]["mean"] for t in heap.HEAP_CRITERIA]))
                   if all(table_2[t][p] for t in heap.HEAP_CRITERIA) else None) for p in TABLE_2_COLUMNS}
  # The paper's Table 2 beside ours, as it prints it (accuracy in %, mean and std; Spearman: one figure).
  paper_2 = {t: {p: {"accuracy_percent": list(PAPER_TABLE_2[t][i]), "spearman": PAPER_TABLE_2_SPEARMAN[t][i]}
                 for i, p in enumerate(TABLE_2_COLUMNS)} for t in heap.HEAP_CRITERIA}
  return {"out_dir": out_dir, "seeds": list(seeds), "table_2": table_2, "table_2_average": average_2,
          "paper_table_2": paper_2, "table_3": table_3}


def _ours(entry: dict | None) -> str:
  if not entry:
    return "-"
  e = entry["accuracy"]
  std = "" if e["std"] is None else f" ± {100 * e['std']:.2f}"
  return f"{100 * e['mean']:.2f}{std} ({e['n']})"


def _ours_spearman(entry: dict | None) -> str:
  """Spearman to 3 places as the paper prints it; (n): the seeds that had one."""
  e = (entry or {}).get("spearman")
  if not e:
    return "-"
  std = "" if e["std"] is None else f" ± {e['std']:.3f}"
  return f"{e['mean']:.3f}{std} ({e['n']})"


def _paper_spearman(figure: float | None) -> str:
  return "-" if figure is None else f"{figure:.3f}"


def _paper(figure) -> str:
  return "-" if figure is None else f"{figure[0]:.2f} ± {figure[1]:.2f}"


def _markdown(title: str, header: Sequence[str], rows) -> str:
  lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def _mean_text(value: float | None) -> str:
  return "-" if value is None else f"{100 * value:.2f}"


def tables_markdown(tables: dict, clusters: Sequence[str] = TABLE_3_CLUSTERS) -> str:
  """Table 2 (accuracy and Spearman) and Table 3 in the paper's layout, ours (mean ± std over seeds,
  seeds in brackets) beside the paper's figure; Table 3 for `clusters`."""
  names = {"base": "Base", "single_task": "Single-task", "multitask": "Multi-task", "cross_task": "Cross-task"}
  # Table 2's layout: the accuracy columns, then the Spearman ones; the paper averages accuracy only.
  header = ["Task"] + [f"{names[p]}{kind}{suffix}" for kind in ("", " Spearman") for p in TABLE_2_COLUMNS
                       for suffix in ("", " (paper)")]
  rows = [[t] + [text for i, p in enumerate(TABLE_2_COLUMNS)
                 for text in (_ours(cells[p]), _paper(PAPER_TABLE_2[t][i]))]
          + [text for i, p in enumerate(TABLE_2_COLUMNS)
             for text in (_ours_spearman(cells[p]), _paper_spearman(PAPER_TABLE_2_SPEARMAN[t][i]))]
          for t, cells in tables["table_2"].items()]
  rows.append(["Average"] + [text for p in TABLE_2_COLUMNS for text in
                             (_mean_text(tables["table_2_average"][p]), f"{PAPER_TABLE_2_AVERAGE[p]:.2f}")]
              + ["-"] * 2 * len(TABLE_2_COLUMNS))
  parts = [_markdown("Table 2: accuracy on each criterion's test split, in % (a tie is wrong, §5), and "
                     "Spearman correlation of the model's scores with the humans' (criteria with ranked data)",
                     header, rows)]
  for cluster in clusters:
    entry = tables["table_3"][cluster]
    header = ["Task", "Single-Task", "Cross All", "Cross All (paper)", "Cross Cluster", "Cross Cluster (paper)"]
    rows = [[t, _ours(r["single_task"]), _ours(r["cross_task"]), _paper(PAPER_TABLE_2[t][3]),
             _ours(r["cross_cluster"]), _paper(PAPER_TABLE_3.get(cluster, {}).get(t))]
            for t, r in entry["rows"].items()]
    paper_average = PAPER_TABLE_3_AVERAGE.get(cluster, (None, None))
    rows.append(["Average", "-", _mean_text(entry["average"]["cross_task"]),
                 "-" if paper_average[0] is None else f"{paper_average[0]:.2f}",
                 _mean_text(entry["average"]["cross_cluster"]),
                 "-" if paper_average[1] is None else f"{paper_average[1]:.2f}"])
    parts.append(_markdown(f"Table 3, cluster {cluster}: accuracy in %, each Cross Cluster cell from "
                           "the run that held that criterion out", header, rows))
  return "\n".join(parts)


def write_tables(tables: dict, out_dir: str, clusters: Sequence[str] = TABLE_3_CLUSTERS) -> tuple[str, str]:
  """Writes `out_dir/heap_tables.json` and `heap_tables.md`; returns their paths."""
  json_path, md_path = storage.join(out_dir, "heap_tables.json"), storage.join(out_dir, "heap_tables.md")
  storage.write_text(json_path, json.dumps(tables, indent=2) + "\n")
  storage.write_text(md_path, tables_markdown(tables, clusters))
  return json_path, md_path


def parse_targets(text: Sequence[str], criterion_of: Callable[[str], str]) -> tuple[str, ...] | None:
  """--targets as abbreviations in any case, or None for all."""
  return tuple(criterion_of(re.sub(r"\s", "", t)) for t in text) if text else None


def describe(run: Run) -> str:
  """One line of the plan."""
  if run.mixture is None:
    training = "no training: the pretrained model with a fresh head seeded " + str(run.seed)
  else:
    examples = "" if run.train_examples is None else (
        f" = ceil({run.epochs} epochs x {run.train_examples} examples / {run.batch_size})")
    training = (f"trains on {run.mixture} ({len(run.trained)} criteria), batch {run.batch_size} "
                f"(accumulation {run.accumulation_steps}), lr {run.learning_rate:g}, "
                f"{run.train_steps} steps{examples}")
  return (f"{run.protocol} {run.name} seed {run.seed}: {training}; tests on {', '.join(run.targets)}; "
          f"{run.model_dir}")


def pending(runs: Sequence[Run]) -> list[tuple[Run, list[str]]]:
  """Each run with the targets it still has to evaluate (finished runs left out)."""
  return [(run, left) for run in runs if (left := [t for t in run.targets if not run.finished(t)])]


def summary(runs: Sequence[Run]) -> Mapping[str, int]:
  done = sum(1 for run in runs if all(run.finished(t) for t in run.targets))
  return {"runs": len(runs), "finished": done}
