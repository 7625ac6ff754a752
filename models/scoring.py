"""Candidate likelihoods: the sum (or per-token mean) of a candidate's scored token log-probabilities.

Which target tokens count is a score mask [B, K, T]: by default every real (non-padding) token,
EOS included, as t5x scores a target. `span_score_mask` gives T5's span-corruption reading of a
candidate `<extra_id_0> span <extra_id_1> EOS`: the sentinels and EOS are conditioned on but
only the span's own tokens are scored (TimeDial §4: "normalised by the span length").

`score_candidates` encodes each context once, computes its cross-attention keys/values once,
and decodes its K candidates against them in one batch. `score_packed` does the same with each
context's candidates packed end to end into one decoder row (segments that attend only to
themselves): offline evaluation's layout, where candidates of unequal lengths would otherwise
each be padded to the longest (TimeDial's four 5-58 byte options, issue 14). `score_pairs` is
the reference path (one full forward per (input, candidate) pair, as t5x's `score_batch`), kept
for checking and benchmarking.

NORMALIZATIONS turns a candidate's summed log-likelihood into its score, by name (the gin
setting NORMALIZATION, used by offline evaluation and evaluation during training alike).
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


def span_score_mask(candidate_ids, first_sentinel_id: int | None, eos_id: int = 1):
  """Which tokens of candidates [..., T] are scored: [..., T] bool.

  A candidate that starts with a sentinel (an id >= `first_sentinel_id`) is in T5's
  span-corruption form: only the tokens after it and before the next sentinel count (never EOS,
  which ends a candidate cut short before its closing sentinel). Any other candidate counts
  every non-padding token. Without sentinels (`first_sentinel_id` None), the non-padding tokens.
  Works on numpy and jax arrays alike.
  """
  real = candidate_ids > 0
  if first_sentinel_id is None:
    return real
  sentinel = candidate_ids >= first_sentinel_id
  inside_span = (sentinel.cumsum(axis=-1) == 1) & ~sentinel & real & (candidate_ids != eos_id)
  return (sentinel[..., :1] & inside_span) | (~sentinel[..., :1] & real)


def _per(total, count):
  """total / count, a count of 0 (nothing scored) taken as 1; numpy and jax (traced) alike."""
  return total / (count + (count == 0))


# Every normalisation of a likelihood score, by its gin name (NORMALIZATION): fn(summed
# log-likelihood of the scored tokens [B, K], log-likelihood given an empty context or None,
# counts {"tokens", "scored_chars", "scored_bytes"} [B, K]) -> scores [B, K], and what the
# report calls it. "char" and "byte" are lm-evaluation-harness's acc_norm and per-byte
# normalisation, "none" its acc, and "mutual_information" its acc_mutual_info (the empty context
# is the encoder input [EOS]).
NORMALIZATIONS = {
    "token": (lambda total, empty, n: _per(total, n["tokens"]), "mean log-likelihood per scored token"),
    "char": (lambda total, empty, n: _per(total, n["scored_chars"]),
             "log-likelihood per character of the scored text (acc_norm)"),
    "byte": (lambda total, empty, n: _per(total, n["scored_bytes"]),
             "log-likelihood per UTF-8 byte of the scored text"),
    "none": (lambda total, empty, n: total, "summed log-likelihood of the scored tokens"),
    "mutual_information": (lambda total, empty, n: total - empty,
                           "log p(candidate | context) - log p(candidate | empty context)"),
}


def _per_token(total, scored_tokens):
  """`length_normalize`'s score: NORMALIZATIONS' "token"."""
  return NORMALIZATIONS["token"][0](total, None, {"tokens": scored_tokens})


def sequence_scores(token_scores, score_mask, length_normalize):
  total = jnp.where(score_mask, token_scores, 0.0).sum(axis=-1)
  if not length_normalize:
    return total
  return _per_token(total, score_mask.sum(axis=-1))


@functools.partial(jax.jit, static_argnames=("config", "length_normalize"))
def score_candidates(config: T5Config, params, input_ids, candidate_ids, score_mask=None, *,
                     length_normalize=True):
  """Scores [B, K] float32 of candidates [B, K, T] given contexts [B, L] (0 = padding everywhere).

  Each candidate holds its target tokens as the caller built them (EOS included if appended);
  its score sums (or with `length_normalize` averages) the log-likelihoods of the tokens
  `score_mask` [B, K, T] marks (default: every non-padding token). A candidate with no scored
  token scores 0.
  """
  batch, num_candidates, steps = candidate_ids.shape
  model = Transformer(config)
  variables = {"params": params}
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  rows = candidate_ids.reshape(batch * num_candidates, steps)
  hidden = model.apply(variables, cross_kvs, input_ids > 0, shift_right(rows), method=Transformer.decode_hidden)
  logits = model.apply(variables, hidden, method=Transformer.logits)
  mask = rows > 0 if score_mask is None else score_mask.reshape(rows.shape)
  scores = sequence_scores(token_log_likelihoods(logits, rows), mask, length_normalize)
  return scores.reshape(batch, num_candidates)


@functools.partial(jax.jit, static_argnames=("config", "length_normalize"))
def score_pairs(config: T5Config, params, input_ids, candidate_ids, score_mask=None, *,
                length_normalize=True):
  """The naive reference: the context is repeated and re-encoded for every candidate."""
  batch, num_candidates, steps = candidate_ids.shape
  inputs = jnp.repeat(input_ids, num_candidates, axis=0)
  rows = candidate_ids.reshape(batch * num_candidates, steps)
  logits = Transformer(config).apply({"params": params}, inputs, shift_right(rows))
  mask = rows > 0 if score_mask is None else score_mask.reshape(rows.shape)
  scores = sequence_scores(token_log_likelihoods(logits, rows), mask, length_normalize)
  return scores.reshape(batch, num_candidates)


def packed_decoder_inputs(packed_ids, segment_ids):
  """Teacher-forcing inputs of packed rows [B, S]: each segment shifted right on its own, so that
  it starts with T5's start token 0, as `shift_right` starts a row."""
  continues = segment_ids == shift_right(segment_ids)
  return jnp.where(continues, shift_right(packed_ids), 0)


def segment_sums(values, segment_ids, num_segments: int):
  """[B, K]: the sum of values [B, S] over each segment 1..K of segment_ids [B, S] (0 is padding)."""
  own = segment_ids[..., None] == jnp.arange(1, num_segments + 1)
  return jnp.where(own, values[..., None], 0).sum(axis=1)


@functools.partial(jax.jit, static_argnames=("config", "num_candidates", "length_normalize"))
def score_packed(config: T5Config, params, input_ids, packed_ids, segment_ids, score_mask, *, num_candidates: int,
                 length_normalize=True):
  """`score_candidates`' scores [B, K] from packed candidates: row b of packed_ids [B, S] holds
  context b's candidates one after another, segment_ids [B, S] numbers them 1..K (0 = padding),
  score_mask [B, S] marks the scored tokens. A candidate with no scored token scores 0."""
  model = Transformer(config)
  variables = {"params": params}
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  hidden = model.apply(variables, cross_kvs, input_ids > 0, packed_decoder_inputs(packed_ids, segment_ids),
                       segment_ids=segment_ids, method=Transformer.decode_hidden)
  logits = model.apply(variables, hidden, method=Transformer.logits)
  token_scores = jnp.where(score_mask, token_log_likelihoods(logits, packed_ids), 0.0)
  total = segment_sums(token_scores, segment_ids, num_candidates)
  if not length_normalize:
    return total
  return _per_token(total, segment_sums(score_mask.astype(jnp.int32), segment_ids, num_candidates))
