"""heap_runs: HEAP's Table 2 and 3 shapes over evaluations of several seeds of one model (mean ± std)."""
import json
import re
from typing import Mapping, Sequence

import numpy as np
from absl import app

from runner import outputs
from runner import report
from scripts import interpreter
from scripts.analyses.common import print_table
import storage


def _spread(values: Sequence[float]) -> dict:
  """Mean and sample standard deviation (ddof=1; None for one run) over runs, and the values."""
  return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
          "n": len(values), "values": [float(v) for v in values]}


def _criterion_entry(metrics: Mapping[str, dict], task: str) -> dict | None:
  """A criterion's metrics in one run: its task's, or its `_tfds` twin's."""
  return metrics.get(task) or metrics.get(f"{task}_tfds")


def heap_run_summary(runs: Mapping[str, Mapping[str, dict]], criteria: Sequence[str],
                     clusters: Mapping[str, Sequence[str]], task_name) -> dict:
  """Table 2 and 3 over several runs (seeds): per criterion and per cluster, mean ± std over runs.

  runs: {eval dir: its metrics.json}. A criterion's pairwise accuracy and Spearman (where the
  run has one) are taken from each run that evaluated it; a cluster's value in a run is the
  unweighted mean accuracy of its criteria that run evaluated (Table 3's Average), "all" over
  every criterion (Table 2's Average), as scripts/evaluate.py writes them.
  """
  per_run = [{a: e for a in criteria if (e := _criterion_entry(metrics, task_name(a)))}
             for metrics in runs.values()]
  table = {"runs": list(runs), "criteria": {}, "clusters": {}}
  for a in criteria:
    entries = [found[a] for found in per_run if a in found]
    if entries:
      table["criteria"][a] = {"runs": len(entries)}
      table["criteria"][a].update({name: _spread([e[name]["value"] for e in entries if name in e])
                                   for name in ("pairwise_accuracy", "spearman")
                                   if any(name in e for e in entries)})
  for cluster, members in {**clusters, "all": tuple(criteria)}.items():
    averages, sizes = [], set()
    for found in per_run:
      accuracy = [found[a]["pairwise_accuracy"]["value"] for a in members
                  if a in found and "pairwise_accuracy" in found[a]]
      if accuracy:
        averages.append(np.mean(accuracy))
        sizes.add(len(accuracy))
    if averages:
      table["clusters"][cluster] = {"criteria": sorted(sizes), "pairwise_accuracy": _spread(averages)}
  return table


def _mean_std(e: dict | None, scale: float, digits: int) -> str:
  if not e:
    return "-"
  std = "" if e["std"] is None else f" ± {scale * e['std']:.{digits}f}"
  return f"{scale * e['mean']:.{digits}f}{std}"


def _training_mixture(eval_dir: str) -> str | None:
  """What the evaluated checkpoint trained on: MIXTURE_OR_TASK_NAME of its run's config.gin
  (None when the checkpoint is not a training run's MODEL_DIR)."""
  checkpoint = (outputs.read_provenance(eval_dir) or {}).get("checkpoint_path")
  config = checkpoint and storage.join(checkpoint, "config.gin")
  if not config or not storage.exists(config):
    return None
  found = re.search(r"^MIXTURE_OR_TASK_NAME = '([^']+)'", storage.read_text(config), re.M)
  return found and found.group(1)


def _check_one_model(eval_dirs: Sequence[str]) -> None:
  """Refuses runs trained on different mixtures: they are different models (protocols, targets),
  not seeds of one, and averaging a criterion over them mixes held-out and trained-on figures."""
  mixtures = {directory: mixture for directory in dict.fromkeys(eval_dirs)
              if (mixture := _training_mixture(directory))}
  if len(set(mixtures.values())) > 1:
    raise ValueError("runs trained on different mixtures are not seeds of one model: "
                     + ", ".join(f"{d} ({m})" for d, m in mixtures.items())
                     + f"; a protocol's tables, each criterion from its own run: {interpreter.python()} -m scripts.heap")


def analyze(args) -> dict:
  """Prints HEAP's Table 2 and 3 shapes over the runs of --eval_dirs (each one seed of one model, a
  distinct checkpoint); writes JSON to --output. A protocol's tables, each criterion's figure from
  the run that held it out, are `python -m scripts.heap`'s."""
  if not args.eval_dirs:
    raise app.UsageError("heap_runs needs --eval_dirs=DIR1,DIR2,... (evaluation output directories)")
  runs, checkpoints = {}, {}
  for directory in dict.fromkeys(args.eval_dirs):  # a folder named twice is one run
    if not storage.exists(storage.join(directory, outputs.METRICS_FILE)):
      raise FileNotFoundError(f"{directory}: no {outputs.METRICS_FILE} (evaluate the run first)")
    # Seeds are different models: two evaluations of one checkpoint would count as two runs that
    # agree exactly (a spread of 0.00), so they are refused by the parameters' fingerprint.
    fingerprint = (outputs.read_provenance(directory) or {}).get("params_fingerprint")
    if fingerprint in checkpoints:
      raise ValueError(f"{directory} and {checkpoints[fingerprint]} evaluated the same parameters "
                       f"({fingerprint[:23]}...): give one evaluation per seed's run")
    if fingerprint:
      checkpoints[fingerprint] = directory
    runs[directory] = outputs.read_metrics(directory)
  _check_one_model(args.eval_dirs)
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top  # TensorFlow: once the folders are checked
  table = heap_run_summary(runs, tuple(heap.HEAP_CRITERIA), heap.CLUSTERS, heap.task_name)
  if not table["criteria"]:
    raise ValueError(f"no HEAP criterion is evaluated in {', '.join(args.eval_dirs)}")
  n = len(runs)
  print_table(report.Table(
      f"HEAP per criterion over {n} runs (Table 2): accuracy in %, mean ± std (ddof=1); each folder "
      f"one seed of one model (per-protocol tables: {interpreter.python()} -m scripts.heap)",
      ("criterion", "runs", "accuracy", "Spearman"),
      [(a, e["runs"], _mean_std(e.get("pairwise_accuracy"), 100, 2),
        _mean_std(e.get("spearman"), 1, 3)) for a, e in table["criteria"].items()]))
  print_table(report.Table(
      f"HEAP average accuracy per cluster over {n} runs (Table 3; all: Table 2's Average), in %",
      ("cluster", "criteria", "runs", "accuracy"),
      [(c, "/".join(map(str, e["criteria"])), e["pairwise_accuracy"]["n"],
        _mean_std(e["pairwise_accuracy"], 100, 2)) for c, e in table["clusters"].items()]))
  if args.output:
    storage.write_text(args.output, json.dumps(table, indent=2) + "\n")
    print(f"\nwrote {args.output}")
  return table


WRITES_REPORT = False  # prints, and writes JSON to --output
