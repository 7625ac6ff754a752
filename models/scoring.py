"""Candidate likelihoods: the sum (or per-token mean) of a candidate's token log-probabilities.

`score_candidates` encodes each context once, computes its cross-attention keys/values once,
and decodes its K candidates against them in one batch. `score_pairs` is the reference path
(one full forward per (input, candidate) pair, as t5x's `score_batch`), kept for checking and
benchmarking.
"""
import functools

import jax
import jax.numpy as jnp

from models.config import T5Config
from models.network import Transformer, shift_right


def token_log_likelihoods(logits, target_ids):
  """log p(target_t | ...) [..., T] from logits [..., T, vocab]; zero where target_ids == 0 (padding)."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  picked = jnp.take_along_axis(log_probs, target_ids[..., None], axis=-1)[..., 0]
  return jnp.where(target_ids > 0, picked, 0.0)


def sequence_scores(token_scores, target_ids, length_normalize):
  total = token_scores.sum(axis=-1)
  if not length_normalize:
    return total
  return total / jnp.maximum((target_ids > 0).sum(axis=-1), 1)


@functools.partial(jax.jit, static_argnames=("config", "length_normalize"))
def score_candidates(config: T5Config, params, input_ids, candidate_ids, *, length_normalize=True):
  """Scores [B, K] float32 of candidates [B, K, T] given contexts [B, L] (0 = padding everywhere).

  Each candidate holds its target tokens as the caller built them (EOS included if appended).
  A candidate of all padding scores 0.
  """
  batch, num_candidates, steps = candidate_ids.shape
  model = Transformer(config)
  variables = {"params": params}
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  rows = candidate_ids.reshape(batch * num_candidates, steps)
  hidden = model.apply(variables, cross_kvs, input_ids > 0, shift_right(rows), method=Transformer.decode_hidden)
  logits = model.apply(variables, hidden, method=Transformer.logits)
  scores = sequence_scores(token_log_likelihoods(logits, rows), rows, length_normalize)
  return scores.reshape(batch, num_candidates)


@functools.partial(jax.jit, static_argnames=("config", "length_normalize"))
def score_pairs(config: T5Config, params, input_ids, candidate_ids, *, length_normalize=True):
  """The naive reference: the context is repeated and re-encoded for every candidate."""
  batch, num_candidates, steps = candidate_ids.shape
  inputs = jnp.repeat(input_ids, num_candidates, axis=0)
  rows = candidate_ids.reshape(batch * num_candidates, steps)
  logits = Transformer(config).apply({"params": params}, inputs, shift_right(rows))
  scores = sequence_scores(token_log_likelihoods(logits, rows), rows, length_normalize)
  return scores.reshape(batch, num_candidates)
