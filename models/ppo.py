"""PPO with a KL penalty for an encoder-decoder policy (Stiennon et al. 2020, appendix B.1).

A rollout is a prompt (encoder input) and a sampled response (decoder tokens, EOS kept, 0 after).
State s_t is the prompt and the response's first t tokens; the decoder, fed the response shifted
right, sees exactly that at position t, so one teacher-forced pass gives log pi(y_t | s_t) and,
through a scalar head at every position, the value V(s_t).

Per-token reward (Ziegler et al. 2019, as summarize-from-feedback uses it): -beta times the
sampled KL estimate log pi(y_t | s_t) - log pi_ref(y_t | s_t) at every token, plus the reward
model's score of the whole response at its last token. Advantages are generalised advantage
estimates (Schulman et al. 2016) with the paper's gamma = 1 and lambda = 0.95, whitened over the
batch; the policy takes PPO's clipped objective, the value function a clipped squared error.

Every function works on a batch [B, T] with a mask of the response's tokens; nothing here is
specific to a mesh or a host.
"""
import functools

import jax
import jax.numpy as jnp

from models import decoding
from models.config import T5Config
from models.network import Transformer, shift_right
from models import reward as reward_lib


def response_mask(response_ids):
  """True at a response's tokens (EOS included, padding after it excluded) [B, T]."""
  return response_ids > 0


def next_token_log_probs(config: T5Config, params, input_ids, response_ids, temperature=1.0):
  """log pi(. | s_t) [B, T, vocab], from the logits divided by `temperature`, padding excluded:
  the distribution `models.decoding.sample` draws from, so that ratios and KL are the sampler's."""
  logits = Transformer(config).apply({"params": params}, input_ids, shift_right(response_ids))
  return jax.nn.log_softmax(decoding.without_padding(logits.astype(jnp.float32)) / temperature, axis=-1)


def chosen_and_entropy(log_probs, response_ids):
  """(log pi(y_t | s_t), entropy of pi(. | s_t)) [B, T] each from `next_token_log_probs`; zero at padding."""
  picked = jnp.take_along_axis(log_probs, response_ids[..., None], axis=-1)[..., 0]
  entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
  mask = response_mask(response_ids)
  return jnp.where(mask, picked, 0.0), jnp.where(mask, entropy, 0.0)


def log_probs_and_entropy(config: T5Config, params, input_ids, response_ids, temperature=1.0):
  """`chosen_and_entropy` of the policy `params` on the responses."""
  return chosen_and_entropy(next_token_log_probs(config, params, input_ids, response_ids, temperature), response_ids)


def exact_kl(log_probs, ref_log_probs, response_ids):
  """sum_v pi(v | s_t) (log pi(v | s_t) - log pi_ref(v | s_t)) [B, T] from two
  `next_token_log_probs`: the KL of the next token's distributions along the response's own
  states, over the whole vocabulary. Its sum over t has the same expectation as the sampled
  estimate's (`kl_estimate`), with less variance. Zero at padding."""
  kl = jnp.sum(jnp.exp(log_probs) * (log_probs - ref_log_probs), axis=-1)
  return jnp.where(response_mask(response_ids), kl, 0.0)


def values(config: T5Config, params, input_ids, response_ids):
  """V(s_t) [B, T]: a reward model's head read at every decoder position of the shifted response
  (the reward model reads it once, after the response's last token). Zero at padding."""
  transformer = {k: v for k, v in params.items() if k != reward_lib.HEAD}
  model = Transformer(config)
  encoded = model.apply({"params": transformer}, input_ids, method=Transformer.encode)
  cross_kvs = model.apply({"params": transformer}, encoded, method=Transformer.cross_kv)
  hidden = model.apply({"params": transformer}, cross_kvs, input_ids > 0, shift_right(response_ids),
                       method=Transformer.decode_hidden).astype(jnp.float32)
  head = params[reward_lib.HEAD]
  value = hidden @ head["kernel"][:, 0] + head["bias"][0]
  return jnp.where(response_mask(response_ids), value, 0.0)


def kl_estimate(log_probs, ref_log_probs, mask):
  """The sampled per-token KL estimate log pi - log pi_ref [B, T] (0 off the mask)."""
  return jnp.where(mask, log_probs - ref_log_probs, 0.0)


def penalized_rewards(scores, log_probs, ref_log_probs, mask, kl_coefficient):
  """Per-token rewards [B, T]: -beta * KL estimate at each token, plus the score [B] at the last."""
  rewards = -kl_coefficient * kl_estimate(log_probs, ref_log_probs, mask)
  last = jnp.maximum(mask.sum(axis=-1) - 1, 0)
  at_last = jax.nn.one_hot(last, mask.shape[-1], dtype=rewards.dtype) * mask
  return rewards + scores[:, None] * at_last


def advantages_and_returns(rewards, values_, mask, gamma=1.0, lam=0.95):
  """Generalised advantage estimates and returns [B, T]: delta_t = r_t + gamma V_{t+1} - V_t,
  A_t = delta_t + gamma lam A_{t+1}, both 0 past the response's end; returns are A_t + V_t."""
  mask = mask.astype(jnp.float32)
  next_values = jnp.pad(values_[:, 1:] * mask[:, 1:], ((0, 0), (0, 1)))
  deltas = (rewards + gamma * next_values - values_) * mask

  def backwards(carry, delta_and_mask):
    delta, m = delta_and_mask
    advantage = (delta + gamma * lam * carry) * m
    return advantage, advantage

  _, advantages = jax.lax.scan(backwards, jnp.zeros(rewards.shape[0]), (deltas.T, mask.T), reverse=True)
  advantages = advantages.T
  return advantages, (advantages + values_) * mask


def masked_mean(x, mask):
  mask = mask.astype(jnp.float32)
  return jnp.sum(x * mask) / jnp.maximum(mask.sum(), 1.0)


def whiten(x, mask):
  """x shifted and scaled to mean 0, variance 1 over the masked entries."""
  mean = masked_mean(x, mask)
  variance = masked_mean(jnp.square(x - mean), mask)
  return (x - mean) * jax.lax.rsqrt(variance + 1e-8) * mask


def policy_loss(log_probs, old_log_probs, advantages, mask, clip_range=0.2):
  """PPO's clipped surrogate, mean over tokens, and the share of tokens the clip bound."""
  ratio = jnp.exp(log_probs - old_log_probs)
  unclipped = -advantages * ratio
  clipped = -advantages * jnp.clip(ratio, 1.0 - clip_range, 1.0 + clip_range)
  loss = masked_mean(jnp.maximum(unclipped, clipped), mask)
  return loss, masked_mean((clipped > unclipped).astype(jnp.float32), mask)


def value_loss(values_, old_values, returns, mask, clip_range=0.2):
  """Half the clipped squared error of the values (the new values kept within clip_range of the
  rollout's), mean over tokens, and the share of tokens the clip bound."""
  clipped_values = old_values + jnp.clip(values_ - old_values, -clip_range, clip_range)
  unclipped = jnp.square(values_ - returns)
  clipped = jnp.square(clipped_values - returns)
  loss = 0.5 * masked_mean(jnp.maximum(unclipped, clipped), mask)
  return loss, masked_mean((clipped > unclipped).astype(jnp.float32), mask)


def adapted_kl_coefficient(kl_coefficient, kl, target, episodes, horizon):
  """Ziegler et al. (2019)'s adaptive KL controller: beta grows by episodes / horizon times the
  relative error of the measured KL (clipped to +-20%), so the KL settles near `target`."""
  error = jnp.clip(kl / target - 1.0, -0.2, 0.2)
  return kl_coefficient * (1.0 + error * episodes / horizon)


@functools.partial(jax.jit, static_argnames=("config", "temperature"))
def sequence_kl(config: T5Config, params, ref_params, input_ids, response_ids, temperature=1.0):
  """Each response's KL from the reference [B]: `exact_kl` summed over its tokens (an unbiased
  estimate of the sequences' KL, with less variance than the sampled estimate's sum)."""
  return exact_kl(next_token_log_probs(config, params, input_ids, response_ids, temperature),
                  next_token_log_probs(config, ref_params, input_ids, response_ids, temperature),
                  response_ids).sum(axis=-1)
