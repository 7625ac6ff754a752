"""A scalar reward head on the encoder-decoder, and the losses that train it from comparisons.

The input goes to the encoder, the response to the decoder; the reward reads the decoder's final
hidden state at the response's last real token (the first position that has seen all of it).
"""
import functools

import jax
import jax.numpy as jnp

from models.config import T5Config
from models.network import Transformer, init_params

HEAD = "reward_head"


def init_reward_params(config: T5Config, rng, transformer_params=None):
  """Transformer parameters (given, or random) plus a head with weights from N(0, 1/(d_model + 1))."""
  network_rng, head_rng = jax.random.split(rng)
  params = dict(transformer_params if transformer_params is not None else init_params(config, network_rng))
  std = (config.emb_dim + 1) ** -0.5
  params[HEAD] = {"kernel": std * jax.random.normal(head_rng, (config.emb_dim, 1), jnp.float32),
                  "bias": jnp.zeros((1,), jnp.float32)}
  return params


@functools.partial(jax.jit, static_argnames=("config", "deterministic"))
def reward(config: T5Config, params, input_ids, response_ids, deterministic=True, dropout_rng=None):
  """Rewards [B] for responses [B, T], or [B, K] for K responses per input [B, K, T] (0 = padding)."""
  single = response_ids.ndim == 2
  responses = response_ids[:, None] if single else response_ids
  batch, num_responses, steps = responses.shape
  rows = responses.reshape(batch * num_responses, steps)
  model = Transformer(config)
  variables = {"params": {k: v for k, v in params.items() if k != HEAD}}
  rngs = None if dropout_rng is None else {"dropout": dropout_rng}
  encoded = model.apply(variables, input_ids, deterministic, method=Transformer.encode, rngs=rngs)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  hidden = model.apply(variables, cross_kvs, input_ids > 0, rows, deterministic,
                       method=Transformer.decode_hidden, rngs=rngs)
  last = jnp.maximum((rows > 0).sum(axis=-1) - 1, 0)
  final = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0].astype(jnp.float32)
  values = (final @ params[HEAD]["kernel"] + params[HEAD]["bias"])[:, 0].reshape(batch, num_responses)
  return values[:, 0] if single else values


@functools.partial(jax.jit, static_argnames=("config", "num_responses"))
def reward_packed(config: T5Config, params, input_ids, packed_ids, segment_ids, *, num_responses: int):
  """`reward`'s [B, K] from responses packed one after another into rows [B, S], numbered 1..K by
  segment_ids [B, S] (0 = padding; `models.scoring.score_packed`'s layout). A response with no
  token reads position 0 (its reward means nothing, as `reward`'s for an all-padding row)."""
  model = Transformer(config)
  variables = {"params": {k: v for k, v in params.items() if k != HEAD}}
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  hidden = model.apply(variables, cross_kvs, input_ids > 0, packed_ids, segment_ids=segment_ids,
                       method=Transformer.decode_hidden)
  own = (segment_ids[..., None] == jnp.arange(1, num_responses + 1)) & (packed_ids > 0)[..., None]  # [B, S, K]
  last = jnp.max(jnp.where(own, jnp.arange(packed_ids.shape[1])[:, None], 0), axis=1)  # [B, K]
  final = jnp.take_along_axis(hidden, last[..., None], axis=1).astype(jnp.float32)
  return final @ params[HEAD]["kernel"][:, 0] + params[HEAD]["bias"][0]


def shift_to_zero_mean(params, mean_reward):
  """`params` with the head's bias lowered by `mean_reward`, the mean reward of a reference set.

  Stiennon et al. (2020, §3.4) normalise the reward model so that the reference summaries score
  0 on average. A reward is linear in the bias, so the set then scores mean 0, and the offset is a
  parameter like any other: it survives saving and restoring. Pairwise and listwise losses only
  see reward differences, so the shift changes none of them.
  """
  head = dict(params[HEAD])
  head["bias"] = head["bias"] - jnp.asarray(mean_reward, head["bias"].dtype)
  return {**params, HEAD: head}


def pairwise_loss(r_good, r_bad):
  """Mean of log(1 + exp(r_bad - r_good)): the comparison loss of HEAP and summarize-from-feedback."""
  return jnp.mean(jax.nn.softplus(r_bad - r_good))


def listwise_loss(rewards, labels, mask=None):
  """Softmax cross-entropy over K candidates [B, K]; labels mark the best (several share the mass)."""
  if mask is None:
    mask = jnp.ones_like(rewards, dtype=bool)
  log_probs = jax.nn.log_softmax(jnp.where(mask, rewards, -1e9), axis=-1)
  target = labels * mask
  target = target / jnp.maximum(target.sum(axis=-1, keepdims=True), 1e-9)
  return -jnp.mean(jnp.sum(target * jnp.where(mask, log_probs, 0.0), axis=-1))

