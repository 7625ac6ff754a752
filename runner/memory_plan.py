"""A per-device memory plan of one training step: parameters, optimizer state, gradients, activations.

Pure arithmetic on shapes: nothing is allocated and no mesh of real devices is needed, so a TPU pod
slice's plan can be made on a laptop (`jax.sharding.AbstractMesh`). Parameter and optimizer-state
shards are exact: the real shapes (`jax.eval_shape` of the init and of `optimizer.init`) split by
the project's own `partitioning.param_shardings` / `opt_state_shardings`. Activations are a formula
per layer (below), checked against XLA's `compiled.memory_analysis()` in tests/runner/test_memory_plan.py.
"""
import dataclasses
import functools
import math
import os

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType

from models import reward as reward_lib
from models.config import T5Config
from models.network import init_params
from runner import partitioning
from runner import trainer

GIB = 2 ** 30
MIB = 2 ** 20
F32 = 4  # attention scores, logits and (here) parameters are float32 whatever the activation dtype


def mib(count: float) -> str:
  return f"{count / GIB:.2f} GiB" if count >= GIB else f"{count / MIB:.1f} MiB"


def millions(count: float) -> str:
  return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.2f}M"


@dataclasses.dataclass(frozen=True)
class Part:
  name: str
  bytes: int
  arithmetic: str  # how `bytes` was computed, for a person to check


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  mesh_shape: tuple[int, int]  # (data, model)
  batch_size: int
  rows_per_device: int  # of one microbatch
  feature_lengths: dict
  accumulation_steps: int
  remat: bool
  optimizer: str
  parts: tuple[Part, ...]

  @property
  def total(self) -> int:
    return sum(part.bytes for part in self.parts)

  def part(self, name: str) -> int:
    return next(p.bytes for p in self.parts if p.name == name)

  def fits(self, device_bytes: int) -> bool:
    return self.total <= device_bytes

  def settings(self) -> str:
    data, model = self.mesh_shape
    return (f"mesh (data {data}, model {model}), accumulation {self.accumulation_steps}, "
            f"remat {'on' if self.remat else 'off'}")

  def describe(self, device_bytes: int | None = None) -> list[str]:
    data, model = self.mesh_shape
    lengths = ", ".join(f"{name} {length}" for name, length in self.feature_lengths.items())
    lines = [f"memory plan per device: mesh (data {data}, model {model}), {self.optimizer}, {lengths}, "
             f"{self.rows_per_device} rows per device = batch {self.batch_size} / (data {data} x "
             f"accumulation {self.accumulation_steps}), remat {'on' if self.remat else 'off'}"]
    width = max(len(part.name) for part in self.parts)
    lines += [f"  {part.name:<{width}}  {mib(part.bytes):>10}  {part.arithmetic}" for part in self.parts]
    lines.append(f"  {'total':<{width}}  {mib(self.total):>10}")
    if device_bytes is not None:
      verdict = "fits" if self.fits(device_bytes) else "does NOT fit"
      lines.append(f"  {verdict} in {mib(device_bytes)} per device ({self.total / device_bytes:.0%} of it)")
    return lines


def abstract_mesh(data: int, model: int) -> AbstractMesh:
  """A mesh of shapes only: shardings and shard sizes without the devices."""
  return AbstractMesh((data, model), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def optimizer_named(optimizer) -> tuple[str, object]:
  """(name, optax transformation) of 'adafactor' / 'adamw' (as trainer.make_optimizer builds them)
  or of a transformation given as is."""
  if isinstance(optimizer, str):
    return optimizer, _named_optimizer(optimizer)
  return "the configured optimizer", optimizer


@functools.lru_cache(maxsize=4)
def _named_optimizer(name: str):
  return trainer.make_optimizer(name)  # one object per name, so _abstract_state's cache finds it


@functools.lru_cache(maxsize=8)
def _abstract_state(config: T5Config, reward_head: bool, optimizer, rules):
  """Shapes of the parameters and of the optimizer state (eval_shape: nothing allocated), with the
  PartitionSpecs the project's partitioning gives them. The specs depend on the rules, not on the
  mesh's sizes, so they are found once on a 1 x 1 mesh of shapes."""
  rng = jax.random.PRNGKey(0)
  init = ((lambda: reward_lib.init_reward_params(config, rng)) if reward_head
          else (lambda: init_params(config, rng)))
  params = jax.eval_shape(init)
  mesh = abstract_mesh(1, 1)
  param_shardings = partitioning.param_shardings(params, config, mesh, rules)
  opt_shardings = partitioning.opt_state_shardings(optimizer, params, param_shardings, mesh)
  specs = lambda shardings: [sharding.spec for sharding in jax.tree.leaves(shardings)]
  return (jax.tree.leaves(params), specs(param_shardings),
          jax.tree.leaves(jax.eval_shape(optimizer.init, params)), specs(opt_shardings))


def _shard_values(shape, spec, mesh_sizes: dict) -> int:
  """Values of one device's shard: each dimension divided (rounded up) by its mesh axes."""
  count = 1
  for i, dim in enumerate(shape):
    entry = spec[i] if i < len(spec) else None
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    count *= -(-dim // math.prod(mesh_sizes[a] for a in axes))
  return count


def _tree_bytes(leaves, specs, mesh_sizes: dict) -> tuple[int, int]:
  """(values in all, bytes on one device) of shape structs split by their PartitionSpecs."""
  total = sum(int(np.prod(leaf.shape)) for leaf in leaves)
  local = sum(_shard_values(leaf.shape, spec, mesh_sizes) * leaf.dtype.itemsize
              for leaf, spec in zip(leaves, specs))
  return total, local


def _split(rules, mesh_sizes: dict, logical: str, size: int) -> int:
  """`size` of a `logical` axis on one device under the rules (rounded up, as XLA pads)."""
  axes = nn.logical_to_mesh_axes((logical,), rules)[0]
  axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
  return -(-size // math.prod(mesh_sizes[a] for a in axes))


def _activation_parts(config: T5Config, rules, mesh_sizes, rows, input_len, decoder_rows, target_len,
                      logits: bool, remat: bool) -> list[Part]:
  """Activations one microbatch keeps for the backward pass, per device.

  Per encoder layer and token: the residual, two norms, the attention and MLP outputs (5 x embed),
  q, k, v and the attention context (4 x heads*head_dim over model), each MLP branch's input and
  output (2 x activations x mlp over model), and per query the float32 scores before and after the
  softmax (2 x heads x keys). A decoder layer has three residual blocks (8 x embed), self q/k/v/context
  and cross q/context (6 x heads*head_dim) and its cross keys/values on the encoder tokens. Once per
  step: the encoder's [rows, heads, L, L] attention bias (relative positions + padding), the
  embeddings and, for cross-entropy, three float32 copies of the logits (logits, softmax, gradient).
  With remat each layer keeps only its input (embed per token) and one layer is recomputed at a time.
  """
  c = config
  act = c.activation_dtype.itemsize
  emb = _split(rules, mesh_sizes, "embed", c.emb_dim)
  heads = _split(rules, mesh_sizes, "heads", c.num_heads)
  inner = _split(rules, mesh_sizes, "joined_kv", c.num_heads * c.head_dim)
  mlp = 2 * len(c.mlp_activations) * _split(rules, mesh_sizes, "mlp", c.mlp_dim)
  vocab = _split(rules, mesh_sizes, "vocab", c.vocab_size)
  enc_tokens, dec_tokens = rows * input_len, decoder_rows * target_len

  enc_values = 5 * emb + 4 * inner + mlp
  enc_scores = 2 * heads * input_len
  enc_layer = enc_tokens * (enc_values * act + enc_scores * F32)
  dec_values = 8 * emb + 6 * inner + mlp
  dec_scores = 2 * heads * (target_len + input_len)
  dec_layer = dec_tokens * (dec_values * act + dec_scores * F32) + enc_tokens * 2 * inner * act
  enc_formula = (f"{enc_tokens} tokens x ((5x{emb} + 4x{inner} + {mlp}) x {act} B + 2x{heads}x{input_len} "
                 f"scores x 4 B)")
  dec_formula = (f"{dec_tokens} tokens x ((8x{emb} + 6x{inner} + {mlp}) x {act} B + 2x{heads}x"
                 f"({target_len}+{input_len}) scores x 4 B) + {enc_tokens} x 2x{inner} cross k/v x {act} B")
  if remat:
    kept = (enc_tokens * c.num_encoder_layers + dec_tokens * c.num_decoder_layers) * emb * act
    parts = [Part("activations: layer inputs (remat)", kept,
                  f"({enc_tokens} x {c.num_encoder_layers} + {dec_tokens} x {c.num_decoder_layers}) tokens x "
                  f"{emb} x {act} B"),
             Part("activations: one layer recomputed", max(enc_layer, dec_layer),
                  f"the larger of encoder ({mib(enc_layer)}) and decoder ({mib(dec_layer)}) layer")]
  else:
    parts = [Part("activations: encoder layers", enc_layer * c.num_encoder_layers,
                  f"{c.num_encoder_layers} x {enc_formula}"),
             Part("activations: decoder layers", dec_layer * c.num_decoder_layers,
                  f"{c.num_decoder_layers} x {dec_formula}")]
  parts.append(Part("activations: attention bias", rows * heads * input_len * input_len * F32,
                    f"{rows} rows x {heads} heads x {input_len}x{input_len} x 4 B"))
  parts.append(Part("activations: embeddings", (enc_tokens + dec_tokens) * emb * act,
                    f"({enc_tokens} + {dec_tokens}) tokens x {emb} x {act} B"))
  if logits:
    parts.append(Part("activations: logits", 3 * dec_tokens * vocab * F32,
                      f"3 x {dec_tokens} tokens x {vocab} vocab x 4 B"))
  return parts


def plan(config: T5Config, *, mesh_shape, batch_size: int, feature_lengths: dict, optimizer="adafactor",
         accumulation_steps: int = 1, remat: bool = False, objective: str = "cross_entropy",
         num_candidates: int = 2, rules=partitioning.STANDARD_LOGICAL_AXIS_RULES) -> MemoryPlan:
  """The per-device memory of one train step (runner/trainer.py's) on a (data, model) mesh.

  `feature_lengths`: {'inputs', 'targets'} (and 'candidates' for a reward objective, else targets);
  a reward objective decodes `num_candidates` rows per example (its batches have as many as the
  example with the most). `optimizer`: 'adafactor' / 'adamw' or an optax transformation.
  """
  data, model = (int(size) for size in mesh_shape)
  rules = partitioning.as_rules(rules)
  goal = trainer.get_objective(objective)
  name, transformation = optimizer_named(optimizer)
  params, param_specs, opt_state, opt_specs = _abstract_state(config, goal.reward_head, transformation, rules)
  mesh_sizes = {"data": data, "model": model}
  param_count, param_bytes = _tree_bytes(params, param_specs, mesh_sizes)
  opt_count, opt_bytes = _tree_bytes(opt_state, opt_specs, mesh_sizes)
  local_params = param_bytes // F32

  split_rows = _split(rules, mesh_sizes, "batch", batch_size)  # rows of the whole batch per device
  rows = -(-split_rows // accumulation_steps)
  input_len = feature_lengths["inputs"]
  if goal.candidates:
    target_len = feature_lengths.get("candidates", feature_lengths["targets"])
    decoder_rows = rows * num_candidates
  else:
    target_len, decoder_rows = feature_lengths["targets"], rows

  gradient_copies = 2 + (accumulation_steps > 1)
  parts = [
      Part("parameters", param_bytes,
           f"{millions(param_count)} in all; this device's shards {millions(local_params)} x 4 B (vocab, "
           f"heads, joined_kv, mlp / model {model}; the rest whole)"),
      Part(f"optimizer state ({name})", opt_bytes,
           f"{millions(opt_count)} values in all (jax.eval_shape of optimizer.init), split as "
           "partitioning.opt_state_shardings does" + (": Adafactor's factored row/column statistics"
                                                     " replicated" if name == "adafactor" else "")),
      Part("gradients", gradient_copies * param_bytes,
           f"{gradient_copies} x {mib(param_bytes)}: the summed gradients and their mean over the batch"
           + (" and the accumulation carry" if accumulation_steps > 1 else "")),
      Part("optimizer update", param_bytes, f"1 x {mib(param_bytes)}: the update before apply_updates"),
      Part("batch", split_rows * (input_len + target_len * (decoder_rows // rows)) * 4,
           f"{split_rows} rows x ({input_len} + {decoder_rows // rows}x{target_len}) ids x 4 B"),
  ]
  parts += _activation_parts(config, rules, mesh_sizes, rows, input_len, decoder_rows, target_len,
                             logits=not goal.reward_head, remat=remat)
  lengths = {"inputs": input_len, ("candidates" if goal.candidates else "targets"): target_len}
  return MemoryPlan((data, model), batch_size, rows, lengths, accumulation_steps, remat, name, tuple(parts))


def _meshes(devices: int):
  """Every (data, model) with data x model = devices, least model parallelism first."""
  return [(devices // model, model) for model in range(1, devices + 1) if devices % model == 0]


def fitting_alternative(config: T5Config, device_bytes: int, *, mesh_shape, batch_size: int,
                        accumulation_steps: int = 1, remat: bool = False, max_growth: int = 16,
                        **plan_args) -> MemoryPlan | None:
  """The first plan that fits, trying in turn: the same devices (any mesh, then more accumulation
  steps), then 2, 4, ... `max_growth` times the devices; all without remat first (unless `remat` is
  already on: recomputing costs a forward pass per step), then with it. None when nothing fits."""
  devices = mesh_shape[0] * mesh_shape[1]

  def tries():
    for use_remat in sorted({remat, True}):
      for count in [devices] + [devices * 2 ** k for k in range(1, int(math.log2(max_growth)) + 1)]:
        for steps in sorted({accumulation_steps} | {2 ** k for k in range(0, 7) if 2 ** k >= accumulation_steps}):
          for data, model in _meshes(count):
            if batch_size % (data * steps) == 0 and config.num_heads % model == 0:
              yield (data, model), steps, use_remat

  for mesh, steps, use_remat in tries():
    candidate = plan(config, mesh_shape=mesh, batch_size=batch_size, accumulation_steps=steps,
                     remat=use_remat, **plan_args)
    if candidate.fits(device_bytes):
      return candidate
  return None


def device_memory_bytes(override_gib: float | None = None) -> tuple[int, str]:
  """(bytes one device holds, where that number came from)."""
  if override_gib is not None:
    return int(override_gib * GIB), f"DEVICE_MEMORY_GIB = {override_gib}"
  device = jax.local_devices()[0]
  stats = device.memory_stats() or {}
  if "bytes_limit" in stats:
    return int(stats["bytes_limit"]), f"{device.device_kind} memory_stats()['bytes_limit']"
  # CPU: the simulated devices share the host's memory.
  ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  count = jax.local_device_count()
  return ram // count, f"host RAM {mib(ram)} / {count} local device{'s' if count > 1 else ''}"
