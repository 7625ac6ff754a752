"""Ctrl-C and SIGTERM during evaluation and generation, sent to the real scripts: each stops at a
batch boundary with complete lines written, prints one line and exits 130 (SIGINT) or 143 (SIGTERM);
a rerun evaluation resumes to the end."""
import json
import re
import signal
import sys

import pytest

from models.config import T5Config
from runner import checkpoints
from scripts import evaluate as evaluate_script
from tests.helpers import cli
from tests.models.t5x_fixtures import random_params
from tests.helpers.processes import script_env
from tests.helpers.processes import signal_at_line

# gin/models/t5_1_1/tiny.gin's model, the one the commands below configure.
CONFIG = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                  num_encoder_layers=2, num_decoder_layers=2)
SITUATIONS = 64  # generation inputs: many more batches than pass before the signal lands


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A params-only checkpoint of the tiny model, random, with its config."""
  directory = tmp_path_factory.mktemp("ckpt")
  checkpoints.save_params(str(directory / "params"), random_params(CONFIG, 0))
  checkpoints.write_model_config(str(directory), CONFIG)
  return directory


def _complete_lines(path) -> list[dict]:
  """The file's records; fails on a line cut short or not JSON."""
  text = path.read_text(encoding="utf-8")
  assert text == "" or text.endswith("\n"), f"{path} ends in a partial line: {text[-200:]!r}"
  return [json.loads(line) for line in text.splitlines()]


def test_evaluation_stops_on_ctrl_c_and_the_same_command_resumes(checkpoint, compilation_cache, tmp_path):
  out = tmp_path / "eval"
  # custom.gin's mixture: asq_intent_cloze (12 items), then heap_ah (3).
  command = [sys.executable, "-m", "scripts.evaluate", "--gin_file=gin/models/t5_1_1/tiny.gin",
             "--gin_file=gin/runs/eval.gin", "--gin_file=gin/mixtures/custom.gin",
             f"--gin.CHECKPOINT_PATH='{checkpoint}'", f"--gin.EVAL_OUTPUT_DIR='{out}'", "--gin.BATCH_SIZE=4",
             "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 16}"]
  env = script_env(compilation_cache)
  # The first task's progress line: scoring runs; the signal lands while the second task starts.
  code, stdout, stderr = signal_at_line(command, "asq_intent_cloze ", signal.SIGINT, env)
  assert code == 130, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  last = stdout.splitlines()[-1]
  stopped = re.fullmatch(rf"SIGINT: interrupted after (\d+)/(\d+) items, kept in "
                         rf"{re.escape(str(out / 'predictions.jsonl'))}; rerun the same command to resume", last)
  assert stopped, stdout[-2000:]
  done, total = int(stopped.group(1)), int(stopped.group(2))
  records = _complete_lines(out / "predictions.jsonl")
  assert 0 < done == len(records) < total
  assert not (out / "metrics.json").exists() and not (out / "report.html").exists()

  # The same command line again, in this process (tests/helpers/cli.py): the signal's exit code
  # needed a real process, the resumption does not, and here it reuses the compiled programs.
  result = cli.run_script(evaluate_script.main, command[3:], program="evaluate")
  assert result.code == 0, result.stderr[-3000:]
  assert f"resuming: {done} items already in {out}/predictions.jsonl" in result.stdout
  records = _complete_lines(out / "predictions.jsonl")
  assert len(records) == total == len({(r["task"], r["id"]) for r in records})
  assert set(json.loads((out / "metrics.json").read_text())) > {"provenance", "asq_intent_cloze"}


def test_generation_stops_on_sigterm_with_the_inputs_sampled_so_far(checkpoint, compilation_cache, tmp_path):
  situations = tmp_path / "situations.jsonl"
  situations.write_text("".join(json.dumps({"id": f"s{i}", "title": f"Question {i}?", "selftext": "Context.",
                                            "subreddit": "Advice"}) + "\n" for i in range(SITUATIONS)))
  output = tmp_path / "advice.jsonl"
  command = [sys.executable, "-m", "scripts.generate", "--gin_file=gin/models/t5_1_1/tiny.gin",
             "--gin_file=gin/runs/infer.gin",
             f"--gin.CHECKPOINT_PATH='{checkpoint}'", f"--gin.INFER_OUTPUT_FILE='{output}'",
             f"--gin.INPUT_FILE='{situations}'", "--gin.BATCH_SIZE=2",
             "--gin.TASK_FEATURE_LENGTHS={'inputs': 64, 'targets': 8}"]
  # The first batch's progress line: sampling runs; the signal lands while the next batches do.
  code, stdout, stderr = signal_at_line(command, "generated 2/", signal.SIGTERM, script_env(compilation_cache))
  assert code == 143, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  stopped = re.fullmatch(rf"SIGTERM: interrupted after (\d+)/{SITUATIONS} inputs, their lines written to "
                         f"{re.escape(str(output))}; rerunning the same command starts over", stdout.splitlines()[-1])
  assert stopped, stdout[-2000:]
  records = _complete_lines(output)
  assert 2 <= len(records) == int(stopped.group(1)) < SITUATIONS and len(records) % 2 == 0
  assert [r["id"] for r in records] == [f"s{i}" for i in range(len(records))]
  assert all(len(r["predictions"]) == 1 for r in records)
