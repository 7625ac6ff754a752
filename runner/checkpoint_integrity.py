"""Integrity of checkpoints: damage named in one line, checksums of the saved values, a full disk.

A missing or truncated file of a step raises CheckpointDamagedError naming the step and the file,
before orbax reads it or from what its failed read says (`naming_damage`); every array's
checksum is saved with its step and checked when it is read back (`checksums`, `check_values`),
so that a flipped bit that every file format reads is found; a step that cannot be written for
want of space raises CheckpointWriteError, one line, its partial files removed.
"""
import contextlib
import functools
import itertools
import json
import re
import shutil
import threading
import time

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec

import storage

# The metadata file each item's orbax handler writes (StandardSave: _METADATA, JsonSave: metadata).
METADATA_FILES = {"params": "_METADATA", "opt_state": "_METADATA", "data": "metadata"}
PARAMS_CHECKSUMS = "params_checksums"  # the best checkpoint's metrics entry that holds them


class CheckpointDamagedError(ValueError):
  """A checkpoint file is missing or unreadable. `step` is its step (None for a params-only
  checkpoint), `damage` names the file (or directory) and what is wrong with it."""

  def __init__(self, checkpoint, step, damage):
    self.step, self.damage = step, damage
    super().__init__(f"checkpoint {checkpoint if step is None else f'step {step}'} is damaged: {damage}")


class NoReadableStepError(CheckpointDamagedError):
  """No step of a run's checkpoints reads: `errors` holds each step's CheckpointDamagedError,
  latest first, and the message names every step with what is wrong with it (the paths relative
  to `directory`, to keep it one line); `step` and `damage` are the latest step's, as callers of
  one damaged step read them."""

  def __init__(self, directory, errors):
    self.errors = list(errors)
    self.step, self.damage = self.errors[0].step, self.errors[0].damage
    inside = f"{str(directory).rstrip('/')}/"
    ValueError.__init__(self, f"no checkpoint step of {directory} reads: " + "; ".join(
        f"step {error.step}: {error.damage.replace(inside, '')}" for error in self.errors))


# What a TensorStore read failure says about the file it read (its spec dump, after " [", cut off):
# a file it could not decode, else the array it could not read from an OCDBT database directory.
_LOCAL_FILE = re.compile(r'(?:reading|decoding|opening) local file "(?P<file>[^"]*[^"/])": (?P<why>.*)')
_OCDBT_READ = re.compile(r'Error reading "(?P<key>[^"]+)" in OCDBT database at [^"]*"(?P<database>[^"]+)": '
                         r'(?P<why>.*)')
_TENSORSTORE_STATUS = re.compile(r"^(?P<code>NOT_FOUND|DATA_LOSS|OUT_OF_RANGE|FAILED_PRECONDITION): (?P<why>.*)")
_SPEC_DUMP = " [tensorstore_spec"
_SHORT = 120  # characters of a library's reason kept in the one line


def _missing_or_truncated(item_dir: epath.Path, metadata_file: str) -> str | None:
  """'<path>: <what is wrong>' for a file an orbax item needs that is missing or cut short, else None."""
  if not item_dir.exists():
    return f"{item_dir}: missing"
  metadata = item_dir / metadata_file
  if not metadata.exists():
    return f"{metadata}: missing"
  try:
    json.loads(metadata.read_text())
  except ValueError:
    return f"{metadata}: truncated (not valid JSON)"
  # Arrays live in per-process OCDBT databases that the item's manifest indexes; an item
  # without arrays (an empty optimizer state) has neither.
  manifest = item_dir / "manifest.ocdbt"
  if list(item_dir.glob("ocdbt.process_*")) and not manifest.exists():
    return f"{manifest}: missing"
  return None


def _failed_read(error: BaseException, item_dirs) -> str | None:
  """'<path>: <reason>' from a TensorStore read failure anywhere in `error`'s chain, else None."""
  while error is not None:
    text = str(error).split(_SPEC_DUMP, 1)[0].strip()
    local_file = _LOCAL_FILE.search(text)
    if local_file:
      return f"{local_file['file']}: {local_file['why'].strip()[:_SHORT]}"
    read = _OCDBT_READ.search(text)
    if read:
      return f"{read['database'].rstrip('/')}: cannot read {read['key']}: {read['why'].strip()[:_SHORT]}"
    status = _TENSORSTORE_STATUS.match(text)
    if status:
      where = next((d for d in map(str, item_dirs) if d in text), item_dirs[0])
      return f"{where}: {status['code']}: {status['why'].strip()[:_SHORT]}"
    error = error.__cause__ or error.__context__
  return None


@contextlib.contextmanager
def naming_damage(checkpoint, step, items: dict):
  """Raises CheckpointDamagedError for a missing or truncated file of `items` ({item directory:
  its metadata file name}), before reading (orbax reads some items without their metadata, so
  that a step it restores might not load elsewhere) or when an orbax failure shows one; any
  other failure (a shape that does not fit, say) passes through unchanged."""
  items = {epath.Path(item_dir): name for item_dir, name in items.items()}
  damage = next(filter(None, itertools.starmap(_missing_or_truncated, items.items())), None)
  if damage is not None:
    raise CheckpointDamagedError(checkpoint, step, damage)
  try:
    yield
  except Exception as error:  # pylint: disable=broad-except  # orbax raises a bare Exception for a bad read
    damage = _failed_read(error, list(items))
    if damage is None:
      raise
    raise CheckpointDamagedError(checkpoint, step, damage) from error


def _bits(leaf):
  """A leaf's values as uint32 words (a 16-bit value in the low half): what a file stores of it."""
  width = leaf.dtype.itemsize * 8
  if width == 32:
    return jax.lax.bitcast_convert_type(leaf, jnp.uint32)
  return jax.lax.bitcast_convert_type(leaf, jnp.dtype(f"uint{width}")).astype(jnp.uint32)


def _leaf_checksum(leaf):
  """Two uint32 sums of the leaf's words, each weighted by an odd number that depends on its
  position (arithmetic mod 2^32): any one flipped bit changes both, wherever it is, and the sums
  do not depend on how the array is sharded, so a step saved on one mesh verifies on another."""
  index = jnp.zeros(leaf.shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(leaf.ndim)):
    index = index + jax.lax.broadcasted_iota(jnp.uint32, leaf.shape, axis) * jnp.uint32(stride % 2**32)
    stride *= leaf.shape[axis]
  bits = _bits(leaf)
  return jnp.stack([jnp.sum(bits * (2 * index + 1), dtype=jnp.uint32),
                    jnp.sum(bits * (index * jnp.uint32(2654435761) | 1), dtype=jnp.uint32)])


@functools.cache
def _checksums_on(mesh):
  """The jitted checksums of a tree on `mesh`, replicated, so that every host reads them whole."""
  replicated = None if mesh is None else NamedSharding(mesh, PartitionSpec())
  return jax.jit(lambda tree: jax.tree.map(_leaf_checksum, tree), out_shardings=replicated)


def checksums(tree) -> dict[str, str]:
  """{leaf path: checksum} of a tree of arrays (sharded over any mesh, any number of hosts)."""
  meshes = {leaf.sharding.mesh for leaf in jax.tree.leaves(tree) if isinstance(leaf.sharding, NamedSharding)}
  sums = jax.device_get(_checksums_on(meshes.pop() if len(meshes) == 1 else None)(tree))
  return {jax.tree_util.keystr(path): "%08x%08x" % tuple(int(v) for v in value)
          for path, value in jax.tree_util.tree_flatten_with_path(sums)[0]}


class CheckpointWriteError(OSError):
  """A step could not be written (a full disk): one line; the steps saved before it are intact."""


# What orbax's failed write says when the disk or quota is full (TensorStore's status, the OS's).
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "RESOURCE_EXHAUSTED")


def says_no_space(text: str) -> bool:
  """Whether an error's text is a write refused for want of space."""
  return any(said in text for said in _NO_SPACE)


def _partial_steps(manager) -> list[epath.Path]:
  """Step directories orbax had not finished writing (it renames `<step>.orbax-checkpoint-tmp*` when done)."""
  return [path for path in epath.Path(manager.directory).glob("*.orbax-checkpoint-tmp*")]


def orbax_threads() -> list[threading.Thread]:
  """The live threads of orbax's futures module (each writes part of a step), other than this one."""
  return [thread for thread in threading.enumerate()
          if type(thread).__module__.startswith("orbax.") and thread is not threading.current_thread()]


def _join_orbax_writers(timeout_s: float = 60.0) -> None:
  """orbax re-raises the first failed write while its other writes go on; files they write after
  the partial step is removed would bring it back. orbax's join re-raises its thread's error, so
  threading's join waits instead (the first error is named)."""
  deadline = time.monotonic() + timeout_s  # one wait in all (a thread may wait on a barrier no host reaches)
  for thread in orbax_threads():
    threading.Thread.join(thread, max(0.0, deadline - time.monotonic()))


def _not_written(manager, step, cause: str, remedy: str) -> CheckpointWriteError:
  saved = manager.all_steps()
  return CheckpointWriteError(
      f"checkpoint step {step} was not written: {cause}; "
      f"{'the steps saved before it are intact (latest: ' + str(max(saved)) + ')' if saved else 'no step is saved'}"
      f"; {remedy}")


def _no_space(manager, step, needed: str) -> CheckpointWriteError:
  return _not_written(manager, step, f"{manager.directory}: no space left on device{needed}",
                      "free some space (or name a MODEL_DIR elsewhere) and rerun to resume")


@contextlib.contextmanager
def naming_write_failure(manager, step):
  """Turns orbax's failure to write `step` (met while saving the next step, checking on the writes
  or waiting for them) into CheckpointWriteError, one line naming the step and the cause: a full
  disk (the step's partial files are removed) or storage that cannot be reached (a bucket gone)."""
  try:
    yield
  except Exception as error:  # pylint: disable=broad-except  # orbax re-raises its thread's error as it was
    if isinstance(error, CheckpointWriteError):
      raise
    if not says_no_space(str(error)):
      try:
        with storage.naming_failures(manager.directory):  # re-raises anything else as it was
          raise error
      except storage.StorageError as unreachable:
        raise _not_written(manager, step, str(unreachable),
                           "rerun the same command to resume once the storage answers") from error
    failed = re.search(r"/(\d+)\.orbax-checkpoint-tmp", str(error))
    _join_orbax_writers()
    if jax.process_index() == 0:
      for partial in _partial_steps(manager):
        storage.remove_tree(str(partial))
    raise _no_space(manager, int(failed[1]) if failed else step, "") from None


def check_space(manager, step, trees) -> None:
  """Refuses to start writing a step that cannot fit on a local disk: its arrays' bytes (an upper
  bound: orbax compresses them) against the free space. A bucket has no such limit."""
  directory = str(manager.directory)
  if storage.is_bucket(directory):
    return
  needed = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(trees))
  free = shutil.disk_usage(directory).free
  if needed > free:
    raise _no_space(manager, step, f" (the step needs up to {needed / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free)")


def check_values(item_dir, step, tree, recorded: dict | None) -> None:
  """Raises CheckpointDamagedError when an array of `tree`, read from `item_dir`, differs from its
  `recorded` checksum; an item saved without checksums (before they were recorded) is taken as it reads."""
  if recorded is None:
    return
  found = checksums(tree)
  changed = sorted(name for name in recorded if found.get(name) != recorded[name])
  if changed:
    raise CheckpointDamagedError(storage.parent(str(item_dir)), step,
                                 f"{item_dir}: the values of {len(changed)} array(s) differ from the "
                                 f"checksums saved with the step ({changed[0]}{', ...' if len(changed) > 1 else ''})")


def verify(step_dir, step, restored) -> None:
  """`check_values` of each item of a restored training step."""
  recorded = restored.data.get("checksums") or {}
  for item in ("params", "opt_state"):
    check_values(step_dir / item, step, getattr(restored, item), recorded.get(item))


def recorded_params_checksums(location: str, step: int | None) -> dict | None:
  """The checksums saved with the params directory `location`: a training step's (its `data`
  item) or the best checkpoint's (its orbax metrics), of step `step`; None for any other checkpoint."""
  if storage.name(location) != "params":
    return None
  step_dir = storage.parent(location)
  for record_file, read in ((storage.join(step_dir, "data", METADATA_FILES["data"]),
                             lambda record: record.get("checksums", {}).get("params")),
                            (storage.join(step_dir, "metrics", "metrics"),
                             lambda record: record.get(PARAMS_CHECKSUMS))):
    if storage.exists(record_file):
      try:
        return read(json.loads(storage.read_text(record_file)))
      except ValueError as error:
        raise CheckpointDamagedError(step_dir, step, f"{record_file}: not valid JSON ({error})") from None
  return None


def step_dir(manager, step) -> epath.Path:
  return ocp.step.build_step_path(manager.directory, ocp.step.standard_name_format(), step)


def set_aside(manager, steps) -> list[epath.Path]:
  """Renames the directories of damaged `steps` to `<step>.damaged` (orbax ignores them there),
  so that training can save those steps again while their files stay for a look; returns the new paths."""
  moved = []
  for step in steps:
    source = step_dir(manager, step)
    target = source.parent / f"{source.name}.damaged"
    for number in itertools.count(1):  # a step damaged once before keeps its earlier copy
      if not target.exists():
        break
      target = source.parent / f"{source.name}.damaged-{number}"
    if jax.process_index() == 0:
      storage.move(source, target)
    moved.append(target)
  if jax.process_count() > 1:  # every host's manager must see the steps gone
    multihost_utils.sync_global_devices("checkpoints.set_aside")
  manager.reload()
  return moved
