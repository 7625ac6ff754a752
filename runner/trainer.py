"""The training step: objectives, optimizers and schedules, jitted with explicit shardings.

Batches are dicts of arrays. `cross_entropy` reads `input_ids` [B, L] and `target_ids` [B, T];
`pairwise` and `listwise` read `input_ids`, `candidate_ids` [B, K, T], `candidate_labels` and
`candidate_mask` [B, K]. A loss is summed over its units (target tokens, or items) and divided
by their count once, after gradient accumulation, so accumulating n microbatches gives the same
update as one batch n times larger.
"""
import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from models import reward as reward_lib
from models.config import T5Config
from models.network import Transformer, shift_right
from runner import partitioning


def make_schedule(name="constant", learning_rate=1e-3, warmup_steps=0, decay_steps=None, end_value=0.0):
  """A learning-rate schedule: 'constant', 'rsqrt' (linear warm-up, then 1/sqrt decay), 'cosine' or
  'linear' (warm-up, then a straight line to `end_value` at `decay_steps`: Hugging Face's default)."""
  if name == "constant":
    if warmup_steps:
      return optax.warmup_constant_schedule(0.0, learning_rate, warmup_steps)
    return optax.constant_schedule(learning_rate)
  if name == "rsqrt":
    warmup = max(warmup_steps, 1)
    # T5's 1/sqrt(max(step, warmup)), rescaled so that it peaks at learning_rate.
    decay = lambda step: learning_rate * jnp.sqrt(warmup / (step + warmup))
    return optax.join_schedules([optax.linear_schedule(0.0, learning_rate, warmup), decay], [warmup])
  if name == "cosine":
    if not decay_steps:
      raise ValueError("make_schedule: 'cosine' needs decay_steps (usually TRAIN_STEPS)")
    return optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup_steps, decay_steps, end_value)
  if name == "linear":
    if not decay_steps:
      raise ValueError("make_schedule: 'linear' needs decay_steps (usually TRAIN_STEPS)")
    return optax.join_schedules(
        [optax.linear_schedule(0.0, learning_rate, warmup_steps),
         optax.linear_schedule(learning_rate, end_value, max(decay_steps - warmup_steps, 1))], [warmup_steps])
  raise ValueError(f"make_schedule: unknown schedule {name!r}; expected constant, rsqrt, cosine or linear")


def make_optimizer(name="adafactor", learning_rate=1e-3, weight_decay=0.0, clip_norm=None,
                   multiply_by_parameter_scale=True, b1=0.9, b2=0.999):
  """Adafactor (T5 fine-tuning: factored second moments, no momentum) or AdamW.

  `learning_rate` is a number or an optax schedule (gin: `@trainer.make_schedule()`).
  """
  if name == "adafactor":
    optimizer = optax.adafactor(learning_rate, momentum=None, factored=True,
                                multiply_by_parameter_scale=multiply_by_parameter_scale,
                                weight_decay_rate=weight_decay or None)
  elif name == "adamw":
    optimizer = optax.adamw(learning_rate, b1=b1, b2=b2, weight_decay=weight_decay)
  else:
    raise ValueError(f"make_optimizer: unknown optimizer {name!r}; expected adafactor or adamw")
  if clip_norm:
    optimizer = optax.chain(optax.clip_by_global_norm(clip_norm), optimizer)
  return optimizer


def _cross_entropy_sums(config, params, batch, dropout_rng, z_loss):
  targets = batch["target_ids"]
  weights = (targets > 0).astype(jnp.float32)
  rngs = None if dropout_rng is None else {"dropout": dropout_rng}
  logits = Transformer(config).apply({"params": params}, batch["input_ids"], shift_right(targets),
                                     deterministic=dropout_rng is None, rngs=rngs)
  token_ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  # t5x's z-loss keeps the softmax normaliser near 1, which stabilises bfloat16 training.
  token_loss = token_ce + z_loss * jnp.square(jax.nn.logsumexp(logits, axis=-1))
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
  sums = {"cross_entropy": (token_ce * weights).sum(), "accuracy": (correct * weights).sum()}
  return (token_loss * weights).sum(), weights.sum(), sums


def _reward_sums(config, params, batch, dropout_rng, z_loss, *, listwise):
  del z_loss  # a token-level regulariser; rewards have no vocabulary softmax
  labels, mask = batch["candidate_labels"], batch["candidate_mask"].astype(bool)
  rewards = reward_lib.reward(config, params, batch["input_ids"], batch["candidate_ids"],
                              deterministic=dropout_rng is None, dropout_rng=dropout_rng)
  items = rewards.shape[0]
  if listwise:
    loss = reward_lib.listwise_loss(rewards, labels.astype(jnp.float32), mask)
  else:
    # The first preferred and the first other valid candidate of each item form its pair.
    good = jnp.argmax((labels > 0) & mask, axis=-1)[:, None]
    bad = jnp.argmax((labels <= 0) & mask, axis=-1)[:, None]
    loss = reward_lib.pairwise_loss(jnp.take_along_axis(rewards, good, 1), jnp.take_along_axis(rewards, bad, 1))
  best = jnp.argmax(jnp.where(mask, rewards, -jnp.inf), axis=-1)[:, None]
  accuracy = (jnp.take_along_axis(labels, best, 1) > 0).astype(jnp.float32).sum()
  return loss * items, jnp.float32(items), {"accuracy": accuracy}


@dataclasses.dataclass(frozen=True)
class Objective:
  """A training objective: its loss sums and what it trains on.

  loss_sums(config, params, batch, dropout_rng, z_loss) -> (summed loss, loss units, summed metrics).
  `candidates`: batches of candidate arrays (else token input/target ids); `reward_head`: the
  model gets a scalar head.
  """
  loss_sums: Callable
  candidates: bool
  reward_head: bool


# Every objective, by its gin name (OBJECTIVE): adding one is adding an entry.
OBJECTIVES = {
    "cross_entropy": Objective(_cross_entropy_sums, candidates=False, reward_head=False),
    # HEAP and summarize-from-feedback: log(1 + exp(r_bad - r_good)) per comparison.
    "pairwise": Objective(functools.partial(_reward_sums, listwise=False), candidates=True, reward_head=True),
    "listwise": Objective(functools.partial(_reward_sums, listwise=True), candidates=True, reward_head=True),
}


def get_objective(name: str) -> Objective:
  if name not in OBJECTIVES:
    raise ValueError(f"OBJECTIVE must be one of {sorted(OBJECTIVES)}, got {name!r}")
  return OBJECTIVES[name]


def _microbatches(batch, count):
  """[B, ...] -> [count, B / count, ...], taking rows count apart so each device keeps its own rows."""
  def split(x):
    if x.shape[0] % count:
      raise ValueError(f"batch of {x.shape[0]} rows does not split into {count} microbatches")
    return jnp.swapaxes(x.reshape((x.shape[0] // count, count) + x.shape[1:]), 0, 1)
  return jax.tree.map(split, batch)


def _compiler_options(mesh):
  """XLA options for the step on this mesh's platform.

  On a CPU, copy insertion without region analysis copied every donated parameter at the start
  of the step (187 copies, about 3% of the small model's step); with it the parameters are updated
  in place, bit for bit the same. Other platforms' compilers do not take the option.
  """
  if mesh.devices.flat[0].platform == "cpu":
    return {"xla_cpu_copy_insertion_use_region_analysis": True}
  return None


def make_train_step(config: T5Config, optimizer, partitioner: partitioning.Partitioner, params_shardings,
                    opt_shardings, *, objective="cross_entropy", accumulation_steps=1, z_loss=1e-4,
                    dropout_seed=0):
  """train_step(params, opt_state, batch, step) -> (params, opt_state, metrics), jitted on the
  partitioner's mesh and traced inside its rules.

  Parameters and optimizer state keep their shardings and are donated; batches are split over the
  data axis; metrics (loss, grad_norm, accuracy, ...) come back as replicated scalars.
  """
  objective_loss_sums = get_objective(objective).loss_sums
  dropout = config.dropout_rate > 0

  def grads_and_sums(params, batch, rng):
    def loss_fn(p):
      total, units, sums = objective_loss_sums(config, p, batch, rng if dropout else None, z_loss)
      return total, (units, sums)
    (total, (units, sums)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, dict(sums, loss=total, units=units)

  def train_step(params, opt_state, batch, step):
    rng = jax.random.fold_in(jax.random.PRNGKey(dropout_seed), step)
    if accumulation_steps == 1:
      grads, sums = grads_and_sums(params, batch, rng)
    else:
      def accumulate(carry, indexed):
        index, micro = indexed
        grads, sums = grads_and_sums(params, micro, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, carry, (grads, sums)), None
      micro = _microbatches(batch, accumulation_steps)
      first = jax.tree.map(lambda x: x[0], micro)
      shapes = jax.eval_shape(grads_and_sums, params, first, rng)
      zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
      (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(accumulation_steps), micro))
    units = jnp.maximum(sums.pop("units"), 1.0)
    grads = jax.tree.map(lambda g: g / units, grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = {name: value / units for name, value in sums.items()}
    metrics.update(grad_norm=optax.tree.norm(grads), param_norm=optax.tree.norm(params), units=units)
    return params, opt_state, metrics

  replicated = NamedSharding(partitioner.mesh, PartitionSpec())
  jitted = jax.jit(train_step,
                   in_shardings=(params_shardings, opt_shardings, partitioner.batch_sharding(), replicated),
                   out_shardings=(params_shardings, opt_shardings, replicated),
                   donate_argnums=(0, 1), compiler_options=_compiler_options(partitioner.mesh))

  def run(params, opt_state, batch, step):
    with partitioner.activate():
      return jitted(params, opt_state, batch, jnp.asarray(step, jnp.int32))

  def lower(params, opt_state, batch, step):
    """The step lowered for these shapes, inside the mesh and rules: `.compile().memory_analysis()`
    is XLA's own account of its memory, which runner/memory_plan.py is checked against."""
    with partitioner.activate():
      return jitted.lower(params, opt_state, batch, step)
  run.lower = lower
  return run
