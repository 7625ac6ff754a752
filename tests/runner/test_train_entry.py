"""The train entry point: resuming after SIGKILL, saving on SIGTERM and SIGINT (and the script's exit
codes), stopping on a non-finite loss.

`run` below is the tiny run they train: killed by SIGKILL in a subprocess (sharing the compilation
cache), else in this process; Ctrl-C's exit code is the real script's, in a subprocess. The
gin-configured run on the quickstart mixture (its console, config.gin, t5_config.json) is make
demo's training, checked by tests/test_readme.py.
"""
import contextlib
import io
import os
import re
import shutil
import signal
import sys
import time

import jax
import numpy as np
import pytest

from models.config import T5Config
from runner import checkpoints
from tests.helpers import cli
from tests.models.t5x_fixtures import random_params
from tests.helpers.processes import script_env
from tests.helpers.processes import signal_at_line
from tests.runner.conftest import python_runner

TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                num_encoder_layers=2, num_decoder_layers=2)
STEPS = 8


def numbered_batches(start, signal_at=None, signal_number=None, committed=None):
  """Batch i is a fixed function of i; the process signals itself when fetching batch `signal_at`,
  once the checkpoint directory `committed` exists (the asynchronous save of the last checkpoint
  has committed: a loaded machine can take seconds)."""
  index = start
  while True:
    if index == signal_at:
      deadline = time.time() + 120
      while committed and not os.path.isdir(committed) and time.time() < deadline:
        time.sleep(0.05)
      os.kill(os.getpid(), signal_number)
    rng = np.random.default_rng(index)
    yield {"input_ids": rng.integers(3, 300, (4, 10)).astype(np.int32),
           "target_ids": rng.integers(3, 300, (4, 6)).astype(np.int32)}
    index += 1


def run(model_dir, signal_at=None, signal_number=None, nan_from_update=None, save_params_to=None, keep=3):
  """A tiny 8-step run checkpointing every 3 steps; optionally signalled, or with a NaN learning rate."""
  import jax
  import jax.numpy as jnp
  import optax
  from runner import configs, partitioning, train
  learning_rate = 1e-2
  if nan_from_update is not None:
    learning_rate = lambda count: jnp.where(count < nan_from_update, 1e-2, jnp.nan)
  batches = train.BatchSource(lambda start: numbered_batches(
      start, signal_at, signal_number,
      committed=os.path.join(str(model_dir), "checkpoints", "3") if signal_at else None), batch_size=4)
  result = train.train(model_config=TINY, train_dataset=batches,
                       training=configs.TrainingConfig(STEPS, optimizer=optax.adafactor(learning_rate), log_every=4),
                       checkpoint=configs.CheckpointConfig(every=3, keep=keep),
                       partitioner=partitioning.Partitioner(), model_dir=str(model_dir))
  if save_params_to:
    flat = jax.tree_util.tree_flatten_with_path(jax.device_get(result.params))[0]
    np.savez(save_params_to, **{jax.tree_util.keystr(path): value for path, value in flat})
  print("result", result.step, result.preempted)


def _train_with(model_dir, training, checkpoint=None, *, train_dataset=None, model_config=TINY, run_config=None):
  """train.train on numbered_batches (4 rows), or `train_dataset`, with the default mesh."""
  from runner import configs, partitioning, train  # pylint: disable=g-import-not-at-top
  return train.train(model_config=model_config, train_dataset=train_dataset or train.BatchSource(numbered_batches, 4),
                     training=training, checkpoint=checkpoint or configs.CheckpointConfig(),
                     partitioner=partitioning.Partitioner(), model_dir=str(model_dir), run_config=run_config)


def _params(path):
  with np.load(path) as arrays:
    return dict(arrays)


def _steps(model_dir):
  return sorted(int(name) for name in os.listdir(model_dir / "checkpoints") if name.isdigit())


@pytest.fixture(scope="module")
def runs(compilation_cache, tmp_path_factory):
  """A run killed mid-way, in a process of its own (SIGKILL ends the process); then, in this
  process (what they check is train's, not a process's), its resumption, an uninterrupted run, a
  SIGTERMed run and a run whose updates turn NaN. Returns (directory, steps left by the kill, output)."""
  from runner import train  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp("runs")
  python_runner(compilation_cache, directory)("""
      import signal
      from tests.runner.test_train_entry import run
      run("killed", signal_at=5, signal_number=signal.SIGKILL)
      """, expect_returncode=-signal.SIGKILL)
  steps_after_kill = _steps(directory / "killed")
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    run(directory / "killed", save_params_to=directory / "resumed.npz")
    run(directory / "uninterrupted", save_params_to=directory / "uninterrupted.npz", keep=2)
    run(directory / "terminated", signal_at=4, signal_number=signal.SIGTERM, save_params_to=directory / "returned.npz")
    restored = checkpoints.load_params(str(directory / "terminated"), TINY)[1]
    returned = _params(directory / "returned.npz")
    for path, value in jax.tree_util.tree_flatten_with_path(jax.device_get(restored))[0]:
      np.testing.assert_array_equal(value, returned[jax.tree_util.keystr(path)])
    print("restored the returned parameters")
    for name, nan_from_update in (("nan", 4), ("nan_at_once", 1)):
      try:
        run(directory / name, nan_from_update=nan_from_update)
      except train.NonFiniteLossError as error:
        print("error:", error)
  return directory, steps_after_kill, out.getvalue()


def test_killed_run_resumes_to_the_parameters_of_an_uninterrupted_run(runs):
  directory, steps_after_kill, out = runs
  assert steps_after_kill == [3]  # killed while fetching the batch of step 6
  assert out.count(f"result {STEPS} False") == 2
  # The killed run's lease, left behind, names a process of this host that is gone: taken over at once.
  assert f"taking over the lease of MODEL_DIR {directory / 'killed'} from host " in out, out
  assert out.count("taking over the lease") == 1
  assert _steps(directory / "killed") == [3, 6, STEPS]
  assert _steps(directory / "uninterrupted") == [6, STEPS]  # keeps the last 2
  resumed, uninterrupted = _params(directory / "resumed.npz"), _params(directory / "uninterrupted.npz")
  assert resumed.keys() == uninterrupted.keys() and len(resumed) > 20
  for name, value in uninterrupted.items():
    np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_sigterm_saves_at_the_current_step_and_returns(runs):
  directory, _, out = runs
  assert "result 5 True" in out and "restored the returned parameters" in out
  assert _steps(directory / "terminated") == [3, 5]


def test_non_finite_update_stops_with_the_last_good_checkpoint(runs):
  directory, _, out = runs
  # The 5th update (step 4) uses a NaN learning rate: step 4's new parameters are NaN.
  assert "at step 4; stopped without saving: the last good checkpoint is step 3" in out, out
  assert _steps(directory / "nan") == [3]


def test_a_run_diverged_before_its_first_checkpoint_says_none_was_saved(runs):
  directory, _, out = runs
  assert (f"at step 1; stopped without saving: no checkpoint was saved before it in {directory / 'nan_at_once'}"
          in out), out
  assert not (directory / "nan_at_once" / "checkpoints").exists()  # the empty folder the run made is gone


def test_an_unknown_task_name_stops_before_the_model_dir_exists_and_names_close_ones(tmp_path):
  import t5_tasks  # pylint: disable=unused-import  # registers the tasks
  from runner import configs
  with pytest.raises(ValueError, match=r"unknown task or mixture 'asq_intent_clozee' \(close names: "
                                       r"asq_intent_cloze"):
    _train_with(tmp_path / "run", configs.TrainingConfig(1),
                train_dataset=configs.DatasetConfig("asq_intent_clozee", {"inputs": 64, "targets": 16}, "train", 4))
  assert not (tmp_path / "run").exists()


def test_initial_checkpoint_path_starts_from_a_params_only_checkpoint(tmp_path):
  import optax
  from runner import configs
  start = random_params(TINY, 5)
  checkpoints.save_params(tmp_path / "converted" / "params", start)
  result = _train_with(tmp_path / "run", configs.TrainingConfig(1, optimizer=optax.sgd(0.0), log_every=1),
                       configs.CheckpointConfig(str(tmp_path / "converted")))
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(result.params), jax.device_get(start))
  assert _steps(tmp_path / "run") == [1]


def test_initial_checkpoint_path_reads_a_hugging_face_dir_and_checks_its_architecture(tmp_path):
  pytest.importorskip("transformers")
  from runner import configs
  from tests.models.hf_reference import make_hf_t5
  make_hf_t5(tmp_path / "hf")
  with pytest.raises(ValueError, match=r"does not match MODEL_CONFIG: vocab_size: checkpoint 96, MODEL_CONFIG 384; "
                                       r"emb_dim: checkpoint 32, MODEL_CONFIG 64"):
    _train_with(tmp_path / "run", configs.TrainingConfig(1), configs.CheckpointConfig(str(tmp_path / "hf")))


def _train_command(model_dir, *bindings):
  """One small task, not a mixture: the quickstart mixture's pipeline is tested by make demo's
  (tests/test_readme.py), and each of its tasks fills a shuffle buffer before the first step."""
  return [sys.executable, "-m", "scripts.train", "--gin_file=gin/models/t5_1_1/tiny.gin",
          "--gin_file=gin/runs/finetune.gin", "--gin.MIXTURE_OR_TASK_NAME='asq_intent_cloze'",
          f"--gin.MODEL_DIR='{model_dir}'", "--gin.BATCH_SIZE=2",
          "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}", *bindings]


# Ctrl-C through the script (exit 130); SIGTERM's saving is the `runs` fixture's, and its exit code
# 143 the same mapping (scripts.gin_cli.one_line_errors), run by tests/runner/test_interrupts.py.
@pytest.mark.parametrize("signal_number, exit_code", [(signal.SIGINT, 130)])
def test_scripts_train_saves_on_a_signal_and_exits_with_its_code(compilation_cache, tmp_path,
                                                                 signal_number, exit_code):
  returncode, stdout, stderr = signal_at_line(
      _train_command(tmp_path / "run", "--gin.TRAIN_STEPS=100000", "--gin.configs.TrainingConfig.log_every=1"),
      "step 2/", signal_number, script_env(compilation_cache))
  assert returncode == exit_code, stderr[-3000:]
  saved = re.search(rf"{signal_number.name}: saved the checkpoint of step (\d+) in .*; "
                    "rerun the same command to resume", stdout)
  assert saved, stdout[-2000:]
  assert _steps(tmp_path / "run") == [int(saved.group(1))] and "Traceback" not in stderr


def test_scripts_train_refuses_zero_steps_in_one_line_and_names_a_misspelled_macro(tmp_path):
  # In this process (tests/helpers/cli.py): the exit code and the lines are one_line_errors' own.
  from scripts import train as train_script  # pylint: disable=g-import-not-at-top
  result = cli.run_script(train_script.main,
                          _train_command(tmp_path / "run", "--gin.TRAIN_STEPS=0", "--gin.TRAIN_STEP=5")[3:],
                          program="train")
  assert result.code == 1, result.stderr[-3000:]
  assert "WARNING: --gin.TRAIN_STEP: no configuration reads this macro (misspelled?)" in result.stderr
  assert "error: TRAIN_STEPS must be positive, got 0: the run would save nothing" in result.stderr
  assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


def _short_run(model_dir, model_config=TINY, run_config="# the first run's gin\n", checkpoint_every=1000):
  import optax  # pylint: disable=g-import-not-at-top
  from runner import configs  # pylint: disable=g-import-not-at-top
  return _train_with(model_dir, configs.TrainingConfig(2, optimizer=optax.adafactor(1e-2)),
                     configs.CheckpointConfig(every=checkpoint_every), model_config=model_config,
                     run_config=run_config)


def test_a_refused_resume_leaves_the_run_as_it_was(tmp_path):
  """Another model's gin, or a checkpoint_every that cannot work, is refused in one line naming
  each differing field with both values, before the run's t5_config.json or config.gin change;
  the run then still resumes with its own model (issue 35)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  model_dir = tmp_path / "run"
  _short_run(model_dir)
  recorded = {name: (model_dir / name).read_bytes() for name in ("t5_config.json", "config.gin")}
  wider = dataclasses.replace(TINY, emb_dim=128, num_heads=8)
  with pytest.raises(ValueError, match=rf"^MODEL_DIR {re.escape(str(model_dir))} holds a run of another model "
                                       r"\(emb_dim: the run's 64, MODEL_CONFIG 128; num_heads: the run's 4, "
                                       r"MODEL_CONFIG 8\); include the run's model gin file, or name a new MODEL_DIR$"):
    _short_run(model_dir, wider, run_config="# another model's gin\n")
  for value, message in (("ten", r"^configs\.CheckpointConfig\.every must be a whole number, got 'ten'$"),
                         (0, r"^configs\.CheckpointConfig\.every must be positive, got 0$")):
    with pytest.raises(ValueError, match=message):
      _short_run(model_dir, run_config="# a bad checkpoint_every\n", checkpoint_every=value)
  assert {name: (model_dir / name).read_bytes() for name in recorded} == recorded
  assert _short_run(model_dir, run_config=recorded["config.gin"].decode()).step == 2  # resumed: nothing to do


def test_a_flipped_bit_in_a_checkpoint_file_is_found_and_the_run_resumes_from_the_step_before(runs, tmp_path,
                                                                                               capsys):
  """One bit flipped in the middle of the largest file of the latest step's params, the file's size
  unchanged: TensorStore reads it without complaint, the checksums saved with the step do not match
  the values read, so the step is set aside and the run resumes from step 6, the last verified one
  (issue 35). Before the checksums, the run resumed from the corrupt step 8."""
  import glob  # pylint: disable=g-import-not-at-top
  model_dir = tmp_path / "run"
  shutil.copytree(runs[0] / "killed", model_dir)  # `runs`' resumed run: steps 3, 6 and 8, as `run` leaves them
  files = [path for path in glob.glob(f"{model_dir}/checkpoints/{STEPS}/params/**", recursive=True)
           if os.path.isfile(path)]
  largest = max(files, key=os.path.getsize)
  data = bytearray(open(largest, "rb").read())
  data[len(data) // 2] ^= 0x10
  with open(largest, "wb") as f:
    f.write(bytes(data))
  capsys.readouterr()
  run(model_dir)
  out = capsys.readouterr().out
  assert re.search(rf"checkpoint step {STEPS} in \S+ is unreadable \(\S+/{STEPS}/params: the values of 1 array\(s\) "
                   rf"differ from the checksums saved with the step \(\[.+\]\)\); resuming from step 6", out), out
  assert sorted(os.listdir(model_dir / "checkpoints")) == ["3", "6", "8", "8.damaged"]


def test_a_run_refused_once_its_checkpoints_folder_exists_leaves_no_folder_behind(tmp_path):
  import dataclasses  # pylint: disable=g-import-not-at-top
  from runner import configs  # pylint: disable=g-import-not-at-top
  checkpoints.save_params(tmp_path / "other" / "params", random_params(TINY, 5))
  checkpoints.write_model_config(str(tmp_path / "other"), dataclasses.replace(TINY, num_heads=2 * TINY.num_heads))
  with pytest.raises(ValueError, match="num_heads"):  # refused as it loads, after the checkpoints folder is made
    _train_with(tmp_path / "run", configs.TrainingConfig(1), configs.CheckpointConfig(str(tmp_path / "other")))
  assert not (tmp_path / "run").exists()


def test_a_missing_initial_checkpoint_is_refused_before_the_run_prepares_anything(tmp_path):
  from runner import configs  # pylint: disable=g-import-not-at-top
  # Named by the macro: the check before the preflight and the data, not the loader's after them.
  with pytest.raises(OSError, match=f"^INITIAL_CHECKPOINT_PATH {tmp_path / 'missing'} does not exist$"):
    _train_with(tmp_path / "run", configs.TrainingConfig(1), configs.CheckpointConfig(str(tmp_path / "missing")))
  assert not (tmp_path / "run").exists()


def test_a_model_dir_that_is_a_file_is_refused_in_one_line_before_anything(tmp_path):
  from runner import configs  # pylint: disable=g-import-not-at-top
  (tmp_path / "run").write_text("notes\n")
  with pytest.raises(ValueError, match=rf"^MODEL_DIR {tmp_path / 'run'} is a file: name a folder"):
    _train_with(tmp_path / "run", configs.TrainingConfig(1))
  assert (tmp_path / "run").read_text() == "notes\n"
