"""The device mesh, logical-axis rules and shardings: t5x's partitioning on jax.sharding.

Parameters and activations carry logical axis names (`nn.with_logical_partitioning` and
`nn.with_logical_constraint` in models/network.py); a rule table maps them onto the mesh axes
`data` and `model`. Changing how a model is split is a gin binding of `LOGICAL_AXIS_RULES`
(gin/runs/*.gin bind it to `@partitioning.standard_logical_axis_rules()`, as t5x does) or of the
mesh shape, never code. Every jitted entry (train step, scoring, sampling) runs inside
`activate(mesh, rules)`, so the network's activation constraints resolve to mesh axes.
"""
import contextlib
import functools
import os

import flax.linen as nn
import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from models.config import T5Config
from models.network import Transformer
from runner import lost_host

# t5x's `standard_logical_axis_rules` for 1-D model parallelism: the batch over `data`,
# the wide dimensions over `model`, the model width and sequence axes replicated.
STANDARD_LOGICAL_AXIS_RULES = (
    ("batch", "data"),
    ("vocab", "model"),
    ("mlp", "model"),
    ("heads", "model"),
    ("joined_kv", "model"),
    ("embed", None),
    ("kv", None),
    ("length", None),
    ("relpos_buckets", None),
)



def standard_logical_axis_rules():
  """t5x's standard rules for 1-D model parallelism (the table above), for gin to bind."""
  return STANDARD_LOGICAL_AXIS_RULES


def as_rules(rules) -> tuple:
  """Rules as hashable tuples (gin hands over lists)."""
  return tuple(tuple(rule) for rule in rules)


@contextlib.contextmanager
def activate(mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES):
  """The mesh and the logical-axis rules for the jitted calls made inside (tracing reads both)."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(as_rules(rules)):
    yield


# The explicit way to join a run anywhere (a GPU cluster, several processes on one machine:
# scripts/launch_local.py sets them): the coordinator's host:port, the process count, this index.
COORDINATOR_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def _explicit_process(environ) -> dict:
  """jax.distributed.initialize's arguments from JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
  JAX_PROCESS_ID; {} when the address is unset (JAX then detects the cluster: `detected_cluster`)."""
  address, count, index = (environ.get(name, "").strip() for name in COORDINATOR_ENV)
  if not address:
    return {}
  if not count or not index:
    raise ValueError(f"JAX_COORDINATOR_ADDRESS is {address!r} but JAX_NUM_PROCESSES ({count!r}) and "
                     f"JAX_PROCESS_ID ({index!r}) must be set too, to whole numbers")
  try:
    count, index = int(count), int(index)
  except ValueError:
    raise ValueError(f"JAX_NUM_PROCESSES ({count!r}) and JAX_PROCESS_ID ({index!r}) must be whole "
                     "numbers") from None
  if not 0 <= index < count:
    raise ValueError(f"JAX_PROCESS_ID {index} is outside 0..{count - 1} (JAX_NUM_PROCESSES {count})")
  return {"coordinator_address": address, "num_processes": count, "process_id": index}


def detected_cluster():
  """The cluster jax.distributed.initialize() would join here, found by JAX's own detection: the
  first of its `ClusterEnv` kinds (Open MPI, SLURM, a GKE TPU slice, a Cloud TPU VM through its
  metadata server, Kubernetes) present, the opt-in ones (mpi4py) skipped as JAX skips them; or None.

  Cheap off a cluster: the TPU kinds look only where JAX found TPU chips and libtpu at import (no
  metadata query elsewhere), the others read environment variables. Like JAX, it reads os.environ.
  """
  from jax._src import clusters  # pylint: disable=g-import-not-at-top  # what initialize() runs
  return next((kind for kind in clusters.ClusterEnv._cluster_types  # pylint: disable=protected-access
               if not kind.opt_in_only_method and kind.is_env_present()), None)


def run_processes(environ=os.environ) -> tuple[int, str]:
  """(how many processes make the run this process would join, what says so): JAX_NUM_PROCESSES
  when a coordinator is named, else the detected cluster's count (a one-worker TPU VM: 1), else 1."""
  explicit = _explicit_process(environ)
  if explicit:
    return explicit["num_processes"], "JAX_NUM_PROCESSES"
  cluster = detected_cluster()
  return (cluster.get_process_count(), f"JAX's {cluster.__name__}") if cluster else (1, "no cluster detected")


def looks_multi_host(environ=os.environ) -> bool:
  """Whether this process is one of a multi-host run: a coordinator is named, or the cluster JAX
  detects (`detected_cluster`) has more than one process."""
  return bool(environ.get("JAX_COORDINATOR_ADDRESS")) or run_processes(environ)[0] > 1


def initialize_distributed(multi_host=None, environ=os.environ):
  """Joins the processes of a multi-host run; call before anything touches a device.

  `multi_host=None` detects it (`looks_multi_host`). JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES
  and JAX_PROCESS_ID name the run explicitly; otherwise jax.distributed.initialize() finds the
  coordinator itself through the cluster it detects (a Cloud TPU VM's metadata server, GKE, SLURM,
  Open MPI). On CPU the collectives between processes go over gloo (XLA's CPU client has none of its own).
  """
  if multi_host is None:
    multi_host = looks_multi_host(environ)
  if not multi_host or jax.distributed.is_initialized():
    return
  arguments = _explicit_process(environ)
  arguments["heartbeat_timeout_seconds"] = int(environ.get(lost_host.HEARTBEAT_TIMEOUT_ENV)
                                                or lost_host.DEFAULT_HEARTBEAT_TIMEOUT_S)
  # Only the CPU client reads it: harmless on TPU and GPU.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  lost_host.install(str(arguments.get("process_id", "")), str(arguments["heartbeat_timeout_seconds"]))
  jax.distributed.initialize(**arguments)


def resolve_mesh_shape(mesh_shape, device_count: int | None = None) -> tuple[int, int]:
  """(data, model) with a -1 replaced by the devices the other axis leaves (of `device_count`,
  default every device of every process)."""
  data, model = (int(size) for size in mesh_shape)
  if data == -1 and model == -1:
    raise ValueError("MESH_SHAPE: at most one of data and model may be -1")
  count = jax.device_count() if device_count is None else device_count
  if data == -1:
    data = max(count // model, 1)
  if model == -1:
    model = max(count // data, 1)
  return data, model


def create_mesh(data=-1, model=1, devices=None) -> Mesh:
  """A mesh with axes ('data', 'model'); a size of -1 takes the devices the other axis leaves."""
  devices = list(jax.devices() if devices is None else devices)
  count = len(devices)
  data, model = resolve_mesh_shape((data, model), count)
  if data * model != count:
    raise ValueError(f"create_mesh: data ({data}) x model ({model}) must equal the device count ({count})")
  # Auto axes: shardings are propagated by XLA from the annotations, as t5x's pjit did.
  return jax.make_mesh((data, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=devices)


@functools.lru_cache(maxsize=8)
def logical_param_specs(config: T5Config):
  """Logical PartitionSpecs of the Transformer's parameters, found without allocating them; kept
  per config, for the memory plan and the run ask for them in turn (a trace of the model each).
  Read-only: callers flatten it into dicts of their own."""
  ones = jnp.ones((1, 1), jnp.int32)
  boxed = jax.eval_shape(lambda: Transformer(config).init(jax.random.PRNGKey(0), ones, ones))
  return nn.get_partition_spec(boxed)["params"]


def param_shardings(params, config: T5Config, mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES):
  """NamedShardings for `params` (arrays or shape structs) on `mesh`.

  Transformer parameters follow their logical axes; any other leaf (a reward head) is replicated.
  """
  logical = flax.traverse_util.flatten_dict(logical_param_specs(config))
  flat = flax.traverse_util.flatten_dict(params)
  shardings = {}
  for path, leaf in flat.items():
    spec = nn.logical_to_mesh_axes(tuple(logical.get(path, PartitionSpec())), rules)
    shardings[path] = NamedSharding(mesh, _dividing(spec, leaf.shape, mesh))
  return flax.traverse_util.unflatten_dict(shardings)


def _dividing(spec: PartitionSpec, shape, mesh: Mesh) -> PartitionSpec:
  """`spec` with every dimension that its mesh axes do not divide kept whole: jax splits arrays
  evenly only, and T5.1.1 small's 6 heads (its relative position biases) do not split 4 ways."""
  return PartitionSpec(*(axes if axes is None or shape[dim] % _ways(mesh, axes) == 0 else None
                         for dim, axes in enumerate(spec)))


def _ways(mesh: Mesh, axes) -> int:
  """How many blocks a dimension split over `axes` (a mesh axis, a tuple of them, or None) has."""
  return int(np.prod([mesh.shape[axis] for axis in ((axes,) if isinstance(axes, str) else axes or ())]))


def batch_sharding(mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES) -> NamedSharding:
  """Rows of a batch split along the mesh axis the 'batch' rule names; other dimensions whole."""
  return NamedSharding(mesh, nn.logical_to_mesh_axes(("batch",), rules))


def batch_blocks(mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES) -> int:
  """How many blocks `batch_sharding` splits a batch's rows into: a batch's rows must be a multiple."""
  [axes] = nn.logical_to_mesh_axes(("batch",), rules)
  return _ways(mesh, axes)


def check_batch_size(batch_size: int, mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES) -> None:
  """Refuses, before any work, a global batch that the mesh's row blocks (`batch_blocks`) do not divide."""
  if batch_size % (blocks := batch_blocks(mesh, rules)):
    raise ValueError(f"BATCH_SIZE {batch_size} is not divisible by the mesh's data axis ({blocks})")


def opt_state_shardings(optimizer, abstract_params, params_shardings, mesh: Mesh):
  """Shardings of the optimizer state, derived from the parameters' shardings.

  A state leaf shaped like its parameter (momentum, unfactored second moments) is split like it;
  any other leaf (Adafactor's factored row/column statistics, step counts) is small and replicated.
  jit cannot propagate these: the optimizer creates its state from shapes alone.
  """
  flat_params = flax.traverse_util.flatten_dict(abstract_params)
  flat_shardings = flax.traverse_util.flatten_dict(params_shardings)
  replicated = NamedSharding(mesh, PartitionSpec())

  def sharding_of(path, leaf):
    param_path = tuple(key.key for key in path if isinstance(key, jax.tree_util.DictKey))
    param = flat_params.get(param_path)
    if param is not None and tuple(param.shape) == tuple(leaf.shape):
      return flat_shardings[param_path]
    return replicated

  state = jax.eval_shape(optimizer.init, abstract_params)
  return jax.tree_util.tree_map_with_path(sharding_of, state)


def with_shardings(tree, shardings):
  """Shape structs that carry shardings: the target orbax restores into."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def global_batch(batch, mesh: Mesh, rules=STANDARD_LOGICAL_AXIS_RULES):
  """The whole numpy batch (the same on every process) -> global jax.Arrays split over the data
  axis. Each process places only the rows its own devices hold, so any mesh works across hosts:
  one whose data axis spans the processes (each holds a block of rows) and one whose model axis
  does (a model larger than one host: every process holds every row)."""
  sharding = batch_sharding(mesh, rules)
  return {name: jax.make_array_from_callback(np.shape(value), sharding,
                                             lambda index, value=np.asarray(value): value[index])
          for name, value in batch.items()}


def process_rows(mesh: Mesh, batch_size: int, rules=STANDARD_LOGICAL_AXIS_RULES) -> tuple[int, int]:
  """(first, last + 1) of the rows of a global batch that this process's devices hold."""
  index_map = batch_sharding(mesh, rules).addressable_devices_indices_map((batch_size,))
  rows = [range(batch_size)[index[0]] for index in index_map.values()]
  return min(r.start for r in rows), max(r.stop for r in rows)


class Partitioner:
  """The mesh and the logical-axis rules of a run, and everything that follows from them (t5x's
  partitioner): joining the hosts, batch blocks, global batches, the rows this process holds,
  parameter and optimizer shardings.

  gin binds one (gin/runs/*.gin: `MESH_SHAPE`, `LOGICAL_AXIS_RULES`, `MULTI_HOST`); the mesh is
  made on first use, after the hosts have joined, so constructing it touches no device.
  `Partitioner.for_mesh` wraps a mesh made elsewhere (on chosen devices).
  """

  def __init__(self, mesh_shape=(-1, 1), logical_axis_rules=STANDARD_LOGICAL_AXIS_RULES,
               multi_host: bool | None = None):
    self.mesh_shape = tuple(int(size) for size in mesh_shape)
    self.rules = as_rules(logical_axis_rules)
    self.multi_host = multi_host

  @classmethod
  def for_mesh(cls, mesh: Mesh, logical_axis_rules=STANDARD_LOGICAL_AXIS_RULES) -> "Partitioner":
    partitioner = cls((mesh.shape["data"], mesh.shape["model"]), logical_axis_rules, multi_host=False)
    partitioner.__dict__["mesh"] = mesh
    return partitioner

  def initialize(self) -> None:
    """Joins the processes of a multi-host run (`initialize_distributed`); before any device is used."""
    initialize_distributed(self.multi_host)

  @functools.cached_property
  def mesh(self) -> Mesh:
    self.initialize()
    return create_mesh(*self.mesh_shape)

  def axes(self, device_count: int | None = None) -> tuple[int, int]:
    """(data, model) of the mesh this partitioner makes on `device_count` devices (planning)."""
    return resolve_mesh_shape(self.mesh_shape, device_count)

  def activate(self):
    return activate(self.mesh, self.rules)

  def batch_blocks(self) -> int:
    return batch_blocks(self.mesh, self.rules)

  def check_batch_size(self, batch_size: int) -> None:
    check_batch_size(batch_size, self.mesh, self.rules)

  def batch_sharding(self) -> NamedSharding:
    return batch_sharding(self.mesh, self.rules)

  def global_batch(self, batch):
    return global_batch(batch, self.mesh, self.rules)

  def process_rows(self, batch_size: int) -> tuple[int, int]:
    return process_rows(self.mesh, batch_size, self.rules)

  def param_shardings(self, params, config: T5Config):
    return param_shardings(params, config, self.mesh, self.rules)

  def opt_state_shardings(self, optimizer, abstract_params, params_shardings):
    return opt_state_shardings(optimizer, abstract_params, params_shardings, self.mesh)

  def __repr__(self):
    return (f"Partitioner(mesh_shape={self.mesh_shape}, rules={len(self.rules)} rules, "
            f"multi_host={self.multi_host})")
