"""Choosing settings on a validation split: one training run per point of a grid, the best kept.

HEAP (Mehri & Shwartz 2023, §5) "performed hyperparameter tuning on the validation set" (learning
rate, gradient accumulation, epochs, truncation, instructions, label input; Table 4 holds what it
chose); Stiennon et al. 2020 (appendix B.1) "sweep over between 3 and 10 seeds, and choose the
reward model that performs best on the development portion of the validation set". Both are this:
a base gin configuration, a grid of bindings (`{macro: [values]}`, every combination in order, the
last name varying fastest, or a list of `{macro: value}` points), and a metric
('<task or group>/<metric>', 'max' or 'min').

Each point is one training run in `out_dir/point_<n>` whose evaluation during training (t5x's
eval period, runner/training_evaluation.py: the same scoring as offline evaluation) scores the
validation split once, at the run's last step (EVAL_EVERY = TRAIN_STEPS); the metric is read
back from the run's own MODEL_DIR/eval_metrics.jsonl. The best value wins, a tie going to the
first point in grid order. `out_dir/sweep.json` records every point (its values, the gin
bindings it trained with, its folder, validation value and step) and the choice; it is rewritten
after each point, so a rerun of the same sweep skips the points it holds and a sweep of another
grid there is refused.

runner does not import scripts: the caller passes how a point is checked and trained (scripts.heap
runs scripts.train's `main` on the configuration and the point's bindings).
"""
import ast
import itertools
import json
from typing import Any, Callable, Mapping, Sequence

from runner import run_dir
import storage

RECORD = "sweep.json"
MODES = ("max", "min")
# Bound by the sweep for each point (the evaluation it chooses by), never by the grid or the base.
SET_BY_SWEEP = ("MODEL_DIR", "EVAL_EVERY", "EVAL_SPLIT", "BEST_METRIC", "BEST_MODE")


def parse_grid(text: str) -> dict | list:
  """--sweep's value: a Python literal `{name: [values]}` or `[{name: value}, ...]`."""
  try:
    grid = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    raise ValueError(f"--sweep={text!r}: not a Python literal; give {{'LEARNING_RATE': [2e-5, 3e-4]}} or "
                     "[{'SEED': 0}, {'SEED': 1}]") from None
  expand(grid)  # checks its shape
  return grid


def expand(grid: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """The grid's points in order: a mapping's every combination (its last name varying fastest),
  or a list's points as given. A point given twice is refused (two runs of one setting)."""
  if isinstance(grid, Mapping):
    for name, values in grid.items():
      if not isinstance(name, str) or not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"sweep grid: {name!r} needs a non-empty list of values, got {values!r}")
    points = [dict(zip(grid, combination)) for combination in itertools.product(*grid.values())]
  elif isinstance(grid, (list, tuple)) and grid and all(isinstance(p, Mapping) and p for p in grid):
    points = [dict(point) for point in grid]
  else:
    raise ValueError(f"sweep grid: expected {{name: [values]}} or a non-empty list of {{name: value}}, got {grid!r}")
  seen = {}
  for number, point in enumerate(points, start=1):
    twin = seen.setdefault(repr(sorted(point.items())), number)
    if twin != number:
      raise ValueError(f"sweep grid: points {twin} and {number} are both {point}")
  return points


def binding(name: str, value: Any) -> str:
  """`NAME = value` as gin parses it (a string quoted)."""
  return f"{name} = {value!r}"


def check_metric(metric: str, mode: str) -> None:
  if not isinstance(metric, str) or metric.count("/") < 1:
    raise ValueError(f"sweep metric must be '<task or group>/<metric>' (e.g. 'heap_cng/pairwise_accuracy'), "
                     f"got {metric!r}")
  if mode not in MODES:
    raise ValueError(f"sweep mode must be one of {MODES}, got {mode!r}")


def check_names(points: Sequence[Mapping[str, Any]], reserved: Mapping[str, str] | None = None) -> None:
  """Refuses a name the sweep (or, in `reserved`, its caller: {name: why}) sets itself."""
  reserved = {**{name: "the sweep sets it for each point" for name in SET_BY_SWEEP}, **(reserved or {})}
  for point in points:
    for name in point:
      if name in reserved:
        raise ValueError(f"sweep grid: {name}: {reserved[name]}")


def evaluation_bindings(model_dir: str, metric: str, mode: str, split: str) -> list[str]:
  """A point's own bindings: its folder, and one evaluation of `split` at its last step, keeping
  that checkpoint as MODEL_DIR/best by `metric` (BEST_METRIC's check of the name runs before the
  first step)."""
  return [binding("MODEL_DIR", model_dir), "EVAL_EVERY = %TRAIN_STEPS", binding("EVAL_SPLIT", split),
          binding("BEST_METRIC", metric), binding("BEST_MODE", mode)]


def validation_value(model_dir: str, metric: str) -> dict:
  """{'step', 'value'}: `metric` at the last evaluation of the run's eval_metrics.jsonl."""
  path = run_dir.RunDir(model_dir).eval_metrics
  if not storage.exists(path):
    raise ValueError(f"{path}: missing; the run recorded no evaluation on the validation split")
  lines = [json.loads(line) for line in storage.read_text(path).splitlines() if line.strip()]
  if not lines:
    raise ValueError(f"{path}: empty; the run recorded no evaluation on the validation split")
  last = lines[-1]
  if metric not in last["metrics"]:
    raise ValueError(f"{path}: no {metric} at step {last['step']}; it has {', '.join(sorted(last['metrics']))}")
  return {"step": last["step"], "value": last["metrics"][metric]}


def best(values: Sequence[float], mode: str) -> int:
  """The index of the best value ('max' or 'min'); a tie goes to the first."""
  chosen = 0
  for index, value in enumerate(values):
    if (value > values[chosen]) if mode == "max" else (value < values[chosen]):
      chosen = index
  return chosen


def _describe(values: Mapping[str, Any]) -> str:
  return ", ".join(f"{name}={value!r}" for name, value in values.items())


def check_points(points: Sequence[Mapping[str, Any]], *, out_dir: str, metric: str, mode: str, split: str,
                 check: Callable[[Mapping[str, Any], str, list[str]], None] | None) -> list[dict]:
  """The sweep's points ({'number', 'values', 'model_dir'}), each checked (`check(values,
  model_dir, sweep_bindings)`; None: the caller has checked them)."""
  check_metric(metric, mode)
  check_names(points)
  if not points:
    raise ValueError("sweep grid: no point")
  width = max(3, len(str(len(points))))
  plan = [{"number": number, "values": dict(values),
           "model_dir": storage.join(out_dir, f"point_{number:0{width}d}")}
          for number, values in enumerate(points, start=1)]
  for entry in plan:
    if check is not None:
      check(entry["values"], entry["model_dir"], evaluation_bindings(entry["model_dir"], metric, mode, split))
  return plan


def run(points: Sequence[Mapping[str, Any]], *, out_dir: str, metric: str, mode: str, split: str,
        check: Callable[[Mapping[str, Any], str, list[str]], None] | None,
        train: Callable[[Mapping[str, Any], str, list[str]], Sequence[str] | None],
        about: Mapping[str, Any] | None = None, dry_run: bool = False, describe: Callable[[Mapping[str, Any], str], str] | None = None) -> dict:
  """Trains a run per point (`train(values, model_dir, sweep_bindings)`, which returns the gin
  bindings it trained with, recorded), reads its validation `metric`, chooses the best, records
  everything in `out_dir/sweep.json` and returns that record.

  Every point is first checked (`check(values, model_dir, sweep_bindings)`: its whole configuration
  parsed, a name no configuration reads refused) before any training (None: `check_points` has). `about` (the base
  configuration, what the sweep leaves fixed, ...) is copied into the record. Prints a line per
  point and the choice; `dry_run` prints the points (`describe(values, model_dir)`) and trains nothing.
  """
  plan = check_points(points, out_dir=out_dir, metric=metric, mode=mode, split=split, check=check)
  path = storage.join(out_dir, RECORD)
  if dry_run:
    print(f"sweep: {len(plan)} points by {split} {metric} ({mode}); record {path}", flush=True)
    for entry in plan:
      shown = describe(entry["values"], entry["model_dir"]) if describe else entry["model_dir"]
      print(f"  point {entry['number']}/{len(plan)}: {_describe(entry['values'])}; {shown}", flush=True)
    return {"metric": metric, "mode": mode, "split": split, **(about or {}), "points": plan, "choice": None}
  record = {"metric": metric, "mode": mode, "split": split, **(about or {}), "points": plan, "choice": None}
  done = {}
  if storage.exists(path):
    earlier = json.loads(storage.read_text(path))

    def key(entries):  # as JSON holds them (a tuple is a list there)
      return json.loads(json.dumps([(p["values"], p["model_dir"]) for p in entries]))
    same = (key(earlier["points"]) == key(plan)
            and (earlier["metric"], earlier["mode"], earlier["split"]) == (metric, mode, split))
    if not same:
      raise ValueError(f"{path}: records a sweep of another grid, metric or split; use another output folder")
    done = {p["number"]: p for p in earlier["points"] if "value" in p}
  print(f"sweep: {len(plan)} points by {split} {metric} ({mode}), {len(done)} done; record {path}", flush=True)
  for entry in plan:
    number = entry["number"]
    if number in done:
      entry.update({k: done[number][k] for k in ("bindings", "step", "value") if k in done[number]})
      continue
    print(f"\n=== sweep point {number}/{len(plan)}: {_describe(entry['values'])}; {entry['model_dir']}", flush=True)
    own = evaluation_bindings(entry["model_dir"], metric, mode, split)
    bindings = train(entry["values"], entry["model_dir"], own)
    if bindings is not None:
      entry["bindings"] = list(bindings)
    entry.update(validation_value(entry["model_dir"], metric))
    storage.write_text(path, json.dumps(record, indent=2) + "\n")
  for entry in plan:
    print(f"sweep point {entry['number']}/{len(plan)}: {_describe(entry['values'])}: {split} {metric} "
          f"{entry['value']:.4f} (step {entry['step']})", flush=True)
  chosen = plan[best([entry["value"] for entry in plan], mode)]
  record["choice"] = {key: chosen[key] for key in ("number", "values", "value", "step", "model_dir")}
  storage.write_text(path, json.dumps(record, indent=2) + "\n")
  print(f"sweep chose point {chosen['number']}: {_describe(chosen['values'])} ({split} {metric} "
        f"{chosen['value']:.4f}, {mode}; a tie goes to the first); run {chosen['model_dir']}; record {path}",
        flush=True)
  return record
