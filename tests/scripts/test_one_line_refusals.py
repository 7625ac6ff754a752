"""Every refusal one line, and early (issue 53): what a user meets running the scripts on a checkpoint
that is not there, is a file, was never trained or is cut short, and on a flag whose value names a
missing folder. Each case runs the real command lines (`python -m scripts.X`, the tiny model,
gin/quickstart.gin) side by side, and checks the exit code and the one line by its text: no
traceback, no usage text, and for the checkpoint checks nothing printed before it (no data read).
"""
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.helpers.processes import script_env

QUICKSTART_EVAL = ["--gin_file=gin/runs/eval.gin", "--gin_file=gin/quickstart.gin"]
QUICKSTART_TRAIN = ["--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin"]
TINY_INFER = ["--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/runs/infer.gin"]


def _run_side_by_side(commands: dict, tmp_path) -> dict:
  """{name: (exit code, stdout, stderr)} of `python -m ...` commands run at once from the project root."""
  env = script_env(tmp_path / "jax_cache")
  started = {name: subprocess.Popen([sys.executable, "-m", *command], cwd=PROJECT_ROOT, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, command in commands.items()}
  results = {}
  for name, process in started.items():
    try:
      stdout, stderr = process.communicate(timeout=300)
    finally:
      process.kill()
    results[name] = (process.returncode, stdout, stderr)
  return results


def _assert_one_line(result, line: str, name: str, nothing_before: bool = True) -> None:
  """Exit 1 and `line` (after `error: `) as stderr's only line; with `nothing_before`, nothing on stdout."""
  code, stdout, stderr = result
  assert code == 1, (name, code, stderr[-3000:])
  assert stderr.splitlines() == [f"error: {line}"], (name, stderr[-3000:])
  if nothing_before:
    assert stdout == "", (name, stdout[-3000:])


@pytest.fixture(scope="module")
def truncated_hf_dir(tmp_path_factory):
  """The tiny model exported as a Hugging Face directory, its model.safetensors then cut to half
  (a download or copy stopped early); returns (directory, the file's size now, its full size)."""
  import jax  # pylint: disable=g-import-not-at-top
  from models import checkpoint_export  # pylint: disable=g-import-not-at-top
  from models.config import T5Config  # pylint: disable=g-import-not-at-top
  from models.network import init_params  # pylint: disable=g-import-not-at-top
  tiny = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                  num_encoder_layers=2, num_decoder_layers=2)  # gin/models/t5_1_1/tiny.gin
  directory = tmp_path_factory.mktemp("hf") / "tiny"
  checkpoint_export.save_hf_t5(str(directory), tiny, init_params(tiny, jax.random.PRNGKey(0)))
  weights = directory / "model.safetensors"
  data = weights.read_bytes()
  weights.write_bytes(data[:len(data) // 2])
  return directory, len(data) // 2, len(data)


def test_a_truncated_safetensors_file_is_one_line_naming_the_file(truncated_hf_dir, tmp_path):
  """INITIAL_CHECKPOINT_PATH (was a 44-line traceback of safetensors' own error, naming no file),
  --hf_dir, CHECKPOINT_PATH and serve's --checkpoint; evaluation and serving find it before any data."""
  directory, size, full = truncated_hf_dir
  results = _run_side_by_side({
      "train": ["scripts.train", *QUICKSTART_TRAIN, f"--gin.MODEL_DIR='{tmp_path / 'run'}'", "--gin.TRAIN_STEPS=2",
                f"--gin.INITIAL_CHECKPOINT_PATH='{directory}'"],
      "convert": ["scripts.convert_checkpoint", f"--hf_dir={directory}", f"--out={tmp_path / 'converted'}"],
      "evaluate": ["scripts.evaluate", *QUICKSTART_EVAL, f"--gin.CHECKPOINT_PATH='{directory}'",
                   f"--gin.EVAL_OUTPUT_DIR='{tmp_path / 'eval'}'"],
      "serve": ["scripts.serve", f"--checkpoint={directory}", "--port=0"],
  }, tmp_path)
  line = f"{directory / 'model.safetensors'}: truncated: the file has {size} of the {full} bytes its header describes"
  for name, result in results.items():
    _assert_one_line(result, line, name, nothing_before=name in ("evaluate", "serve"))
  assert not (tmp_path / "converted").exists() and not (tmp_path / "eval").exists()


def test_serve_refuses_a_missing_checkpoint_folder_in_one_line(tmp_path):
  """Was a 31-line traceback."""
  (tmp_path / "a_file").write_text("not a checkpoint")
  results = _run_side_by_side({
      "missing": ["scripts.serve", f"--checkpoint={tmp_path / 'missing'}", "--port=0"],
      "file": ["scripts.serve", f"--checkpoint={tmp_path / 'a_file'}", "--port=0"],
  }, tmp_path)
  _assert_one_line(results["missing"], f"--checkpoint {tmp_path / 'missing'} does not exist", "missing")
  _assert_one_line(results["file"], f"--checkpoint {tmp_path / 'a_file'} is a file, not a directory", "file")


def test_evaluate_and_generate_refuse_a_checkpoint_that_is_a_file_or_never_trained_before_any_data(tmp_path):
  """Was said after the preflight and all data preparation, in errno terms ('does not exist' for a file)."""
  (tmp_path / "a_file").write_text("not a run")
  never_trained = tmp_path / "never_trained"
  never_trained.mkdir()
  (never_trained / "config.gin").write_text("TRAIN_STEPS = 400\n")  # a run refused before its first save
  output = f"--gin.INFER_OUTPUT_FILE='{tmp_path / 'advice.jsonl'}'"
  results = _run_side_by_side({  # one script each way: both call runner.checkpoints.check_checkpoint alike
      "evaluate a file": ["scripts.evaluate", *QUICKSTART_EVAL, f"--gin.MODEL_DIR='{tmp_path / 'a_file'}'"],
      "generate never trained": ["scripts.generate", *TINY_INFER, f"--gin.CHECKPOINT_PATH='{never_trained}'", output],
  }, tmp_path)
  no_checkpoint = (f"CHECKPOINT_PATH {never_trained} holds no checkpoint: no checkpoints/<step>/params (a run that "
                   "never saved a step?), no params-only checkpoint, no Hugging Face config.json, no t5x checkpoint_<step>/")
  for name, result in results.items():
    line = f"CHECKPOINT_PATH {tmp_path / 'a_file'} is a file, not a directory" if "file" in name else no_checkpoint
    _assert_one_line(result, line, name)
  assert not (tmp_path / "advice.jsonl").exists() and sorted(p.name for p in never_trained.iterdir()) == ["config.gin"]


def test_a_flag_naming_a_missing_folder_is_one_line_and_usage_is_for_usage_errors(tmp_path):
  """convert_checkpoint's and analyze heap_runs' missing folders were 33-49 lines of usage before their
  line; a command line of the wrong shape (no direction, no analysis's flag) still shows the usage."""
  empty = tmp_path / "empty"
  empty.mkdir()
  results = _run_side_by_side({
      "hf_dir": ["scripts.convert_checkpoint", f"--hf_dir={tmp_path / 'missing'}", f"--out={tmp_path / 'out'}"],
      "hf_dir without config": ["scripts.convert_checkpoint", f"--hf_dir={empty}", f"--out={tmp_path / 'out'}"],
      "heap_runs": ["scripts.analyze", "heap_runs", f"--eval_dirs={empty}"],
      "no direction": ["scripts.convert_checkpoint"],
      "no eval_dirs": ["scripts.analyze", "heap_runs"],
  }, tmp_path)
  _assert_one_line(results["hf_dir"], f"--hf_dir {tmp_path / 'missing'} does not exist", "hf_dir")
  _assert_one_line(results["hf_dir without config"],
                   f"--hf_dir {empty}: no config.json there (a Hugging Face directory has one)", "hf_dir without config")
  _assert_one_line(results["heap_runs"], f"{empty}: no metrics.json (evaluate the run first)", "heap_runs")
  for name, error in (("no direction", "give exactly one of --hf_dir or --t5x_dir"),
                      ("no eval_dirs", "heap_runs needs --eval_dirs=")):
    code, _, stderr = results[name]
    assert code == 1 and "\nflags:\n" in stderr and stderr.rstrip().splitlines()[-1].startswith(error), \
        (name, code, stderr[-3000:])
  assert not (tmp_path / "out").exists()
