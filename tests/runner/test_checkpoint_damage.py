"""Checkpoint damage: a missing or truncated file is one line naming the step and the file, and
training resumes from the previous step that reads, saying so."""
import gc
import pathlib
import re
import shutil

import jax
import numpy as np
import pytest

from models.config import T5Config
from models.network import init_params
from runner import checkpoint_integrity
from runner import checkpoints
from runner import partitioning
from runner import train as train_lib
from runner import trainer

# After the first failed read orbax abandons the other reads' coroutines, and Python reports each
# when it is collected, as an unraisable exception or (once in a full suite run) as a RuntimeWarning:
# noise about a failure these tests cause on purpose.
pytestmark = [pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
              pytest.mark.filterwarnings("ignore:coroutine '.*' was never awaited:RuntimeWarning")]

CONFIG = T5Config(vocab_size=64, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                  num_encoder_layers=1, num_decoder_layers=1)
OPTIMIZER = trainer.make_optimizer()


@pytest.fixture(autouse=True)
def _collect_abandoned_reads():
  yield
  gc.collect()  # while this test's warning filter holds, not in some later test


def _largest_chunk(params_dir: pathlib.Path) -> pathlib.Path:
  return max(params_dir.glob("ocdbt.process_*/d/*"), key=lambda path: path.stat().st_size)


def _remove_metadata(params_dir):
  (params_dir / "_METADATA").unlink()
  return params_dir / "_METADATA"


def _remove_manifest(params_dir):
  (params_dir / "manifest.ocdbt").unlink()
  return params_dir / "manifest.ocdbt"


def _truncate_chunk(params_dir):
  with open(_largest_chunk(params_dir), "r+b") as chunk:
    chunk.truncate(100)
  return params_dir  # TensorStore names the OCDBT database it read, not its chunk file


DAMAGE = {"missing _METADATA": _remove_metadata, "missing manifest.ocdbt": _remove_manifest,
          "truncated chunk": _truncate_chunk}


def _random_params(config, seed):
  """Parameters of `config`'s shapes, drawn by numpy: initialising them in jax compiles for seconds."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0)))
  return jax.tree.map(lambda leaf: rng.standard_normal(leaf.shape).astype(leaf.dtype), shapes)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
  """A run directory with steps 1 and 2 (different parameters), and the parameters of each."""
  run = tmp_path_factory.mktemp("saved") / "run"
  manager = checkpoints.checkpoint_manager(str(run))
  saved = {}
  for step in (1, 2):
    params = jax.device_put(_random_params(CONFIG, step))
    checkpoints.save(manager, step, params, OPTIMIZER.init(params), {"batches": step})
    saved[step] = jax.device_get(params)
  manager.wait_until_finished()
  checkpoints.write_model_config(str(run), CONFIG)
  return run, saved


@pytest.fixture(params=sorted(DAMAGE))
def damaged_run(request, saved_run, tmp_path):
  """(run directory whose step 2 is damaged one way, the damaged path, step 1's parameters)."""
  run = tmp_path / "run"
  shutil.copytree(saved_run[0], run)
  damaged = DAMAGE[request.param](run / "checkpoints" / "2" / "params")
  return run, damaged, saved_run[1][1]


def _initialise_or_restore(run):
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  return train_lib._initialise_or_restore(  # pylint: disable=protected-access
      checkpoints.checkpoint_manager(str(run)), CONFIG, trainer.get_objective("cross_entropy"),
      OPTIMIZER, None, 0, partitioning.Partitioner.for_mesh(mesh))


def _assert_one_line_naming(message, step, damaged):
  assert message.startswith(f"checkpoint step {step} is damaged: {damaged}"), message
  assert "\n" not in message and "tensorstore" not in message.lower() and len(message) < 300, message


def test_loading_a_damaged_step_names_the_step_and_the_file(damaged_run):
  run, damaged, _ = damaged_run
  with pytest.raises(checkpoints.CheckpointDamagedError) as error:
    checkpoints.load_params(str(run / "checkpoints" / "2"), CONFIG)
  _assert_one_line_naming(str(error.value), 2, damaged)
  assert isinstance(error.value, ValueError)  # scripts/train.py's one_line_errors prints it as one line


def test_training_resumes_from_the_previous_step_when_the_latest_is_damaged(damaged_run, capsys):
  run, damaged, step_1_params = damaged_run
  step, params, _, _ = _initialise_or_restore(run)
  assert step == 1
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(params), step_1_params)
  printed = capsys.readouterr().out
  assert f"checkpoint step 2 in {run / 'checkpoints'} is unreadable ({damaged}" in printed, printed
  assert printed.rstrip().endswith("; resuming from step 1 (step 2 kept as 2.damaged)"), printed
  # Set aside, so that the run saves step 2 afresh when it gets there.
  assert (run / "checkpoints" / "2.damaged" / "params").is_dir()
  assert checkpoints.checkpoint_manager(str(run)).all_steps() == [1]


def test_training_stops_when_no_step_reads(damaged_run):
  run, damaged, _ = damaged_run
  shutil.rmtree(run / "checkpoints" / "1")
  with pytest.raises(checkpoints.CheckpointDamagedError) as error:  # rather than start afresh
    _initialise_or_restore(run)
  inside = f"{run / 'checkpoints'}/"
  assert str(error.value).startswith(f"no checkpoint step of {run / 'checkpoints'} reads: "
                                     f"step 2: {str(damaged).replace(inside, '')}"), error.value
  assert "\n" not in str(error.value) and "tensorstore" not in str(error.value).lower(), error.value
  assert (error.value.step, error.value.damage) == (2, error.value.errors[0].damage)
  assert (run / "checkpoints" / "2").is_dir()


def test_when_every_step_is_damaged_the_error_names_each_step_and_its_damage(saved_run, tmp_path):
  """Every step damaged (a disk that filled up, a copy cut short): the one line says what is wrong
  with each, latest first, not the latest step's damage alone; still a CheckpointDamagedError."""
  run = tmp_path / "run"
  shutil.copytree(saved_run[0], run)
  manager = checkpoints.checkpoint_manager(str(run))
  checkpoints.save(manager, 3, jax.device_put(saved_run[1][2]), OPTIMIZER.init(saved_run[1][2]), {"batches": 3})
  manager.wait_until_finished()
  kinds = {3: "truncated chunk", 2: "missing _METADATA", 1: "missing manifest.ocdbt"}
  damaged = {step: DAMAGE[kind](run / "checkpoints" / str(step) / "params") for step, kind in kinds.items()}
  with pytest.raises(checkpoints.CheckpointDamagedError) as error:
    _initialise_or_restore(run)
  message = str(error.value)
  assert message.startswith(f"no checkpoint step of {run / 'checkpoints'} reads: step 3: 3/params: cannot read "), \
      message
  assert message.endswith("; step 2: 2/params/_METADATA: missing; step 1: 1/params/manifest.ocdbt: missing"), message
  assert "\n" not in message and "tensorstore" not in message.lower() and len(message) < 500, message
  assert [e.step for e in error.value.errors] == [3, 2, 1] and error.value.step == 3
  assert [e.damage.split(":")[0] for e in error.value.errors] == [str(damaged[3]), str(damaged[2]), str(damaged[1])]
  assert all((run / "checkpoints" / str(step)).is_dir() for step in kinds)  # nothing set aside


def test_a_params_only_checkpoint_is_named_by_its_directory(saved_run, tmp_path):
  params_dir = tmp_path / "converted" / "params"
  checkpoints.save_params(str(params_dir), saved_run[1][1])
  damaged = _remove_manifest(params_dir)
  with pytest.raises(checkpoints.CheckpointDamagedError,
                     match=re.escape(f"checkpoint {params_dir} is damaged: {damaged}: missing") + "$"):
    checkpoints.load_params(str(params_dir), CONFIG)


def test_a_failure_that_is_not_damage_keeps_its_own_error(saved_run):
  run, _ = saved_run
  manager = checkpoints.checkpoint_manager(str(run), read_only=True)

  def placed(tree):
    return partitioning.with_shardings(tree, checkpoints.placement(tree, CONFIG))

  # Asking for shapes the checkpoint does not have is a mistake, not damage: orbax's error stands.
  wider = jax.eval_shape(lambda: init_params(CONFIG.replace(mlp_dim=48), jax.random.PRNGKey(0)))
  with pytest.raises(ValueError) as error:
    checkpoints.restore(manager, placed(wider), placed(jax.eval_shape(OPTIMIZER.init, wider)), step=2)
  assert not isinstance(error.value, checkpoints.CheckpointDamagedError), error.value


def _replace_values(params_dir: pathlib.Path, other_params_dir: pathlib.Path) -> None:
  """Puts another checkpoint's params files in `params_dir`: every file reads, the values are not
  those saved with the step. (The deterministic form of a bit flip that the files' compression
  decodes without complaint; test_train_entry flips a real bit in a larger model's file.)"""
  shutil.rmtree(params_dir)
  shutil.copytree(other_params_dir, params_dir)


def test_evaluation_inference_and_serving_refuse_a_step_whose_values_changed(saved_run, tmp_path):
  """load_params (evaluate, infer, serve, convert) verifies a training step's parameters against
  the checksums saved with the step, as resuming does: changed values are named, never scored."""
  run = tmp_path / "run"
  shutil.copytree(saved_run[0], run)
  np.testing.assert_array_equal(  # an intact step verifies and loads as saved
      jax.device_get(checkpoints.load_params(str(run / "checkpoints" / "2"), CONFIG)[1])["token_embedder"]["embedding"],
      saved_run[1][2]["token_embedder"]["embedding"])
  _replace_values(run / "checkpoints" / "2" / "params", run / "checkpoints" / "1" / "params")
  with pytest.raises(checkpoints.CheckpointDamagedError) as error:
    checkpoints.load_params(str(run), CONFIG)  # MODEL_DIR: its latest step
  assert re.fullmatch(rf"checkpoint step 2 is damaged: {re.escape(str(run / 'checkpoints' / '2' / 'params'))}: "
                      r"the values of \d+ array\(s\) differ from the checksums saved with the step \(\[.+\)",
                      str(error.value)), error.value


def test_the_best_checkpoint_is_verified_too(saved_run, tmp_path):
  manager = checkpoints.best_checkpoint_manager(str(tmp_path / "run"), "max")
  checkpoints.save_best(manager, 2, jax.device_put(saved_run[1][2]), {"value": 0.5, "metric": "accuracy"})
  assert checkpoints.recorded_best(manager) == (2, {"value": 0.5, "metric": "accuracy"})  # checksums kept apart
  params_dir = tmp_path / "run" / "best" / "2" / "params"
  checkpoints.load_params(str(params_dir.parent), CONFIG)
  _replace_values(params_dir, saved_run[0] / "checkpoints" / "1" / "params")
  with pytest.raises(checkpoints.CheckpointDamagedError, match=re.escape(
      f"checkpoint {params_dir.parent} is damaged: {params_dir}: the values of ")):
    checkpoints.load_params(str(params_dir.parent), CONFIG)


def _checksum_in_numpy(values: np.ndarray) -> str:
  """checkpoint_integrity's documented checksum, computed independently: the array's words (a 16-bit
  value in the low half of a uint32), weighted by 2i+1 and by (i * 2654435761) | 1 for flat index i,
  each summed mod 2^32."""
  words = values.reshape(-1).view(f"uint{values.dtype.itemsize * 8}").astype(np.uint64)
  index = np.arange(words.size, dtype=np.uint64)
  first = int(np.sum(words * (2 * index + 1) % 2**32) % 2**32)
  second = int(np.sum(words * ((index * 2654435761 % 2**32) | 1) % 2**32) % 2**32)
  return "%08x%08x" % (first, second)


def test_checksums_are_the_documented_sums_and_a_flipped_bit_changes_both():
  """Every saved step is verified with these sums, so however they come to be computed they must not
  change (a step saved before would no longer read); a bit flipped anywhere changes both halves."""
  rng = np.random.default_rng(0)
  tree = {"kernel": rng.normal(size=(3, 5, 4)).astype(np.float32),
          "scale": rng.normal(size=(7,)).astype(jax.numpy.bfloat16),
          "count": np.array(12, np.int32), "same_shape": rng.normal(size=(3, 5, 4)).astype(np.float32)}
  found = checkpoint_integrity.checksums(jax.device_put(tree))
  assert found == {f"['{name}']": _checksum_in_numpy(values) for name, values in tree.items()}
  flipped = tree["kernel"].copy()
  flipped.reshape(-1).view(np.uint32)[37] ^= 1 << 20
  changed = checkpoint_integrity.checksums(jax.device_put({"kernel": flipped}))["['kernel']"]
  assert changed[:8] != found["['kernel']"][:8] and changed[8:] != found["['kernel']"][8:]
