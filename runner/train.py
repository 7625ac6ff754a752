"""The training entry point: t5x's `train` with its gin macros, on a jax.sharding mesh.

Reads top to bottom: join the hosts, build the mesh, restore the latest checkpoint (or start
from INITIAL_CHECKPOINT_PATH / random weights), then loop: global batch, train step, log,
checkpoint. The same program runs on a laptop CPU, one GPU and a TPU pod slice; only gin
bindings change. `train(...)` is a plain function: tests call it with arguments, scripts/train.py
through gin (`gin/runs/finetune.gin`).
"""
import dataclasses
import functools
import math
import os
import time
from typing import Callable, Iterator

import jax
import numpy as np
from absl import logging

from models import checkpoint_import
from models import reward as reward_lib
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import data
from runner import partitioning
from runner import trainer

_ARCHITECTURE_FIELDS = ("vocab_size", "emb_dim", "num_heads", "head_dim", "mlp_dim", "mlp_activations",
                        "num_encoder_layers", "num_decoder_layers", "logits_via_embedding")


@dataclasses.dataclass
class TrainResult:
  step: int  # the step the run stopped at (train_steps, or earlier when preempted)
  params: dict
  preempted: bool
  metrics: dict  # the last logged metrics


class NonFiniteLossError(FloatingPointError):
  pass


def _is_hf_dir(path):
  return os.path.exists(os.path.join(path, "config.json"))


def _initial_transformer_params(path, config: T5Config, mesh, rules):
  """Transformer (or reward model) parameters of a Hugging Face dir or an orbax checkpoint."""
  if not _is_hf_dir(path):
    return checkpoints.restore_params(path, config, mesh, rules)
  hf_config, params = checkpoint_import.load_hf_t5(path)
  mismatched = [f"{name}: checkpoint {getattr(hf_config, name)!r}, model {getattr(config, name)!r}"
                for name in _ARCHITECTURE_FIELDS if getattr(hf_config, name) != getattr(config, name)]
  if mismatched:
    raise ValueError(f"INITIAL_CHECKPOINT_PATH {path} does not match MODEL_CONFIG: " + "; ".join(mismatched))
  return params


def _initial_params(config, objective, initial_checkpoint_path, seed, mesh=None, rules=None):
  rng = jax.random.PRNGKey(seed)
  loaded = (_initial_transformer_params(initial_checkpoint_path, config, mesh, rules)
            if initial_checkpoint_path else None)
  if objective == "cross_entropy":
    params = loaded if loaded is not None else init_params(config, rng)
    return {k: v for k, v in params.items() if k != reward_lib.HEAD}
  if loaded is not None and reward_lib.HEAD in loaded:
    return loaded
  return reward_lib.init_reward_params(config, rng, loaded)


def _metric_writer(model_dir):
  try:
    from clu import metric_writers  # pylint: disable=g-import-not-at-top
  except ImportError as error:  # clu's TensorBoard writer needs TensorFlow, which a GPU machine may lack
    logging.warning("clu's TensorBoard writer is not importable (%s): metrics go to the console only", error)
    return None
  return metric_writers.create_default_writer(os.path.join(model_dir, "train"),
                                              just_logging=jax.process_index() > 0)


def _real_tokens(batch):
  tokens = sum(np.count_nonzero(batch[name]) for name in ("input_ids", "target_ids", "candidate_ids")
               if name in batch)
  return tokens * jax.process_count()


def _format_eta(seconds):
  return time.strftime("%H:%M:%S", time.gmtime(seconds)) if math.isfinite(seconds) else "?"


def train(*, model_config: T5Config, mixture_or_task_name=None, task_feature_lengths=None,
          train_steps: int, batch_size: int, model_dir: str, initial_checkpoint_path=None,
          use_cached_tasks=False, objective="cross_entropy", optimizer=None, accumulation_steps=1,
          z_loss=1e-4, seed=0, split="train", mesh_shape=(-1, 1),
          logical_axis_rules=partitioning.STANDARD_LOGICAL_AXIS_RULES, multi_host=None,
          checkpoint_every=1000, keep_checkpoints=3, log_every=50, compilation_cache_dir=None,
          batch_source: Callable[[int], Iterator[dict]] | None = None) -> TrainResult:
  """Trains (or resumes training of) a model in `model_dir` up to `train_steps` steps.

  Data comes from the seqio task or mixture, or from `batch_source(start_step)` (an iterator of
  this host's numpy batches) when given. `mesh_shape` is (data, model); -1 takes the rest.
  `optimizer` defaults to `trainer.make_optimizer()` (Adafactor, constant 1e-3).
  On SIGTERM the run saves a checkpoint at its current step and returns with preempted=True.
  `compilation_cache_dir` keeps compiled steps on disk (process-wide), so a restart skips compiling.
  """
  if objective not in trainer.OBJECTIVES:
    raise ValueError(f"OBJECTIVE must be one of {trainer.OBJECTIVES}, got {objective!r}")
  partitioning.initialize_distributed(multi_host)
  if compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir)
  mesh = partitioning.create_mesh(*mesh_shape)
  optimizer = optimizer or trainer.make_optimizer()
  rules = tuple(tuple(rule) for rule in logical_axis_rules)

  random_init = functools.partial(_initial_params, model_config, objective, None, seed)
  abstract_params = jax.eval_shape(random_init)
  params_shardings = partitioning.param_shardings(abstract_params, model_config, mesh, rules)
  opt_shardings = partitioning.opt_state_shardings(optimizer, abstract_params, params_shardings, mesh)
  manager = checkpoints.checkpoint_manager(model_dir, keep_checkpoints)
  if jax.process_index() == 0:  # evaluation and inference read the architecture from here
    checkpoints.write_model_config(model_dir, model_config)
  restored = checkpoints.restore(manager, partitioning.with_shardings(abstract_params, params_shardings),
                                 partitioning.with_shardings(jax.eval_shape(optimizer.init, abstract_params),
                                                             opt_shardings))
  if restored:
    step, params, opt_state, position = restored
    start_batch = position["batches"]
    logging.info("resuming from the checkpoint of step %d in %s", step, model_dir)
  else:
    step, start_batch = 0, 0
    if initial_checkpoint_path:
      params = jax.device_put(
          _initial_params(model_config, objective, initial_checkpoint_path, seed, mesh, rules), params_shardings)
    else:  # created in place, shard by shard: a large model never sits whole on one device
      params = jax.jit(random_init, out_shardings=params_shardings)()
    opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)

  train_step = trainer.make_train_step(model_config, optimizer, mesh, params_shardings, opt_shardings,
                                       objective=objective, accumulation_steps=accumulation_steps,
                                       z_loss=z_loss, dropout_seed=seed, rules=rules)
  if batch_source is not None:
    batches = batch_source(start_batch)
  else:
    batches = data.train_batches(mixture_or_task_name, task_feature_lengths, batch_size, objective=objective,
                                 split=split, seed=seed, start_step=start_batch, use_cached=use_cached_tasks)
  writer = _metric_writer(model_dir)
  pending, last_metrics, preempted, saved_step = [], {}, False, step

  def check_finite():
    """Raises on a non-finite loss, gradient or parameter norm among the steps not yet checked."""
    for pending_step, metrics in jax.device_get(pending):
      norms = {name: float(metrics[name]) for name in ("loss", "grad_norm", "param_norm")}
      if not all(map(math.isfinite, norms.values())):
        manager.wait_until_finished()
        raise NonFiniteLossError(
            f"loss {norms['loss']}, gradient norm {norms['grad_norm']}, parameter norm {norms['param_norm']} "
            f"at step {pending_step}; stopped without saving: the last good checkpoint is step "
            f"{manager.latest_step()} in {model_dir}")
    pending.clear()

  def save():
    nonlocal saved_step
    if step == saved_step:
      return
    check_finite()
    # One batch per step (accumulation splits it), so the data position is the step.
    if checkpoints.save(manager, step, params, opt_state, {"batches": step}):
      saved_step = step

  window_start, window_steps, window_tokens = time.perf_counter(), 0, 0
  with checkpoints.PreemptionGuard(manager) as guard:
    while step < train_steps:
      local_batch = next(batches)
      global_batch = partitioning.global_batch(local_batch, mesh, rules)
      params, opt_state, metrics = train_step(params, opt_state, global_batch, step)
      pending.append((step, metrics))
      step += 1
      window_steps += 1
      window_tokens += _real_tokens(local_batch)
      if step % log_every == 0 or step == train_steps:
        check_finite()
        last_metrics = {name: float(value) for name, value in jax.device_get(metrics).items()}
        elapsed = time.perf_counter() - window_start
        rates = {"steps_per_sec": window_steps / elapsed, "tokens_per_sec": window_tokens / elapsed}
        eta = (train_steps - step) / rates["steps_per_sec"]
        if jax.process_index() == 0:
          print(f"step {step}/{train_steps}  loss {last_metrics['loss']:.4f}  "
                f"{rates['steps_per_sec']:.2f} steps/s  {rates['tokens_per_sec']:.0f} tokens/s  "
                f"ETA {_format_eta(eta)}", flush=True)
        if writer is not None:
          writer.write_scalars(step, {**last_metrics, **rates})
        last_metrics.update(rates)
        window_start, window_steps, window_tokens = time.perf_counter(), 0, 0
      if guard.should_stop(step):
        save()
        preempted = True
        break
      if step % checkpoint_every == 0:
        save()
    if not preempted:
      save()
  manager.wait_until_finished()
  if writer is not None:
    writer.flush()
  return TrainResult(step=step, params=params, preempted=preempted, metrics=last_metrics)
