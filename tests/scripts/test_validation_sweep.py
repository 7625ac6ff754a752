"""Settings chosen on a validation split (runner/validation_sweep.py): `scripts.heap --sweep` over
HEAP's §5 grid or a given one, and `--recipe` over a reward model's seeds (summarize-from-feedback
appendix B.1).

The grid logic and the record run on stub trainings; the two real sweeps (two tiny runs each, the
quickstart files, 2 steps) are checked against what each run wrote itself: the value of its last
evaluation in MODEL_DIR/eval_metrics.jsonl and the split in its config.gin, the choice recomputed
from those. The §5 grid is read back from the paper's text.
"""
import json
import pathlib
import re

import pytest

from runner import heap_benchmark as bench
from runner import validation_sweep
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_heap_benchmark import heap_run

PAPER = PROJECT_ROOT.parent / "shared" / "papers" / "heap.txt"
TINY = ("--model_gin=gin/models/t5_1_1/tiny.gin", "--gin.TASK_FEATURE_LENGTHS={'inputs': 256, 'targets': 64}")
HEAP_TINY = (*TINY, "--seeds=0", "--accumulation_steps=1", "--train_steps=2", "--gin.SENTENCEPIECE_MODEL_PATH=None")


def _succeeds(*arguments):
  result = heap_run(*arguments)
  assert result.code == 0 and "Traceback" not in result.stderr, result.stdout[-3000:] + result.stderr[-3000:]
  return result


def _refused(*arguments) -> str:
  result = heap_run(*arguments)
  assert result.code == 1, result.stdout[-2000:] + result.stderr[-2000:]
  return result.stderr.strip().splitlines()[-1]


def _written(model_dir: pathlib.Path, metric: str) -> tuple[int, float]:
  """(step, value) of `metric` at the run's last evaluation, as the run wrote it."""
  last = json.loads((model_dir / "eval_metrics.jsonl").read_text().splitlines()[-1])
  return last["step"], last["metrics"][metric]


def _check_sweep(out: pathlib.Path, stdout: str, metric: str, grid: list[dict], split_binding: str):
  """The record lists every point in grid order, each with its own run's validation value; the
  choice is the first best of those values, printed."""
  record = json.loads((out / "sweep.json").read_text())
  assert [p["values"] for p in record["points"]] == grid
  written = []
  for number, point in enumerate(record["points"], start=1):
    model_dir = out / f"point_{number:03d}"
    assert point["model_dir"] == str(model_dir)
    step, value = _written(model_dir, metric)
    assert (point["step"], point["value"]) == (step, value) and step == 2  # the run's last step
    config = (model_dir / "config.gin").read_text()
    assert split_binding in config and "EVAL_SPLIT = 'validation'" in config
    for name, bound in point["values"].items():
      assert f"{name} = {bound!r}" in point["bindings"] and re.search(rf"^{name} = {bound!r}$", config, re.M)
    written.append(value)
    assert f"sweep point {number}/{len(grid)}: " in stdout and f"{metric} {value:.4f} (step 2)" in stdout
  best = max(written)
  expected = written.index(best) + 1  # a tie: the first
  assert record["choice"]["number"] == expected and record["choice"]["value"] == best
  assert f"sweep chose point {expected}: " in stdout
  return record


def test_a_grid_is_every_combination_in_order_and_a_tie_goes_to_the_first():
  assert validation_sweep.expand({"A": [1, 2], "B": ["x", "y"]}) == [
      {"A": 1, "B": "x"}, {"A": 1, "B": "y"}, {"A": 2, "B": "x"}, {"A": 2, "B": "y"}]
  assert validation_sweep.expand([{"SEED": 0}, {"SEED": 1, "A": 2}]) == [{"SEED": 0}, {"SEED": 1, "A": 2}]
  assert validation_sweep.best([0.5, 0.75, 0.75], "max") == 1
  assert validation_sweep.best([0.5, 0.25, 0.25], "min") == 1
  with pytest.raises(ValueError, match=r"sweep grid: points 1 and 2 are both \{'SEED': 0\}"):
    validation_sweep.expand([{"SEED": 0}, {"SEED": 0}])
  with pytest.raises(ValueError, match="sweep grid: 'A' needs a non-empty list of values"):
    validation_sweep.expand({"A": []})
  with pytest.raises(ValueError, match="not a Python literal"):
    validation_sweep.parse_grid("{'A': [1,")


def test_the_default_grid_is_section_5s():
  if not PAPER.is_file():
    pytest.skip(f"{PAPER} is not here")
  text = " ".join(PAPER.read_text(encoding="utf-8").split())
  found = re.search(r"learning rate \(([^)]*)\), gradient accumulation \(([^)]*)\), number of epochs \((\d+) - (\d+)\)",
                    text)
  rates = tuple(float(x.replace(" ", "")) for x in found.group(1).split(","))
  accumulations = tuple(int(x) for x in found.group(2).split(","))
  epochs = tuple(range(int(found.group(3)), int(found.group(4)) + 1))
  assert bench.SECTION_5_GRID == {"LEARNING_RATE": rates, "ACCUMULATION_STEPS": accumulations, "EPOCHS": epochs}
  assert "truncation, instructions, and labelling elements of the input" in text  # the dimensions left out
  assert set(bench.SECTION_5_FIXED) == {"truncation", "label_input"}


def test_the_record_holds_every_point_and_a_rerun_skips_them(tmp_path, capsys):
  values = [0.5, 0.75, 0.75]
  trained = []

  def train(point, model_dir, own):  # a run's eval_metrics.jsonl, as training writes it
    trained.append(point["SEED"])
    pathlib.Path(model_dir).mkdir(parents=True)
    line = {"step": 3, "metrics": {"t/pairwise_accuracy": values[point["SEED"]]}}
    (pathlib.Path(model_dir) / "eval_metrics.jsonl").write_text(json.dumps(line) + "\n")
    return [*own, f"SEED = {point['SEED']}"]
  sweep = dict(out_dir=str(tmp_path), metric="t/pairwise_accuracy", mode="max", split="validation", check=None)
  record = validation_sweep.run(validation_sweep.expand({"SEED": [0, 1, 2]}), train=train, **sweep)
  assert [(p["number"], p["value"], p["step"]) for p in record["points"]] == [(1, 0.5, 3), (2, 0.75, 3), (3, 0.75, 3)]
  assert record["choice"]["number"] == 2  # the tie with point 3 goes to the first
  assert record["points"][0]["bindings"][:2] == [f"MODEL_DIR = '{tmp_path}/point_001'", "EVAL_EVERY = %TRAIN_STEPS"]
  assert json.loads((tmp_path / "sweep.json").read_text()) == record
  assert validation_sweep.run(validation_sweep.expand({"SEED": [0, 1, 2]}), train=train, **sweep) == record
  assert trained == [0, 1, 2]  # the rerun trained nothing
  assert "sweep: 3 points by validation t/pairwise_accuracy (max), 3 done" in capsys.readouterr().out
  with pytest.raises(ValueError, match="sweep.json: records a sweep of another grid, metric or split"):
    validation_sweep.run(validation_sweep.expand({"SEED": [0, 1]}), train=train, **sweep)
  with pytest.raises(ValueError, match="sweep grid: EVAL_SPLIT: the sweep sets it for each point"):
    validation_sweep.run([{"EVAL_SPLIT": "test"}], train=train, **{**sweep, "out_dir": str(tmp_path / "x")})


def test_heap_sweep_chooses_on_the_targets_validation_split(tmp_path):
  out = tmp_path / "heap"
  grid = [{"SEED": 0, "LEARNING_RATE": 0.01}, {"SEED": 1, "LEARNING_RATE": 0.01}]
  result = _succeeds("--protocol=single_task", "--targets=ag", f"--out_dir={out}", *HEAP_TINY, f"--sweep={grid!r}")
  sweep_dir = out / "sweep" / "single_task" / "ag"
  record = _check_sweep(sweep_dir, result.stdout, "heap_ag/pairwise_accuracy", grid,
                        "EVAL_MIXTURE_OR_TASK_NAME = 'heap_ag'")
  assert (record["evaluated"], record["metric"], record["split"]) == ("heap_ag", "heap_ag/pairwise_accuracy",
                                                                      "validation")
  assert record["fixed"] == bench.SECTION_5_FIXED
  assert not (out / "single_task").exists()  # the sweep trains its points only


def test_reward_model_seeds_keep_the_best_on_validation(tmp_path):
  out = tmp_path / "rm"
  arguments = ("--recipe=gin/recipes/summarize_from_feedback/reward_model.gin", "--sweep={'SEED': [0, 1]}",
               "--sweep_metric=summarize_feedback_preference/pairwise_accuracy", f"--out_dir={out}", *TINY,
               "--gin.INITIAL_CHECKPOINT_PATH=None", "--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=4")
  result = _succeeds(*arguments)
  _check_sweep(out, result.stdout, "summarize_feedback_preference/pairwise_accuracy", [{"SEED": 0}, {"SEED": 1}],
               "MIXTURE_OR_TASK_NAME = 'summarize_feedback_preference'")
  again = _succeeds(*arguments)
  assert "2 points by validation summarize_feedback_preference/pairwise_accuracy (max), 2 done" in again.stdout
  assert "=== sweep point" not in again.stdout


def test_a_grid_the_configuration_cannot_take_is_refused_in_one_line_before_training(tmp_path):
  out = tmp_path / "heap"
  base = ("--protocol=single_task", "--targets=cng", f"--out_dir={out}", *HEAP_TINY)
  assert _refused(*base, "--sweep={'LEARNING_RAT': [1e-3]}") == (
      "error: --sweep: LEARNING_RAT: no configuration reads this macro (misspelled?); nothing was trained")
  assert _refused(*base, "--sweep={'TRAIN_STEPS': [1, 2]}") == (
      "error: sweep grid: TRAIN_STEPS: it is EPOCHS x the train examples / BATCH_SIZE, or --train_steps "
      "(sweep EPOCHS)")
  assert _refused(*base, "--sweep=paper") == (
      "error: sweep grid: EPOCHS: --train_steps fixes every point's steps; drop EPOCHS from the grid or --train_steps")
  assert _refused("--recipe=gin/recipes/summarize_from_feedback/reward_model.gin", "--sweep=paper",
                  "--sweep_metric=a/b", f"--out_dir={out}") == (
      "error: --sweep=paper is HEAP's §5 grid, for --protocol; give --recipe a grid "
      "(e.g. --sweep=\"{'SEED': [0, 1, 2]}\")")
  assert not out.exists()
