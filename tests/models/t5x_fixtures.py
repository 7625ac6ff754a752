"""t5x checkpoints written from their layout with TensorStore and msgpack, as t5x writes them, not
through this project's loader: the legacy layout, orbax's first layout (msgpack with placeholders)
and orbax's current one (written by orbax, as t5x does today).

Each writer takes a parameter tree in t5x's (= this project's) naming, such as `random_params`, and
a step, and writes `model_dir/checkpoint_<step>/` with `{'target': params, 'state': {'step',
'param_states'}}`.
"""
import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
from flax import serialization
from flax import traverse_util

from models.config import T5Config
from models.network import init_params


def random_params(config: T5Config, seed: int) -> dict:
  """Random float32 parameters of `config` drawn with numpy on the network's shapes (eager flax
  initialisation takes seconds): matrices N(0, 1/rows), the query's also divided by head_dim as
  T5 folds attention's 1/sqrt(d) into it, norm scales around 1."""
  rng = np.random.default_rng(seed)
  shapes = traverse_util.flatten_dict(jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0))),
                                      sep="/")
  def draw(name, shape):
    if len(shape) == 1:
      return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    variance = 1.0 / shape[0] / (config.head_dim if name.endswith("query/kernel") else 1)
    return (rng.standard_normal(shape) * np.sqrt(variance)).astype(np.float32)
  drawn = {name: draw(name, leaf.shape) for name, leaf in shapes.items()}
  return traverse_util.unflatten_dict(drawn, sep="/")


def adafactor_like_states(params) -> dict:
  """Factored second moments (v_row, v_col) for matrices, v for vectors: the shapes t5x's Adafactor keeps."""
  def states(value):
    if value.ndim == 2:
      return {"v_row": np.full(value.shape[0], 0.5, np.float32),
              "v_col": np.full(value.shape[1], 0.25, np.float32)}
    return {"v": np.full(value.shape, 0.125, np.float32)}
  return jax.tree.map(states, params)


def _zarr_metadata(shape, chunks, dtype) -> dict:
  return {"shape": list(shape), "chunks": list(chunks), "compressor": {"id": "gzip"},
          "dtype": "bfloat16" if np.dtype(dtype).name == "bfloat16" else np.dtype(dtype).str}


def _write_zarr(directory, value, row_blocks=1) -> list[int]:
  """Writes a zarr array as `row_blocks` hosts would, each its rows as one chunk; returns the chunks."""
  value = np.asarray(value)
  chunks = (max(value.shape[0] // row_blocks, 1),) + value.shape[1:] if value.ndim else ()
  store = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(directory)},
                   "metadata": _zarr_metadata(value.shape, chunks, value.dtype)}, create=True).result()
  if value.ndim:
    for start in range(0, value.shape[0], chunks[0]):
      store[start:start + chunks[0]].write(value[start:start + chunks[0]]).result()
  else:
    store.write(value).result()
  return list(chunks)


def _flat(tree) -> dict:
  return traverse_util.flatten_dict(tree, sep="/")


def write_legacy(model_dir, step, params, param_states=None, dtype=np.float32, inline=(),
                 bucket_written=()):
  """t5x's Checkpointer: `checkpoint_<step>/checkpoint` msgpack {'version': 3, 'optimizer': ...} whose
  array leaves are TensorStore specs of zarr directories named `target.<path with dots>` (written in two
  row blocks, as two hosts of a partitioned array), relative to the step directory.

  Parameters named in `inline` are written into the msgpack itself (t5x does so for unpartitioned
  arrays); those in `bucket_written` get the spec of a checkpoint written to a bucket and copied here
  (a gcs kvstore with t5x's dummy bucket, the path beside it, as tensorstore < 0.1.14 wrote).
  `dtype` is the save dtype (t5x's `save_dtype`, bfloat16 to halve a checkpoint).
  """
  step_dir = model_dir / f"checkpoint_{step}"
  step_dir.mkdir(parents=True)
  tree = {"target": params, "state": {"param_states": param_states or {}}}
  written = {}
  for name, value in _flat(tree).items():
    value = np.asarray(value, dtype if name.startswith("target/") else None)
    relative = name.replace("/", ".")
    if name.removeprefix("target/") in inline:
      written[name] = value
      continue
    chunks = _write_zarr(step_dir / relative, value, row_blocks=2)
    spec = {"driver": "zarr", "dtype": np.dtype(value.dtype).name,
            "kvstore": {"driver": "file", "path": relative},
            "metadata": {"compressor": {"id": "gzip"}, "shape": list(value.shape), "chunks": chunks}}
    if name.removeprefix("target/") in bucket_written:  # as serialized before tensorstore 0.1.14
      written[name] = dict(spec, kvstore={"driver": "gcs", "bucket": "t5x-dummy-bucket"}, path=relative)
    else:  # as t5x serializes a ts.Spec into msgpack
      written[name] = ts.Spec(spec).to_json()
  contents = traverse_util.unflatten_dict(written, sep="/")
  contents.setdefault("state", {})["step"] = np.int32(step)
  index = serialization.msgpack_serialize({"version": 3, "optimizer": contents})
  (step_dir / "checkpoint").write_bytes(index)
  return step_dir


def write_orbax_msgpack(model_dir, step, params, param_states=None):
  """orbax's first layout, as t5x's OrbaxCheckpointManagerInterface wrote it before orbax recorded
  `_METADATA`: `checkpoint_<step>/state/checkpoint`, msgpack of the tree itself with a
  `PLACEHOLDER://<name>` leaf for each array, stored in the zarr directory `state/<name>`."""
  state_dir = model_dir / f"checkpoint_{step}" / "state"
  state_dir.mkdir(parents=True)
  tree = {"target": params, "state": {"param_states": param_states or {}}}
  written = {}
  for name, value in _flat(tree).items():
    relative = name.replace("/", ".")
    _write_zarr(state_dir / relative, value)
    written[name] = f"PLACEHOLDER://{relative}"
  contents = traverse_util.unflatten_dict(written, sep="/")
  contents.setdefault("state", {})["step"] = np.int32(step)
  (state_dir / "checkpoint").write_bytes(serialization.msgpack_serialize(contents))
  return state_dir.parent


def write_orbax(model_dir, step, params, param_states=None):
  """t5x's OrbaxCheckpointManagerInterface today: an orbax CheckpointManager with steps named
  `checkpoint_<step>` and the train state as the item `state`, an OCDBT PyTree."""
  manager = ocp.CheckpointManager(
      model_dir, item_handlers={"state": ocp.PyTreeCheckpointHandler(use_ocdbt=True)},
      options=ocp.CheckpointManagerOptions(step_prefix="checkpoint", create=True))
  tree = {"target": jax.tree.map(jax.numpy.asarray, params),  # t5x saves its train state's jax.Arrays
          "state": {"step": np.int32(step), "param_states": param_states or {}}}
  manager.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(tree)))
  manager.wait_until_finished()
  manager.close()
  return model_dir / f"checkpoint_{step}"
