"""Checkpoints: the one loader of parameters, a training run's orbax checkpoints, a clean exit on SIGTERM.

`load_params` is how train (INITIAL_CHECKPOINT_PATH), evaluate, infer and serve read parameters,
whatever the format, with one architecture check. A run's checkpoints live in
`MODEL_DIR/checkpoints/<step>/` with three items: `params` and
`opt_state` (orbax StandardSave, one file set per array, written by every host for its shards)
and `data` (JSON: the data position to resume from). A params-only checkpoint (`save_params`, as
scripts/convert_checkpoint.py writes) is a plain orbax PyTree directory. Restoring reads the
array shapes from the checkpoint and places every array with the target mesh's sharding, so a
checkpoint saved on one mesh restores on another.
"""
import dataclasses
import json
import os
import signal
import threading

import flax.traverse_util
import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.sharding import SingleDeviceSharding

from models import checkpoint_import
from models import reward as reward_lib
from models import t5x_checkpoint
from models.config import T5Config
from models.network import init_params
from runner import outputs
from runner import partitioning

CHECKPOINTS_SUBDIR = "checkpoints"
_ITEMS = ("params", "opt_state", "data")
CONFIG_FILE = "t5_config.json"  # the T5Config beside a converted or trained checkpoint
RUN_FIELDS = ("dtype", "dropout_rate")  # T5Config fields a run chooses; every other one is the checkpoint's
ARCHITECTURE_FIELDS = tuple(f.name for f in dataclasses.fields(T5Config) if f.name not in RUN_FIELDS)


def checkpoint_manager(model_dir, keep=3, read_only=False) -> ocp.CheckpointManager:
  """A manager of `model_dir`/checkpoints keeping the last `keep`; the training loop decides when to save."""
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only, read_only=read_only)
  return ocp.CheckpointManager(os.path.join(os.path.abspath(model_dir), CHECKPOINTS_SUBDIR),
                               options=options, item_names=_ITEMS)


def save(manager, step, params, opt_state, data_position) -> bool:
  """Starts an asynchronous save of step `step` (finished by `manager.wait_until_finished()`)."""
  args = ocp.args.Composite(params=ocp.args.StandardSave(params),
                            opt_state=ocp.args.StandardSave(opt_state),
                            data=ocp.args.JsonSave(dict(data_position, step=int(step))))
  return manager.save(int(step), args=args, force=True)


def restore(manager, abstract_params, abstract_opt_state, step=None):
  """(step, params, opt_state, data_position) of `step` (default: the latest), or None if there is none.

  The abstract trees are jax.ShapeDtypeStructs with shardings: arrays come back placed that way.
  """
  step = manager.latest_step() if step is None else step
  if step is None:
    return None
  restored = manager.restore(step, args=ocp.args.Composite(
      params=ocp.args.StandardRestore(abstract_params),
      opt_state=ocp.args.StandardRestore(abstract_opt_state),
      data=ocp.args.JsonRestore()))
  return step, restored.params, restored.opt_state, dict(restored.data)


def save_params(directory, params):
  """Writes a params-only orbax checkpoint (the format INITIAL_CHECKPOINT_PATH and evaluation read)."""
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.abspath(directory), params)
  checkpointer.wait_until_finished()


def params_location(checkpoint_dir) -> str:
  """The params directory inside a model dir, a checkpoints dir, a step dir or a params-only dir."""
  path = os.path.abspath(checkpoint_dir)
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint directory {path} does not exist")
  if os.path.isdir(os.path.join(path, CHECKPOINTS_SUBDIR)):
    path = os.path.join(path, CHECKPOINTS_SUBDIR)
  steps = [int(name) for name in os.listdir(path) if name.isdigit()
           and os.path.isdir(os.path.join(path, name, "params"))]
  if steps:
    path = os.path.join(path, str(max(steps)))
  if os.path.isdir(os.path.join(path, "params")):
    return os.path.join(path, "params")
  if os.path.exists(os.path.join(path, "_CHECKPOINT_METADATA")) or os.path.exists(
      os.path.join(path, "_METADATA")):
    return path
  raise FileNotFoundError(f"no orbax checkpoint found in {checkpoint_dir} (expected <step>/params, "
                          "a checkpoints/ subdirectory, or a params-only checkpoint)")


def _saved_config(location: str) -> T5Config | None:
  """The t5_config.json nearest above a params directory: MODEL_DIR/checkpoints/<step>/params
  finds MODEL_DIR's, a converted OUT/params finds OUT's."""
  directory = location
  for _ in range(4):
    config = read_model_config(directory)
    if config is not None:
      return config
    directory = os.path.dirname(directory)
  return None


def is_hf_checkpoint(path) -> bool:
  """A Hugging Face directory is one with a config.json (its weights must then be safetensors)."""
  return "://" not in str(path) and os.path.isfile(os.path.join(path, "config.json"))


def agreed_config(path, saved: T5Config | None, configured: T5Config | None) -> T5Config:
  """The run's T5Config, after checking every architecture field of the checkpoint against it.

  A checkpoint that records its architecture (a Hugging Face config.json, or t5_config.json
  beside an orbax checkpoint) must agree with the configured MODEL_CONFIG in every field but the
  run's own choices (RUN_FIELDS); the configured run choices apply.
  """
  if saved is None and configured is None:
    raise ValueError(f"{path}: no {CONFIG_FILE} beside the checkpoint; include a model gin file "
                     "(gin/models/t5_1_1/*.gin) so that MODEL_CONFIG describes it")
  if saved is None or configured is None:
    return saved or configured
  mismatched = [f"{name}: checkpoint {getattr(saved, name)!r}, MODEL_CONFIG {getattr(configured, name)!r}"
                for name in ARCHITECTURE_FIELDS if getattr(saved, name) != getattr(configured, name)]
  if mismatched:
    raise ValueError(f"checkpoint {path} does not match MODEL_CONFIG: " + "; ".join(mismatched))
  return configured


def _check_shapes(path, shapes, config: T5Config) -> None:
  """Every transformer parameter of `config` is in the checkpoint, with its shape (a reward head may be too)."""
  abstract = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0)))
  expected = flax.traverse_util.flatten_dict(abstract, sep="/")
  found = {name: leaf for name, leaf in flax.traverse_util.flatten_dict(shapes, sep="/").items()
           if not name.startswith(reward_lib.HEAD)}
  # Shapes first: a wrong width shows in every layer, a wrong depth only in the last ones.
  problems = [f"{name}: shape {tuple(found[name].shape)}, MODEL_CONFIG needs {tuple(expected[name].shape)}"
              for name in sorted(set(found) & set(expected))
              if tuple(found[name].shape) != tuple(expected[name].shape)]
  problems += [f"{name}: missing" for name in sorted(set(expected) - set(found))]
  problems += [f"{name}: not a parameter of MODEL_CONFIG" for name in sorted(set(found) - set(expected))]
  if problems:
    shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
    raise ValueError(f"checkpoint {path} does not fit MODEL_CONFIG: {shown}")


def placement(tree, config: T5Config, mesh=None, rules=partitioning.STANDARD_LOGICAL_AXIS_RULES):
  """Shardings for a parameter tree: by the logical-axis rules on `mesh`, else this host's first device."""
  if mesh is None:
    single = SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda _: single, tree)
  return partitioning.param_shardings(tree, config, mesh, rules)


def load_params(path, model_config: T5Config | None = None, mesh=None,
                rules=partitioning.STANDARD_LOGICAL_AXIS_RULES) -> tuple[T5Config, dict]:
  """(T5Config, params) of any checkpoint this project reads, placed on `mesh` (None: one device).

  `path` is a training run's MODEL_DIR (its latest step), its checkpoints/ directory, one step
  directory, a params-only orbax checkpoint (scripts/convert_checkpoint.py), a Hugging Face
  directory (config.json + *.safetensors) or a t5x checkpoint, legacy or orbax layout, in a bucket
  or not (a t5x model directory: its latest checkpoint_<step>/; `models.t5x_checkpoint`). The
  architecture is the checkpoint's recorded one checked against `model_config` (gin MODEL_CONFIG)
  by `agreed_config` (a t5x checkpoint records none: MODEL_CONFIG describes it), and the parameter
  shapes against the result; a reward head, when present, comes along.
  """
  if is_hf_checkpoint(path):
    saved, params = checkpoint_import.load_hf_t5(path)
    config = agreed_config(path, saved, model_config)
    return config, jax.device_put(params, placement(params, config, mesh, rules))
  t5x_step = t5x_checkpoint.t5x_step_dir(path)
  if t5x_step is not None:
    config = agreed_config(t5x_step, None, model_config)
    _check_shapes(t5x_step, t5x_checkpoint.t5x_shapes(t5x_step), config)  # before reading any array
    params = t5x_checkpoint.load_t5x(t5x_step)
    return config, jax.device_put(params, placement(params, config, mesh, rules))
  location = params_location(path)
  config = agreed_config(path, _saved_config(location), model_config)
  # The item's own handler: a training step's `params` is one item of a composite checkpoint,
  # whose step-level metadata a StandardCheckpointer would look for (and warn about) in it.
  handler = ocp.StandardCheckpointHandler()
  shapes = handler.metadata(epath.Path(location)).tree
  _check_shapes(path, shapes, config)
  target = partitioning.with_shardings(shapes, placement(shapes, config, mesh, rules))
  return config, handler.restore(epath.Path(location), args=ocp.args.StandardRestore(target))


class PreemptionGuard:
  """Turns SIGTERM (TPU preemption, `kill`) and SIGINT (Ctrl-C) into a flag the training loop
  checks after each step, so that either saves a checkpoint before the run stops.

  With several processes jax's own preemption sync point decides (orbax asks it), so that every
  host saves at the same step; one process installs plain signal handlers. `signal_number` is
  the signal received (None when none was), for the script's exit code.
  """

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self, manager):
    self._manager = manager
    self.signal_number = None
    self._previous = {}

  def __enter__(self):
    # Python delivers signals to the main thread only; elsewhere the flag stays unset.
    if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
      self._previous = {number: signal.signal(number, self._on_signal) for number in self.SIGNALS}
    return self

  def __exit__(self, *exc):
    for number, previous in self._previous.items():
      signal.signal(number, previous)
    self._previous = {}

  def _on_signal(self, signum, frame):
    del frame
    logging.warning("%s received: saving a checkpoint at the end of this step, then exiting",
                    signal.Signals(signum).name)
    self.signal_number = signum

  def should_stop(self, step) -> bool:
    if self.signal_number is None and jax.process_count() > 1 and self._manager.reached_preemption(step):
      self.signal_number = signal.SIGTERM  # jax's sync point: some host was preempted
    return self.signal_number is not None


def write_model_config(directory: str, config: T5Config) -> str:
  """Writes `config` as JSON to `directory/t5_config.json`; returns the path.

  Local files are replaced atomically; a bucket (gs://...) object is written whole by its store.
  """
  path = os.path.join(directory, CONFIG_FILE)
  text = json.dumps(dataclasses.asdict(config), indent=2) + "\n"
  if "://" in path:
    epath.Path(path).write_text(text)
  else:
    outputs.atomic_write_text(path, text)
  return path


def read_model_config(directory: str) -> T5Config | None:
  """The T5Config saved beside a checkpoint (local or in a bucket), or None when there is none."""
  path = epath.Path(directory) / CONFIG_FILE
  if not path.exists():
    return None
  fields = json.loads(path.read_text())
  known = {field.name for field in dataclasses.fields(T5Config)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"{path}: unknown T5Config field(s) {unknown}")
  return T5Config(**fields)
