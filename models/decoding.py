"""Autoregressive decoding with a key/value cache: greedy, temperature and nucleus sampling, best-of-N.

Each context is encoded once; its N samples share that encoding and its cross-attention
keys/values (rows b * N .. b * N + N - 1 belong to context b).
"""
import functools
import math

import jax
import jax.numpy as jnp

from models.config import T5Config
from models.network import Transformer, init_cache
from models.reward import reward


def nucleus_mask(logits, top_p):
  """True for the tokens of the top-p set: those whose strictly more probable tokens hold less than top_p.

  That is the most probable tokens whose mass first reaches top_p, with ties at the edge all kept;
  the most probable token is always kept (so top_p -> 0 is greedy), and top_p >= 1 keeps all.
  Rather than sorting the vocabulary at every step (on a CPU the sort cost more than the rest of
  the step's sampling), the edge probability is found by bisection: the bit patterns of
  non-negative floats order like the floats, so 32 halvings of the int32 range find the smallest
  threshold t with mass(p > t) < top_p exactly.
  """
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  as_float = lambda bits: jax.lax.bitcast_convert_type(bits, jnp.float32)[..., None]
  mass_above = lambda bits: jnp.sum(jnp.where(probs > as_float(bits), probs, 0.0), axis=-1)

  def halve(_, bounds):
    low, high = bounds  # mass_above(high) < top_p; mass_above(low) >= top_p, or low = -1
    middle = low + (high - low) // 2
    below = (mass_above(middle) < top_p) & (middle > low)  # middle == low once converged
    return jnp.where(below, low, middle), jnp.where(below, middle, high)

  largest = jnp.max(probs, axis=-1)
  high = jax.lax.bitcast_convert_type(largest, jnp.int32)
  _, edge = jax.lax.fori_loop(0, 32, halve, (jnp.full_like(high, -1), high))
  # top_p = 1 is plain sampling, though float32 masses of the tail round up to 1.
  return (probs >= as_float(edge)) | (probs >= largest[..., None]) | (top_p >= 1.0)


def without_padding(logits):
  """Logits [..., vocab] with id 0 (T5's padding and decoder start) impossible: a response holds
  no padding before its EOS, or everything after would read it as ended there (a random or barely
  trained model gives id 0 as much mass as any other). Finite, so that a log-probability times its
  probability is 0 there, not NaN."""
  return logits.at[..., 0].set(-1e9)


def choose_tokens(logits, rng, *, temperature, top_p, greedy):
  """Next tokens [N] from logits [N, vocab]; never id 0 (`without_padding`)."""
  logits = without_padding(logits.astype(jnp.float32))
  if greedy:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  scaled = logits.astype(jnp.float32) / jnp.maximum(temperature, 1e-6)
  filtered = jnp.where(nucleus_mask(scaled, top_p), scaled, -jnp.inf)
  return jax.random.categorical(rng, filtered, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("config", "max_length", "num_samples", "greedy", "eos_id"))
def sample(config: T5Config, params, input_ids, rng, *, max_length, num_samples=1, temperature=1.0,
           top_p=1.0, greedy=False, eos_id=1):
  """Tokens [B, num_samples, max_length]: EOS is kept, everything after it is 0 (padding)."""
  model = Transformer(config)
  variables = {"params": params}
  batch = input_ids.shape[0]
  rows = batch * num_samples
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)

  def step(carry, position):
    token, cache, done, key = carry
    logits, cache = model.apply(variables, cross_kvs, input_ids > 0, token[:, None], cache, position,
                                method=Transformer.decode_step)
    key, step_key = jax.random.split(key)
    chosen = choose_tokens(logits, step_key, temperature=temperature, top_p=top_p, greedy=greedy)
    chosen = jnp.where(done, 0, chosen)
    return (chosen, cache, done | (chosen == eos_id), key), chosen

  start = (jnp.zeros((rows,), jnp.int32), init_cache(config, rows, max_length), jnp.zeros((rows,), bool), rng)
  _, tokens = jax.lax.scan(step, start, jnp.arange(max_length))
  return tokens.T.reshape(batch, num_samples, max_length)


def best_of_n_kl(n: int) -> float:
  """The KL divergence of best-of-n from the sampling policy (Stiennon et al. 2020): log n - (n-1)/n."""
  return math.log(n) - (n - 1) / n


def best_of_n(config: T5Config, params, reward_config: T5Config, reward_params, input_ids, rng, *, n, max_length,
              top_p=0.95, temperature=1.0, eos_id=1):
  """Samples n responses per input and keeps the one the reward model scores highest.

  Returns `tokens` [B, T] (the best), `samples` [B, n, T], `rewards` [B, n], `best` [B] and `kl`.
  """
  samples = sample(config, params, input_ids, rng, max_length=max_length, num_samples=n,
                   temperature=temperature, top_p=top_p, eos_id=eos_id)
  rewards = reward(reward_config, reward_params, input_ids, samples)
  best = jnp.argmax(rewards, axis=-1)
  tokens = jnp.take_along_axis(samples, best[:, None, None], axis=1)[:, 0]
  return {"tokens": tokens, "samples": samples, "rewards": rewards, "best": best, "kl": best_of_n_kl(n)}
