"""Checkpoints: the one loader of parameters, a training run's orbax checkpoints, a clean exit on SIGTERM.

`load_params` is how train (INITIAL_CHECKPOINT_PATH), evaluate, infer and serve read parameters,
whatever the format, with one architecture check. A run's checkpoints live in
`MODEL_DIR/checkpoints/<step>/` with three items: `params` and
`opt_state` (orbax StandardSave, one file set per array, written by every host for its shards)
and `data` (JSON: the data position to resume from). A params-only checkpoint (`save_params`, as
scripts/convert_checkpoint.py writes) is a plain orbax PyTree directory. Restoring reads the
array shapes from the checkpoint and places every array with the target mesh's sharding, so a
checkpoint saved on one mesh restores on another.

A checkpoint with a missing or truncated file raises CheckpointDamagedError, one line naming the
step and the file (runner/checkpoint_integrity.py names the damage and checks the values' checksums);
`restore_readable` steps back past damaged steps to the latest one that reads.
"""
import dataclasses
import functools
import json
import os
import signal
import sys
import threading

import flax.traverse_util
import jax
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from jax.sharding import SingleDeviceSharding

from models import checkpoint_import
from models import reward as reward_lib
from models import t5x_checkpoint
from models.config import T5Config
from models.network import init_params
from runner import checkpoint_integrity
from runner import partitioning
from runner import run_dir
import storage

CHECKPOINTS_SUBDIR = run_dir.CHECKPOINTS
_ITEMS = ("params", "opt_state", "data")
PARAMS_CHECKSUMS = checkpoint_integrity.PARAMS_CHECKSUMS
# The errors its functions raise (runner.checkpoint_integrity), caught by callers as checkpoints'.
CheckpointDamagedError = checkpoint_integrity.CheckpointDamagedError
NoReadableStepError = checkpoint_integrity.NoReadableStepError
CheckpointWriteError = checkpoint_integrity.CheckpointWriteError
CONFIG_FILE = run_dir.MODEL_CONFIG  # the T5Config beside a converted or trained checkpoint
RUN_FIELDS = ("dtype", "dropout_rate")  # T5Config fields a run chooses; every other one is the checkpoint's
ARCHITECTURE_FIELDS = tuple(f.name for f in dataclasses.fields(T5Config) if f.name not in RUN_FIELDS)


def _step_of(location: str) -> int | None:
  """The step of a params directory MODEL_DIR/checkpoints/<step>/params, else None."""
  step_dir = storage.parent(location)
  name = storage.name(step_dir)
  return int(name) if storage.name(storage.parent(step_dir)) == CHECKPOINTS_SUBDIR and name.isdigit() else None


def checkpoint_manager(model_dir, keep=3, read_only=False) -> ocp.CheckpointManager:
  """A manager of `model_dir`/checkpoints keeping the last `keep`; the training loop decides when to save."""
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only, read_only=read_only)
  return ocp.CheckpointManager(storage.absolute(run_dir.RunDir(model_dir).checkpoints),
                               options=options, item_names=_ITEMS)


def save(manager, step, params, opt_state, data_position) -> bool:
  """Starts an asynchronous save of step `step` (finished by `finish(manager)`).

  The `data` item also holds a checksum of every array (`checksums`), so that a restore finds
  values that changed after they were saved (a flipped bit that every file format reads).
  A step that cannot fit on a local disk is refused before a file is written (CheckpointWriteError)."""
  finish(manager)  # the previous step's bytes are on disk before space is counted
  checkpoint_integrity.check_space(manager, step, (params, opt_state))
  record = dict(data_position, step=int(step),
                checksums={item: checkpoint_integrity.checksums(tree)
                           for item, tree in (("params", params), ("opt_state", opt_state))})
  args = ocp.args.Composite(params=ocp.args.StandardSave(params),
                            opt_state=ocp.args.StandardSave(opt_state),
                            data=ocp.args.JsonSave(record))
  with checkpoint_integrity.naming_write_failure(manager, step):
    return manager.save(int(step), args=args, force=True)


def check_writes(manager) -> None:
  """Raises CheckpointWriteError as soon as the step written in the background has failed (a disk
  that filled, a bucket gone), without waiting for a write in progress: a training loop calls it
  every step, so a run stops on the failed step, not after training on to its next checkpoint.
  (orbax keeps the failure in its finalize thread, which only `wait_until_finished` raises.)"""
  if not manager.is_saving_in_progress():
    finish(manager)  # the write has ended: this returns at once, or raises its failure


def finish(manager) -> None:
  """Waits for the step being written; a failure to write it for want of space is CheckpointWriteError."""
  with checkpoint_integrity.naming_write_failure(manager, manager.latest_step()):
    manager.wait_until_finished()


def restore(manager, abstract_params, abstract_opt_state, step=None):
  """(step, params, opt_state, data_position) of `step` (default: the latest), or None if there is none.

  The abstract trees are jax.ShapeDtypeStructs with shardings: arrays come back placed that way.
  Raises CheckpointDamagedError when a file of the step is missing or truncated.
  """
  step = manager.latest_step() if step is None else step
  if step is None:
    return None
  step_dir = checkpoint_integrity.step_dir(manager, step)
  items = {step_dir / item: checkpoint_integrity.METADATA_FILES[item] for item in _ITEMS}
  with checkpoint_integrity.naming_damage(step_dir, step, items):
    restored = manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract_params),
        opt_state=ocp.args.StandardRestore(abstract_opt_state),
        data=ocp.args.JsonRestore()))
  checkpoint_integrity.verify(step_dir, step, restored)
  position = {name: value for name, value in restored.data.items() if name != "checksums"}
  return step, restored.params, restored.opt_state, position


def restore_readable(manager, abstract_params, abstract_opt_state):
  """(restore's result for the latest step that reads, [CheckpointDamagedError of each later step]).

  The result is None when there is no step; when no step reads, NoReadableStepError names each
  step and its damage (the latest step's alone would hide that the earlier ones are gone too).
  """
  damaged = []
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      return restore(manager, abstract_params, abstract_opt_state, step), damaged
    except CheckpointDamagedError as error:
      damaged.append(error)
  if damaged:
    raise NoReadableStepError(manager.directory, damaged)
  return None, damaged


def restore_latest(manager, abstract_params, abstract_opt_state):
  """`restore_readable`'s result (None: no step), each later, damaged step set aside (so that the
  run saves that step again when it reaches it) and named in a line."""
  restored, damaged = restore_readable(manager, abstract_params, abstract_opt_state)
  moved = checkpoint_integrity.set_aside(manager, [error.step for error in damaged])
  for error, path in zip(damaged, moved):
    if jax.process_index() == 0:
      print(f"checkpoint step {error.step} in {manager.directory} is unreadable ({error.damage}); "
            f"resuming from step {restored[0]} (step {error.step} kept as {path.name})", flush=True)
  return restored


def save_params(directory, params):
  """Writes a params-only orbax checkpoint (the format INITIAL_CHECKPOINT_PATH and evaluation read)."""
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(storage.absolute(directory), params)
  checkpointer.wait_until_finished()


def check_directory(path, what: str) -> None:
  """Refuses `path` (`what`: the flag or macro that gave it) when it is no directory: missing, or a file."""
  if not storage.is_dir(path):
    if storage.exists(path):
      raise NotADirectoryError(f"{what} {path} is a file, not a directory")
    raise FileNotFoundError(f"{what} {path} does not exist")


def params_location(checkpoint_dir, what: str = "checkpoint directory") -> str:
  """The params directory inside a model dir, a checkpoints dir, a step dir or a params-only dir;
  an error names `what` (the flag or macro that gave the path) when there is none."""
  path = storage.absolute(checkpoint_dir)
  check_directory(path, what)
  names = storage.list_names(path)
  if CHECKPOINTS_SUBDIR in names and storage.is_dir(storage.join(path, CHECKPOINTS_SUBDIR)):
    path = storage.join(path, CHECKPOINTS_SUBDIR)
    names = storage.list_names(path)
  steps = [int(name) for name in names if name.isdigit() and storage.is_dir(storage.join(path, name, "params"))]
  if steps:
    path = storage.join(path, str(max(steps)))
    names = storage.list_names(path)
  # A step directory names its params item even when it is gone, so that loading says so.
  if "params" in names or _step_of(storage.join(path, "params")) is not None:
    return storage.join(path, "params")
  # Any orbax file marks a params-only checkpoint, so that a damaged one is named as damaged.
  if {"_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt"} & set(names):
    return path
  raise FileNotFoundError(f"{what} {checkpoint_dir} holds no checkpoint: no checkpoints/<step>/params (a run "
                          "that never saved a step?), no params-only checkpoint, no Hugging Face config.json, "
                          "no t5x checkpoint_<step>/")


def _saved_config(location: str) -> T5Config | None:
  """The t5_config.json nearest above a params directory: MODEL_DIR/checkpoints/<step>/params
  finds MODEL_DIR's, a converted OUT/params finds OUT's."""
  directory = location
  for _ in range(4):
    config = read_model_config(directory)
    if config is not None:
      return config
    directory = storage.parent(directory)
  return None


def check_checkpoint(path, what: str) -> None:
  """Refuses, in one line naming `what` (the flag or macro that gave it) and `path`, a path where
  `load_params` would find no checkpoint (a missing folder, a file, a MODEL_DIR never trained) or a
  Hugging Face file cut short: a command checks this before it prepares any data, reading only
  directory listings and headers."""
  storage.check_reachable(path, what)  # a bucket's own refusal, not "does not exist"
  if is_hf_checkpoint(path):
    checkpoint_import.check_safetensors(path)
  elif t5x_checkpoint.t5x_step_dir(path) is None:
    params_location(path, what)


def is_hf_checkpoint(path) -> bool:
  """A Hugging Face directory is one with a config.json (its weights must then be safetensors)."""
  return storage.is_file(storage.join(path, "config.json"))


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


def check_run_model(model_dir, model_config: T5Config) -> None:
  """Refuses to resume `model_dir` with another architecture than the one its t5_config.json
  records, naming each differing field with both values, before anything in it changes (a restore
  would fail deep in orbax, after the run's records were rewritten to claim the new model)."""
  recorded = read_model_config(model_dir)
  if recorded is None:
    return
  differing = [f"{name}: the run's {getattr(recorded, name)!r}, MODEL_CONFIG {getattr(model_config, name)!r}"
               for name in ARCHITECTURE_FIELDS if getattr(recorded, name) != getattr(model_config, name)]
  if differing:
    raise ValueError(f"MODEL_DIR {model_dir} holds a run of another model ({'; '.join(differing)}); "
                     "include the run's model gin file, or name a new MODEL_DIR")


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


def placement(tree, config: T5Config, partitioner: partitioning.Partitioner | None = None):
  """Shardings for a parameter tree: the partitioner's, else this host's first device."""
  if partitioner is None:
    single = SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda _: single, tree)
  return partitioner.param_shardings(tree, config)


def load_params(path, model_config: T5Config | None = None,
                partitioner: partitioning.Partitioner | None = None) -> tuple[T5Config, dict]:
  """(T5Config, params) of any checkpoint this project reads, placed by `partitioner` (None: on
  one device).

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
    return config, jax.device_put(params, placement(params, config, partitioner))
  t5x_step = t5x_checkpoint.t5x_step_dir(path)
  if t5x_step is not None:
    config = agreed_config(t5x_step, None, model_config)
    _check_shapes(t5x_step, t5x_checkpoint.t5x_shapes(t5x_step), config)  # before reading any array
    params = t5x_checkpoint.load_t5x(t5x_step)
    return config, jax.device_put(params, placement(params, config, partitioner))
  location = params_location(path)
  config = agreed_config(path, _saved_config(location), model_config)
  # The item's own handler: a training step's `params` is one item of a composite checkpoint,
  # whose step-level metadata a StandardCheckpointer would look for (and warn about) in it.
  handler = ocp.StandardCheckpointHandler()
  step = _step_of(location)
  naming_damage = functools.partial(checkpoint_integrity.naming_damage, location, step, {location: "_METADATA"})
  with naming_damage():
    shapes = handler.metadata(epath.Path(location)).tree
  _check_shapes(path, shapes, config)
  target = partitioning.with_shardings(shapes, placement(shapes, config, partitioner))
  with naming_damage():
    params = handler.restore(epath.Path(location), args=ocp.args.StandardRestore(target))
  checkpoint_integrity.check_values(location, step, params,
                                    checkpoint_integrity.recorded_params_checksums(location, step))
  return config, params


def load_reward_model(path, what: str, partitioner: partitioning.Partitioner | None = None):
  """`load_params` of a reward model (its own architecture); one without a head is refused,
  named as `what` (the gin macro that gave `path`)."""
  config, params = load_params(path, None, partitioner)
  if reward_lib.HEAD not in params:
    raise ValueError(f"{what} {path} has no '{reward_lib.HEAD}': train it with OBJECTIVE='pairwise' or 'listwise'")
  return config, params


class PreemptionGuard:
  """Turns SIGTERM (TPU preemption, `kill`) and SIGINT (Ctrl-C) into a flag a long loop checks at
  its boundaries (a training step, a batch of items), so that it stops there with what it did kept:
  training saves a checkpoint, evaluation keeps its finished lines, generation its finished inputs.

  With several processes, jax's own preemption sync point decides (orbax asks it when the guard has
  a checkpoint manager), so that every host stops after the same step or batch: the loop passes
  `should_stop` its step (batch) number, the same sequence on every process. One process installs
  plain signal handlers.
  `signal_number` is the signal received (None when none was), for the script's exit code;
  `stopping` says in the log line what the loop does on it.
  """

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  class Interrupted(Exception):
    """A loop stopped at a boundary on the guard's signal: `signal_number`, and `line`, what a
    script prints (what was kept, how to resume; gin may add to the message, never to `line`).
    Scripts exit 128 + the signal's number."""

    def __init__(self, signal_number: int, line: str):
      super().__init__(line)
      self.signal_number = signal_number
      self.line = line

  def __init__(self, manager=None, stopping="saving a checkpoint at the end of this step, then exiting"):
    self._manager = manager
    self._stopping = stopping
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
    # The project's own line (not a log record); os.write, as a print interrupted mid-write would fail.
    os.write(sys.stderr.fileno(), f"{signal.Signals(signum).name} received: {self._stopping}\n".encode())
    self.signal_number = signum

  def should_stop(self, step=None) -> bool:
    """Whether the loop stops here. With several processes, only a call given `step` asks the
    sync point (every process must ask at every step); without it, whether one already said so."""
    if self.signal_number is None and step is not None and jax.process_count() > 1:
      reached = (self._manager.reached_preemption(step) if self._manager is not None
                 else multihost_utils.reached_preemption_sync_point(step))
      if reached:
        self.signal_number = signal.SIGTERM  # jax's sync point: some host was preempted
    return self.signal_number is not None

  def interrupted(self, message: str) -> "PreemptionGuard.Interrupted":
    """The exception a loop stopped by this guard's signal raises: "SIGINT: " + message."""
    return self.Interrupted(self.signal_number, f"{signal.Signals(self.signal_number).name}: {message}")


def write_model_config(directory: str, config: T5Config) -> str:
  """Writes `config` as JSON to `directory/t5_config.json` (whole); returns the path."""
  path = storage.join(directory, CONFIG_FILE)
  storage.write_text(path, json.dumps(dataclasses.asdict(config), indent=2) + "\n")
  return path


def read_model_config(directory: str) -> T5Config | None:
  """The T5Config saved beside a checkpoint (local or in a bucket), or None when there is none."""
  path = storage.join(directory, CONFIG_FILE)
  if not storage.exists(path):
    return None
  fields = json.loads(storage.read_text(path))
  known = {field.name for field in dataclasses.fields(T5Config)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"{path}: unknown T5Config field(s) {unknown}")
  return T5Config(**fields)


BEST_SUBDIR = run_dir.BEST  # MODEL_DIR/best/<step>/params: the best evaluation's checkpoint


def best_checkpoint_manager(model_dir, mode: str) -> ocp.CheckpointManager:
  """A manager of `model_dir`/best keeping one checkpoint, the best by its recorded "value".

  Orbax keeps each step's metrics beside it (best_fn, best_mode), so a restarted run reads the
  best step and value back from disk. It holds parameters only: evaluation's `load_params`
  reads MODEL_DIR/best like any step directory; resuming never looks here.
  """
  options = ocp.CheckpointManagerOptions(max_to_keep=1, best_fn=lambda record: record["value"],
                                         best_mode=mode, keep_checkpoints_without_metrics=False,
                                         create=True)
  return ocp.CheckpointManager(storage.absolute(run_dir.RunDir(model_dir).best),
                               options=options, item_names=("params",))


def save_best(manager, step, params, record: dict) -> None:
  """Saves `params` as the best checkpoint with `record` ({"value": ..., and what it means}) and
  the parameters' checksums (load_params verifies them), and waits: the run's latest checkpoint
  of the same step must never be on disk before its best."""
  manager.save(int(step), args=ocp.args.Composite(params=ocp.args.StandardSave(params)),
               metrics={**record, PARAMS_CHECKSUMS: checkpoint_integrity.checksums(params)}, force=True)
  manager.wait_until_finished()


def recorded_best(manager) -> tuple[int, dict] | None:
  """(step, record) of the best checkpoint in `manager`, None when it holds none."""
  step = manager.best_step()
  if step is None:
    return None
  record = dict(manager.metrics(step))
  record.pop(PARAMS_CHECKSUMS, None)
  return step, record
