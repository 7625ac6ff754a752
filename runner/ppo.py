"""Reinforcement learning from a reward model: PPO with a KL penalty, as Stiennon et al. (2020,
appendix B.1) train their summarisation policies, on the project's runner.

Reads top to bottom: load the supervised policy (trained from, and frozen as the KL reference),
the reward model and the value function (started from the reward model, B.1), restore the
latest checkpoint, then loop: a batch of prompts, a rollout (one sample per prompt at the
configured temperature, its log-probabilities under both policies, values and rewards:
models/ppo.py), `epochs` passes of PPO updates over it, a progress line, a checkpoint. At the
end, the policy is compared with best-of-N from the supervised policy at about the same KL on
held-out prompts (the paper's Figure 12 comparison), printed, written to
MODEL_DIR/ppo_comparison.json and drawn in MODEL_DIR/report.html.

A checkpoint holds the policy and value parameters together ({'policy', 'value'}) with their
optimizer state; its data record holds the KL coefficient (which the adaptive controller
changes). A step's rollout samples with fold_in(PRNGKey(seed), step) and its prompts are the
step's batch, so a resumed run repeats exactly what an uninterrupted one does.
"""
import dataclasses
import json
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from models import decoding
from models import ppo as ppo_lib
from models import reward as reward_lib
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import data
from runner import infer
from runner import lease as lease_lib
from runner import model_inputs
from runner import outputs
from runner import partitioning
from runner import report
from runner import run_dir
from runner import train as train_lib
from runner import trainer
from runner.progress import Progress
import storage

COMPARISON_FILE = "ppo_comparison.json"
# (reward parameters, input_ids [B, L], response_ids [B, T]) -> scores [B], traceable by jit.
Score = Callable[[Any, jax.Array, jax.Array], jax.Array]


def reward_model_score(config: T5Config) -> Score:
  """A reward model's score of each response (`models.reward.reward`)."""
  return lambda params, input_ids, responses: reward_lib.reward(config, params, input_ids, responses)


@dataclasses.dataclass(frozen=True)
class Models:
  """What a run reads besides its own checkpoints: the frozen supervised policy (the KL
  reference), the reward (a reward model's parameters and score), where the value function
  starts, and each network's architecture."""
  policy_config: T5Config
  reference: dict
  value_config: T5Config
  initial_value: dict
  score: Score
  reward_params: Any


def check_settings(ppo: configs.PPOConfig, *, batch_size: int, data_axis: int) -> None:
  """Stops a run whose RL settings could not train as asked, before anything is loaded."""
  for name, value in (("PPO_EPOCHS", ppo.epochs), ("PPO_MINIBATCHES", ppo.minibatches),
                      ("KL_HORIZON", ppo.kl_horizon), ("BEST_OF_N_MAX", ppo.best_of_n_max)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"{name} must be a positive whole number, got {value!r}")
  for name, value in (("TEMPERATURE", ppo.temperature), ("CLIP_RANGE", ppo.clip_range),
                      ("VALUE_CLIP_RANGE", ppo.value_clip_range)):
    if not value > 0:
      raise ValueError(f"{name} must be positive, got {value!r}")
  for name, value in (("KL_COEFFICIENT", ppo.kl_coefficient), ("VALUE_COEFFICIENT", ppo.value_coefficient)):
    if not value >= 0:
      raise ValueError(f"{name} must be 0 or more, got {value!r}")
  if ppo.kl_target is not None and not ppo.kl_target > 0:
    raise ValueError(f"KL_TARGET must be a positive number of nats or None (a fixed KL_COEFFICIENT), got {ppo.kl_target!r}")
  if not 0 <= ppo.gamma <= 1 or not 0 <= ppo.lam <= 1:
    raise ValueError(f"GAMMA and LAMBDA must be from 0 to 1, got {ppo.gamma!r} and {ppo.lam!r}")
  if batch_size % (data_axis * ppo.minibatches):
    raise ValueError(f"BATCH_SIZE {batch_size} does not split into PPO_MINIBATCHES ({ppo.minibatches}) "
                     f"x the mesh's data axis ({data_axis}); use a multiple of {data_axis * ppo.minibatches}")


def optimizer_updates(steps: int, epochs: int, minibatches: int) -> int:
  """Optimizer updates in a run (what a schedule's decay_steps counts): one per minibatch of each
  epoch of each step's rollouts."""
  return steps * epochs * minibatches


def load_models(ppo: configs.PPOConfig, model_config: T5Config, partitioner: partitioning.Partitioner,
                score: Score | None, seed: int, vocabulary: dict | None) -> Models:
  """Reads the supervised policy, the reward model and the value function's start (refusing a
  reward checkpoint without a head, and checkpoints recorded with another vocabulary)."""
  paths = [("POLICY_CHECKPOINT_PATH", ppo.policy_checkpoint_path), ("REWARD_CHECKPOINT_PATH", ppo.reward_checkpoint_path),
           ("VALUE_CHECKPOINT_PATH", ppo.value_checkpoint_path)]
  for name, path in paths:
    if path:
      checkpoints.check_checkpoint(path, name)
      model_inputs.check_vocabulary(model_inputs.read(path), vocabulary, f"{name} {path}")
  policy_config, reference = checkpoints.load_params(ppo.policy_checkpoint_path, model_config, partitioner)
  reference = {name: value for name, value in reference.items() if name != reward_lib.HEAD}
  reward_params = None
  if ppo.reward_checkpoint_path:
    reward_config, reward_params = checkpoints.load_reward_model(ppo.reward_checkpoint_path, "REWARD_CHECKPOINT_PATH",
                                                                 partitioner)
    score = reward_model_score(reward_config)
  elif score is None:
    raise ValueError("REWARD_CHECKPOINT_PATH is None: PPO needs a reward model (a reward run's "
                     "MODEL_DIR/normalized, or scripts.normalize_reward's output)")
  if ppo.value_checkpoint_path:
    # The value function starts from a reward model (B.1), its head read at every position.
    value_config, initial_value = checkpoints.load_reward_model(ppo.value_checkpoint_path, "VALUE_CHECKPOINT_PATH",
                                                                partitioner)
  elif reward_params is not None:  # B.1: "initializing ... our value functions to the reward model"
    value_config, initial_value = reward_config, reward_params
  else:
    value_config = policy_config
    initial_value = reward_lib.init_reward_params(policy_config, jax.random.PRNGKey(seed), reference)
  return Models(policy_config, reference, value_config, initial_value, score, reward_params)


def make_rollout(models: Models, ppo: configs.PPOConfig, partitioner: partitioning.Partitioner, *, max_length: int,
                 seed: int, eos_id: int = 1):
  """rollout(params, input_ids, step, kl_coefficient) -> (batch for `make_update`, statistics):
  the batch's rows split over the data axis as the prompts' are, the statistics replicated."""
  temperature = ppo.temperature

  def rollout(params, reference, reward_params, input_ids, step, kl_coefficient):
    rng = jax.random.fold_in(jax.random.PRNGKey(seed), step)
    responses = decoding.sample(models.policy_config, params["policy"], input_ids, rng, max_length=max_length,
                                temperature=temperature, top_p=1.0, eos_id=eos_id)[:, 0]
    mask = ppo_lib.response_mask(responses)
    distributions = ppo_lib.next_token_log_probs(models.policy_config, params["policy"], input_ids, responses,
                                                 temperature)
    ref_distributions = ppo_lib.next_token_log_probs(models.policy_config, reference, input_ids, responses,
                                                     temperature)
    log_probs, entropy = ppo_lib.chosen_and_entropy(distributions, responses)
    ref_log_probs, _ = ppo_lib.chosen_and_entropy(ref_distributions, responses)
    values = ppo_lib.values(models.value_config, params["value"], input_ids, responses)
    scores = models.score(reward_params, input_ids, responses).astype(jnp.float32)
    rewards = ppo_lib.penalized_rewards(scores, log_probs, ref_log_probs, mask, kl_coefficient)
    advantages, returns = ppo_lib.advantages_and_returns(rewards, values, mask, ppo.gamma, ppo.lam)
    kl = ppo_lib.kl_estimate(log_probs, ref_log_probs, mask).sum(axis=-1)
    batch = {"input_ids": input_ids, "responses": responses, "log_probs": log_probs, "values": values,
             "advantages": ppo_lib.whiten(advantages, mask), "returns": returns}
    exact_kl = ppo_lib.exact_kl(distributions, ref_distributions, responses).sum(axis=-1)
    statistics = {"score": scores.mean(), "kl": kl.mean(), "exact_kl": exact_kl.mean(),
                  "reward": (scores - kl_coefficient * kl).mean(),
                  "entropy": ppo_lib.masked_mean(entropy, mask), "response_length": mask.sum(axis=-1).mean(),
                  "unfinished": jnp.mean(~jnp.any(responses == eos_id, axis=-1))}
    return batch, statistics

  jitted = jax.jit(rollout, out_shardings=(partitioner.batch_sharding(),
                                            NamedSharding(partitioner.mesh, PartitionSpec())))
  return lambda params, input_ids, step, kl_coefficient: jitted(
      params, models.reference, models.reward_params, input_ids, jnp.asarray(step, jnp.int32),
      jnp.asarray(kl_coefficient, jnp.float32))


def make_update(models: Models, ppo: configs.PPOConfig, optimizer, partitioner: partitioning.Partitioner,
                params_shardings, opt_shardings, *, seed: int):
  """update(params, opt_state, batch, step) -> (params, opt_state, metrics): `epochs` passes over
  the rollouts, each in `minibatches` shuffled minibatches, one optimizer update per minibatch.
  Metrics are means over the updates."""
  updates = ppo.epochs * ppo.minibatches

  def loss(params, batch):
    mask = ppo_lib.response_mask(batch["responses"])
    log_probs, _ = ppo_lib.log_probs_and_entropy(models.policy_config, params["policy"], batch["input_ids"],
                                                 batch["responses"], ppo.temperature)
    policy_loss, clip_fraction = ppo_lib.policy_loss(log_probs, batch["log_probs"], batch["advantages"], mask,
                                                     ppo.clip_range)
    values = ppo_lib.values(models.value_config, params["value"], batch["input_ids"], batch["responses"])
    value_loss, value_clip_fraction = ppo_lib.value_loss(values, batch["values"], batch["returns"], mask,
                                                         ppo.value_clip_range)
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss, "clip_fraction": clip_fraction,
               "value_clip_fraction": value_clip_fraction,
               "policy_change_kl": ppo_lib.masked_mean(batch["log_probs"] - log_probs, mask)}
    return policy_loss + ppo.value_coefficient * value_loss, metrics

  def update(params, opt_state, batch, step):
    rng = jax.random.fold_in(jax.random.PRNGKey(seed + 1), step)
    rows = batch["responses"].shape[0]
    size = rows // ppo.minibatches

    def one_update(carry, index):
      params, opt_state = carry
      if ppo.minibatches == 1:
        minibatch = batch
      else:
        order = jax.random.permutation(jax.random.fold_in(rng, index // ppo.minibatches), rows)
        chosen = jax.lax.dynamic_slice(order, ((index % ppo.minibatches) * size,), (size,))
        minibatch = jax.tree.map(lambda x: x[chosen], batch)
      (total, metrics), grads = jax.value_and_grad(loss, has_aux=True)(params, minibatch)
      changes, opt_state = optimizer.update(grads, opt_state, params)
      params = optax.apply_updates(params, changes)
      return (params, opt_state), dict(metrics, loss=total, grad_norm=optax.tree.norm(grads))

    (params, opt_state), metrics = jax.lax.scan(one_update, (params, opt_state), jnp.arange(updates))
    metrics = jax.tree.map(jnp.mean, metrics)
    return params, opt_state, dict(metrics, param_norm=optax.tree.norm(params))

  replicated = NamedSharding(partitioner.mesh, PartitionSpec())
  jitted = jax.jit(update, in_shardings=(params_shardings, opt_shardings, partitioner.batch_sharding(), replicated),
                   out_shardings=(params_shardings, opt_shardings, replicated), donate_argnums=(0, 1))
  return lambda params, opt_state, batch, step: jitted(params, opt_state, batch, jnp.asarray(step, jnp.int32))


def comparison_dataset(task_name: str, split: str | None, task_feature_lengths) -> configs.DatasetConfig | None:
  """The end-of-run comparison's prompts: `split` of the generation task `task_name` (None: none)."""
  if split is None:
    return None
  return configs.DatasetConfig(task_name, task_feature_lengths, split, batch_size=1)


def closest_best_of_n(kl: float, n_max: int) -> int:
  """The N in 1..n_max whose best-of-N KL (log N - (N-1)/N) is closest to `kl`."""
  return min(range(1, n_max + 1), key=lambda n: abs(decoding.best_of_n_kl(n) - kl))


def compare_with_best_of_n(models: Models, policy, input_ids: np.ndarray, *, partitioner: partitioning.Partitioner,
                           batch_size: int, max_length: int, temperature: float, n_max: int, seed: int,
                           eos_id: int = 1) -> dict:
  """The policy's mean reward and KL from the supervised policy on prompts `input_ids` [P, L], and
  best-of-N's from the supervised policy at the N whose KL is closest (Stiennon et al. 2020,
  Figure 12 and appendix G.3; Table 10's KL formula), both sampled at `temperature`, with the
  supervised policy's own mean reward (N = 1)."""
  rng = jax.random.PRNGKey(seed)
  options = dict(max_length=max_length, temperature=temperature, top_p=1.0, eos_id=eos_id)

  def batches():
    for index, first in enumerate(range(0, len(input_ids), batch_size)):
      rows = input_ids[first:first + batch_size]
      padded = np.zeros((batch_size, input_ids.shape[1]), np.int32)
      padded[:len(rows)] = rows
      yield index, len(rows), partitioner.global_batch({"input_ids": padded})["input_ids"]

  def gathered(tree, count):
    return jax.tree.map(lambda x: np.asarray(x)[:count], multihost_utils.process_allgather(tree, tiled=True))

  scores, kls = [], []
  with partitioner.activate():
    for index, count, batch in batches():
      samples = decoding.sample(models.policy_config, policy, batch, np.asarray(jax.random.fold_in(rng, 2 * index)),
                                **options)[:, 0]
      out = gathered({"score": models.score(models.reward_params, batch, samples),
                      "kl": ppo_lib.sequence_kl(models.policy_config, policy, models.reference, batch, samples,
                                                temperature)}, count)
      scores += out["score"].tolist()
      kls += out["kl"].tolist()
    kl = float(np.mean(kls))
    n = closest_best_of_n(kl, n_max)
    chosen, every = [], []
    for index, count, batch in batches():
      samples = decoding.sample(models.policy_config, models.reference, batch,
                                np.asarray(jax.random.fold_in(rng, 2 * index + 1)), num_samples=n, **options)
      rewards = gathered(jax.vmap(models.score, in_axes=(None, None, 1), out_axes=1)(
          models.reward_params, batch, samples), count)
      chosen += rewards.max(axis=1).tolist()
      every += rewards.ravel().tolist()
  return {"prompts": len(input_ids), "temperature": temperature,
          "ppo": {"reward": float(np.mean(scores)), "kl": kl},
          "best_of_n": {"n": n, "reward": float(np.mean(chosen)), "kl": decoding.best_of_n_kl(n)},
          "supervised": {"reward": float(np.mean(every)), "kl": 0.0}}


def comparison_line(record: dict) -> str:
  ppo, best, supervised = record["ppo"], record["best_of_n"], record["supervised"]
  return (f"PPO against best-of-N on {record['prompts']} prompts: PPO reward {ppo['reward']:+.4f} at KL "
          f"{ppo['kl']:.3f} nats; best-of-{best['n']} reward {best['reward']:+.4f} at KL {best['kl']:.3f}; "
          f"supervised {supervised['reward']:+.4f}")


def write_comparison(model_dir: str, record: dict) -> None:
  """MODEL_DIR/ppo_comparison.json and report.html (a table and the paper's reward-against-KL bars)."""
  storage.write_text(storage.join(model_dir, COMPARISON_FILE), json.dumps(record, indent=2) + "\n")
  policies = [("supervised", record["supervised"]), (f"best-of-{record['best_of_n']['n']}", record["best_of_n"]),
              ("PPO", record["ppo"])]
  table = report.Table("Reward and KL from the supervised policy", ["policy", "mean reward", "KL (nats)"],
                       [[name, f"{entry['reward']:+.4f}", f"{entry['kl']:.3f}"] for name, entry in policies])
  chart = report.BarChart("Mean reward (KL from the supervised policy in brackets)",
                          [f"{name} ({entry['kl']:.2f})" for name, entry in policies],
                          [entry["reward"] for _, entry in policies], ylabel="reward model score")
  report.write_report(model_dir, title="PPO against best-of-N", tables=[table], charts=[chart],
                      notes=[comparison_line(record) + f" (temperature {record['temperature']}; Stiennon et al. "
                             "2020, Figure 12: best-of-N's KL is log N - (N-1)/N, PPO's the mean sampled "
                             "sum of log pi - log pi_sup)"])


def _statistics_line(values: dict, kl_coefficient: float) -> str:
  return (f"reward {values['score']:+.4f}  KL {values['exact_kl']:.3f}  beta {kl_coefficient:.4g}  entropy "
          f"{values['entropy']:.3f}  value loss {values['value_loss']:.4f}  clip fraction {values['clip_fraction']:.3f}")


def train(*, model_config: T5Config, prompts: configs.DatasetConfig | train_lib.BatchSource,
          training: configs.TrainingConfig, ppo: configs.PPOConfig, checkpoint: configs.CheckpointConfig,
          partitioner: partitioning.Partitioner, model_dir: str,
          comparison: configs.DatasetConfig | np.ndarray | None = None, score: Score | None = None,
          run_config: str | None = None) -> train_lib.TrainResult:
  """Trains (or resumes) a policy with PPO in `model_dir` up to `training.steps` steps.

  `prompts`: a DatasetConfig whose task's inputs are the prompts (its `task_feature_lengths`
  'targets' is the longest response sampled), or a BatchSource of `input_ids` batches (tests).
  `training` gives the steps, optimizer, seed and logging (its objective is not read); `ppo`
  the RL settings and checkpoints. `score` is a programmatic reward for runs without
  `ppo.reward_checkpoint_path` (tests). `comparison`: the prompts of the end-of-run comparison
  with best-of-N (a DatasetConfig of a generation task and split, or input ids [P, L]); None: none.
  Like `train.train`, the run holds `model_dir`'s lease, stops cleanly on SIGTERM/SIGINT with a
  checkpoint, and writes config.gin, t5_config.json and model_inputs.json.
  """
  from_tasks = isinstance(prompts, configs.DatasetConfig)
  dataset = prompts if from_tasks else prompts.as_dataset()
  if not dataset.task_feature_lengths or "targets" not in dataset.task_feature_lengths:
    raise ValueError("TASK_FEATURE_LENGTHS must be bound with 'inputs' (the prompts) and 'targets' "
                     "(the longest response sampled), e.g. {'inputs': 512, 'targets': 49}")
  train_lib.check_model_dir(model_dir)
  partitioner.initialize()
  tasks = data.tasks_with_split(dataset.mixture_or_task_name, dataset.split) if from_tasks else []
  check_settings(ppo, batch_size=dataset.batch_size, data_axis=partitioner.batch_blocks())
  train_lib.check_settings(train_steps=training.steps, batch_size=dataset.batch_size, accumulation_steps=1,
                           data_axis=partitioner.batch_blocks(), model_config=model_config,
                           vocabulary_size=train_lib.vocabulary_size(tasks), checkpoint_every=checkpoint.every,
                           keep_checkpoints=checkpoint.keep, log_every=training.log_every)
  vocabulary = model_inputs.tasks_vocabulary(tasks)
  model_inputs.check_vocabulary(model_inputs.read(model_dir), vocabulary, f"MODEL_DIR {model_dir}")
  layout = run_dir.RunDir(model_dir)
  created = [path for path in (model_dir, layout.checkpoints) if not storage.exists(path)]
  lease = lease_lib.acquire(model_dir)
  try:
    if from_tasks:
      data.require_examples(tasks, dataset.split)
    models = load_models(ppo, model_config, partitioner, score, training.seed, vocabulary)
    optimizer = training.optimizer if training.optimizer is not None else trainer.make_optimizer("adamw", 1e-5)
    abstract = jax.eval_shape(lambda: {"policy": models.reference, "value": models.initial_value})
    params_shardings = {"policy": partitioner.param_shardings(abstract["policy"], models.policy_config),
                        "value": partitioner.param_shardings(abstract["value"], models.value_config)}
    opt_shardings = partitioner.opt_state_shardings(optimizer, abstract, params_shardings)
    manager = checkpoints.checkpoint_manager(model_dir, checkpoint.keep)
    restored = checkpoints.restore_latest(
        manager, partitioning.with_shardings(abstract, params_shardings),
        partitioning.with_shardings(jax.eval_shape(optimizer.init, abstract), opt_shardings))
    if restored:
      step, params, opt_state, position = restored
      kl_coefficient = float(position["kl_coefficient"])
      print(f"resuming from the checkpoint of step {step} in {model_dir}", flush=True)
    else:  # copies: the trained trees are donated to each update, the reference and reward stay
      copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree), out_shardings=params_shardings)
      step, kl_coefficient = 0, float(ppo.kl_coefficient)
      params = copy({"policy": models.reference, "value": models.initial_value})
      opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)
    if jax.process_index() == 0:
      checkpoints.write_model_config(model_dir, models.policy_config)
      model_inputs.write(model_dir, vocabulary, dataset.task_feature_lengths)
      if run_config is not None:
        outputs.write_run_config(model_dir, run_config)

    max_length = dataset.task_feature_lengths["targets"]
    eos_id = 1
    rollout = make_rollout(models, ppo, partitioner, max_length=max_length, seed=training.seed, eos_id=eos_id)
    update = make_update(models, ppo, optimizer, partitioner, params_shardings, opt_shardings, seed=training.seed)
    if from_tasks:
      batches = data.train_batches(dataset.mixture_or_task_name, dataset.task_feature_lengths, dataset.batch_size,
                                   split=dataset.split, seed=dataset.seed, start_step=step, use_cached=dataset.use_cached)
    else:
      batches = prompts(step)
    writer = train_lib.metric_writer(model_dir)
    progress = Progress("step", training.steps, "steps")
    progress.done = step
    every_log = train_lib.log_interval(training.log_every, training.steps)
    values, preempted, saved_step = {}, False, step

    def save():
      nonlocal saved_step
      if step != saved_step:
        lease_lib.check(lease)
        if checkpoints.save(manager, step, params, opt_state, {"batches": step, "kl_coefficient": kl_coefficient}):
          saved_step = step

    with checkpoints.PreemptionGuard(manager) as guard:
      while step < training.steps:
        input_ids = partitioner.global_batch({"input_ids": next(batches)["input_ids"]})["input_ids"]
        with partitioner.activate():
          batch, statistics = rollout(params, input_ids, step, kl_coefficient)
          params, opt_state, metrics = update(params, opt_state, batch, step)
        checkpoints.check_writes(manager)
        values = {name: float(value) for name, value in jax.device_get({**statistics, **metrics}).items()}
        if not all(map(math.isfinite, values.values())):
          raise train_lib.NonFiniteLossError(
              f"non-finite PPO statistics at step {step} ({', '.join(n for n, v in values.items() if not math.isfinite(v))}); "
              f"stopped without saving: the last good checkpoint is step {manager.latest_step()} in {model_dir}")
        used_coefficient = kl_coefficient
        if ppo.kl_target is not None:
          kl_coefficient = float(ppo_lib.adapted_kl_coefficient(kl_coefficient, values["exact_kl"], ppo.kl_target,
                                                                 dataset.batch_size, ppo.kl_horizon))
        step += 1
        progress.advance(1, round(values["response_length"] * dataset.batch_size))
        values["kl_coefficient"] = used_coefficient
        if step % every_log == 0 or step == training.steps:
          rates = progress.report(_statistics_line(values, used_coefficient))
          if writer is not None:
            writer.write_scalars(step, {**values, **rates})
        if guard.should_stop(step):
          preempted = True
          break
        if step % checkpoint.every == 0:
          save()
      save()
    checkpoints.finish(manager)
    if writer is not None:
      writer.flush()
    if comparison is not None and not preempted:
      if isinstance(comparison, configs.DatasetConfig):
        _, comparison_ids, _ = infer.task_inputs(comparison.mixture_or_task_name, comparison.split,
                                                 comparison.task_feature_lengths)
      else:
        comparison_ids = np.asarray(comparison)
      record = compare_with_best_of_n(models, params["policy"], comparison_ids, partitioner=partitioner,
                                      batch_size=dataset.batch_size, max_length=max_length,
                                      temperature=ppo.temperature, n_max=ppo.best_of_n_max, seed=training.seed,
                                      eos_id=eos_id)
      if jax.process_index() == 0:
        print(comparison_line(record), flush=True)
        write_comparison(model_dir, record)
    return train_lib.TrainResult(step=step, params=params, preempted=preempted, metrics=values,
                                 signal_number=guard.signal_number)
  finally:
    if lease is not None:
      lease.release()
    if jax.process_index() == 0:
      train_lib.remove_empty(reversed(created))
