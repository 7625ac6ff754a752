"""docs/tasks.md's "Adding a task family" (linked from the README), followed literally in a copy of the project.

Each file the walk-through names (a path in backticks, a colon, then a fenced block) is written into
a fresh git copy of the project as the README gives it; the copy then has those new files and no
other change. A user's two commands then train the tiny quickstart model on the new task for two
steps and evaluate it (the copy's own code: the project here has no riddles); the accuracy it
reports is checked against the scores it wrote and the README's answers.
"""
import json
import os
import re
import shutil
import subprocess
import sys

from tests.conftest import PROJECT_ROOT
from tests.conftest import not_the_source

# A path the walk-through names, then the block that is that file's whole text.
NAMED_BLOCK = re.compile(r"`([\w./-]+)`:\n\n```\w*\n(.*?)^```$", re.M | re.S)


def walkthrough_files() -> dict[str, str]:
  """{path: text} of every file "Adding a task family" says to write."""
  readme = (PROJECT_ROOT / "docs" / "tasks.md").read_text()
  section = readme.split("## Adding a task family\n", 1)[1].split("\n## ", 1)[0]
  return dict(NAMED_BLOCK.findall(section))


def _copy(root):
  shutil.copytree(PROJECT_ROOT, root, ignore=not_the_source)
  for args in (["init", "-q"], ["add", "-A"],
               ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "copy"]):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _run(root, *args):
  env = {**os.environ, "PYTHONPATH": str(root)}
  done = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return done


def test_a_family_added_as_the_readme_says_trains_and_evaluates(tmp_path):
  files = walkthrough_files()
  # One reader and one declaration module; the rest is quickstart data.
  assert sorted(p for p in files if p.endswith(".py")) == ["t5_tasks/families/riddles.py",
                                                           "t5_tasks/sources/riddles.py"], list(files)
  assert all(p.startswith("t5_tasks/data/") for p in files if not p.endswith(".py")), list(files)
  root = tmp_path / "project"
  _copy(root)
  for path, text in files.items():
    assert not (root / path).exists(), path
    (root / path).write_text(text)
  status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                          check=True, capture_output=True, text=True).stdout.splitlines()
  assert sorted(status) == sorted(f"?? {path}" for path in files)

  model_dir, eval_dir = tmp_path / "runs" / "riddles", tmp_path / "runs" / "riddles_eval"
  task = "--gin.MIXTURE_OR_TASK_NAME='riddle_cloze'"
  _run(root, "-m", "scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
       task, "--gin.TRAIN_STEPS=2", f"--gin.MODEL_DIR='{model_dir}'")
  _run(root, "-m", "scripts.evaluate", "--gin_file=gin/runs/eval.gin", "--gin_file=gin/quickstart.gin",
       task, f"--gin.CHECKPOINT_PATH='{model_dir}'", f"--gin.EVAL_OUTPUT_DIR='{eval_dir}'")

  test_rows = [json.loads(line) for line in files["t5_tasks/data/riddles_test.jsonl"].splitlines()]
  predictions = [json.loads(line) for line in (eval_dir / "predictions.jsonl").read_text().splitlines()]
  assert sorted(p["id"] for p in predictions) == sorted(row["id"] for row in test_rows)
  answers = {row["id"]: row["answer"] for row in test_rows}
  right = [max(range(2), key=lambda i: p["scores"][i]) == answers[p["id"]] for p in predictions]
  metrics = json.loads((eval_dir / "metrics.json").read_text())
  assert metrics["riddle_cloze"]["accuracy"]["value"] == sum(right) / len(right), (metrics, predictions)
