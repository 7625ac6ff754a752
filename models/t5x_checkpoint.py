"""Read t5x checkpoints, local or in a bucket (`gs://`): the legacy layout and the orbax layout.

A t5x model directory holds one `checkpoint_<step>/` directory per saved step, in one of two layouts
of the same tree, `{'target': parameters, 'state': {'step', 'param_states'}}`:

- legacy (t5x's `Checkpointer`): `checkpoint_<step>/checkpoint`, a msgpack file
  `{'version': 3, 'optimizer': tree}` (`tree` itself in version 0). Each leaf is an array written
  inline or a TensorStore spec of a zarr array beside the file, in a directory named after the
  parameter with dots (`target.encoder.layers_0.attention.query.kernel/`) whose path is relative to
  the step directory; every host writes its own chunks of a partitioned array into it.
- orbax (t5x's `OrbaxCheckpointManagerInterface`): `checkpoint_<step>/state/`, an orbax PyTree:
  since orbax wrote a `_METADATA` file (OCDBT in t5x since 2024) orbax itself reads it; before,
  `state/checkpoint` is msgpack with a `PLACEHOLDER://<name>` leaf for each array stored in the
  zarr directory `state/<name>/`, read here like the legacy layout.

The parameters are `target`. t5x's T5.1.1 network (`examples/t5/network.py`) has this project's
parameter paths and layouts (attention kernels [embed, heads * head_dim], `relpos_bias` [heads,
buckets]), so the tree maps by rule: `target/<path>` is `<path>`. Parameters come back as float32
numpy arrays (a bfloat16 checkpoint converts exactly); the optimizer state (`state`) is read only
when asked for, as stored. Paths go through etils.epath and TensorStore's kvstore URLs, so a
bucket reads like a local directory.
"""
import os
import re

import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from etils import epath
from flax import serialization
from flax import traverse_util

_INDEX_FILE = "checkpoint"  # the msgpack file of the legacy layout (and of orbax's first layout)
_ORBAX_ITEM = "state"  # the orbax layout's item directory inside a step directory
_PARAMS, _OPTIMIZER_STATE = "target", "state"
_ORBAX_METADATA = "_METADATA"
_PLACEHOLDER = "PLACEHOLDER://"
_SPEC_KEYS = frozenset({"driver", "kvstore", "metadata"})  # what t5x takes for a serialized ts.Spec
_STEP_DIR = re.compile(r"checkpoint_(\d+)")  # t5x's own pattern; `checkpoint_<step>.tmp-*` is unfinished


class T5xCheckpointError(ValueError):
  pass


def _is_step_dir(path: epath.Path) -> bool:
  # As t5x restores: a `state/` item first; a `checkpoint` file beside orbax's `_METADATA` is orbax's.
  return (path / _ORBAX_ITEM).is_dir() or (
      (path / _INDEX_FILE).is_file() and not (path / _ORBAX_METADATA).exists())


def t5x_step_dir(path) -> epath.Path | None:
  """The step directory of the t5x checkpoint at `path`: `path` itself, or the latest
  `checkpoint_<step>/` of a t5x model directory; None when `path` holds no t5x checkpoint."""
  path = epath.Path(path)
  if not path.is_dir():
    return None
  if _is_step_dir(path):
    return path
  steps = {int(m[1]): child for child in path.iterdir()
           if (m := _STEP_DIR.fullmatch(child.name)) and _is_step_dir(child)}
  return steps[max(steps)] if steps else None


def _kvstore_url(directory: epath.Path) -> str:
  location = os.fspath(directory)
  return (location if "://" in location else "file://" + os.path.abspath(location)).rstrip("/") + "/"


def _is_spec(node) -> bool:
  return isinstance(node, dict) and _SPEC_KEYS <= node.keys()


class _MsgpackIndexed:
  """A layout whose tree is a msgpack file: leaves inline, or zarr arrays named by a spec or a placeholder."""

  def __init__(self, index_file: epath.Path, tree: dict):
    self.index_file = index_file
    self.tree = tree

  def leaves(self, section: str) -> dict:
    """{path: numpy array or TensorStore spec} of one section of the tree (`target` or `state`)."""
    flat = traverse_util.flatten_dict(self.tree.get(section, {}), sep="/",
                                      is_leaf=lambda _, node: _is_spec(node))
    return {name: self._locate(f"{section}/{name}", leaf) for name, leaf in flat.items() if leaf is not None}

  def _locate(self, name: str, leaf):
    base = self.index_file.parent
    if _is_spec(leaf):
      # tensorstore >= 0.1.14 keeps the relative path in the kvstore, older versions beside it; the
      # stored driver (file, gfile, gcs with a dummy bucket) is where it was written, not where it is.
      kvstore = leaf["kvstore"] if isinstance(leaf["kvstore"], dict) else {}
      relative = kvstore.get("path", leaf.get("path"))
      if not isinstance(relative, str):
        raise T5xCheckpointError(f"{self.index_file}: parameter {name!r}: TensorStore spec without a path")
      return {"driver": leaf["driver"], "kvstore": _kvstore_url(base / relative.strip("/"))}
    if isinstance(leaf, str) and leaf.startswith(_PLACEHOLDER):
      return {"driver": "zarr", "kvstore": _kvstore_url(base / leaf[len(_PLACEHOLDER):])}
    return np.asarray(leaf)

  def _open(self, section: str, leaves: dict) -> dict:
    futures = {name: ts.open(leaf, open=True) for name, leaf in leaves.items() if isinstance(leaf, dict)}
    stores = {}
    for name, future in futures.items():
      try:
        stores[name] = future.result()
      except ValueError as e:
        reason = str(e).split(" [tensorstore_spec=")[0]  # the spec repeats what the message says
        raise T5xCheckpointError(f"{self.index_file}: parameter '{section}/{name}': cannot open its "
                                 f"array {leaves[name]['kvstore']}: {reason}") from None
    return stores

  def shapes(self, section: str) -> dict:
    leaves = self.leaves(section)
    stores = self._open(section, leaves)
    return {name: tuple(stores[name].shape if name in stores else leaf.shape)
            for name, leaf in leaves.items()}

  def read(self, section: str) -> dict:
    leaves = self.leaves(section)
    stores = self._open(section, leaves)
    reads = {name: store.read() for name, store in stores.items()}  # all in flight at once
    return {name: np.asarray(reads[name].result()) if name in reads else leaf
            for name, leaf in leaves.items()}


class _OrbaxPyTree:
  """The orbax layout since orbax records `_METADATA`: orbax reads it, one section at a time."""

  def __init__(self, directory: epath.Path):
    self.directory = directory
    self._metadata = self._with_handler(lambda handler: handler.metadata(directory).tree)

  @staticmethod
  def _with_handler(use):
    handler = ocp.PyTreeCheckpointHandler()
    try:
      return use(handler)
    finally:
      handler.close()

  def shapes(self, section: str) -> dict:
    return {name: tuple(leaf.shape) for name, leaf in
            traverse_util.flatten_dict(self._metadata.get(section, {}), sep="/").items()}

  def read(self, section: str) -> dict:
    if section not in self._metadata:
      return {}
    item = {section: jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype),
                                  self._metadata[section])}
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    args = ocp.args.PyTreeRestore(item=item, restore_args=restore_args, partial_restore=True)
    restored = self._with_handler(lambda handler: handler.restore(self.directory, args=args))
    return traverse_util.flatten_dict(restored[section], sep="/")


def _open_layout(step_dir: epath.Path):
  state_dir = step_dir / _ORBAX_ITEM
  if state_dir.is_dir():
    if (state_dir / _ORBAX_METADATA).exists():
      return _OrbaxPyTree(state_dir)
    index_file = state_dir / _INDEX_FILE
  else:
    index_file = step_dir / _INDEX_FILE
  if not index_file.is_file():
    raise T5xCheckpointError(f"{step_dir}: neither orbax's {_ORBAX_ITEM}/{_ORBAX_METADATA} nor a "
                             f"{_INDEX_FILE} msgpack file")
  try:
    contents = serialization.msgpack_restore(index_file.read_bytes())
  except (ValueError, TypeError) as e:
    raise T5xCheckpointError(f"{index_file}: not a t5x msgpack checkpoint: {e}") from None
  tree = contents.get("optimizer", contents) if isinstance(contents, dict) else None
  if not isinstance(tree, dict) or _PARAMS not in tree:
    raise T5xCheckpointError(f"{index_file}: no '{_PARAMS}' parameter tree")
  return _MsgpackIndexed(index_file, tree)


def _step_dir_or_error(path) -> epath.Path:
  step_dir = t5x_step_dir(path)
  if step_dir is None:
    raise T5xCheckpointError(f"{path}: no t5x checkpoint (a checkpoint_<step>/ directory with a "
                             f"{_INDEX_FILE} file or a {_ORBAX_ITEM}/ directory)")
  return step_dir


def t5x_shapes(path) -> dict:
  """{parameter path: jax.ShapeDtypeStruct(float32)}, nested, of the t5x checkpoint at `path`, read
  from its metadata alone (what `load_t5x` would return, without reading an array)."""
  shapes = _open_layout(_step_dir_or_error(path)).shapes(_PARAMS)
  return traverse_util.unflatten_dict(
      {name: jax.ShapeDtypeStruct(shape, np.float32) for name, shape in shapes.items()}, sep="/")


def load_t5x(path, optimizer_state: bool = False):
  """The parameters (nested dict of float32 numpy arrays) of the t5x checkpoint at `path`, a step
  directory or a model directory (its latest step); with `optimizer_state`, (parameters, state):
  t5x's `state` tree (`step`, `param_states`) as stored."""
  layout = _open_layout(_step_dir_or_error(path))
  arrays = layout.read(_PARAMS)
  if not arrays:
    raise T5xCheckpointError(f"{path}: the '{_PARAMS}' tree holds no parameter")
  params = traverse_util.unflatten_dict(
      {name: np.asarray(value, np.float32) for name, value in arrays.items()}, sep="/")
  if not optimizer_state:
    return params
  return params, traverse_util.unflatten_dict(layout.read(_OPTIMIZER_STATE), sep="/")
