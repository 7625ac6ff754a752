"""Cached decoding equals the full forward and HF's greedy generate; nucleus sampling stays in the top-p set."""
import hypothesis
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from models.checkpoint_import import load_hf_t5
from models.decoding import choose_tokens, nucleus_mask, sample, without_padding
from models.network import Transformer, init_cache, shift_right
from tests.models.hf_reference import make_hf_t5, random_ids


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  directory = tmp_path_factory.mktemp("hf_t5_decoding")
  hf_model = make_hf_t5(directory, seed=5)
  config, params = load_hf_t5(directory)
  return hf_model, config, params


def test_cached_steps_equal_full_forward(imported):
  _, config, params = imported
  rng = np.random.default_rng(0)
  input_ids = jnp.asarray(random_ids(rng, (2, 11), config.vocab_size, pad_from=[11, 6]))
  targets = jnp.asarray(random_ids(rng, (2 * 3, 9), config.vocab_size))  # 3 rows share each context
  model = Transformer(config)
  variables = {"params": params}
  encoded = model.apply(variables, input_ids, method=Transformer.encode)
  full = model.apply(variables, encoded, input_ids > 0, shift_right(targets), method=Transformer.decode)
  cross_kvs = model.apply(variables, encoded, method=Transformer.cross_kv)
  cache = init_cache(config, 6, 9)
  decoder_inputs = shift_right(targets)
  for position in range(9):
    step_logits, cache = model.apply(variables, cross_kvs, input_ids > 0, decoder_inputs[:, position:position + 1],
                                     cache, position, method=Transformer.decode_step)
    np.testing.assert_allclose(np.asarray(step_logits), np.asarray(full[:, position]), atol=1e-4, rtol=0)


def test_greedy_matches_hf_generate(imported):
  hf_model, config, params = imported
  rng = np.random.default_rng(1)
  input_ids = random_ids(rng, (3, 10), config.vocab_size, pad_from=[10, 7, 4])
  steps = 24
  ours = np.asarray(sample(config, params, input_ids, jax.random.PRNGKey(0), max_length=steps, greedy=True))[:, 0]
  # use_cache=False: HF's cache fails when decoder and encoder depths differ; uncached is the plainer reference.
  with torch.inference_mode():
    inputs = torch.tensor(input_ids, dtype=torch.long)
    hf = hf_model.generate(input_ids=inputs, attention_mask=inputs > 0, do_sample=False, max_new_tokens=steps,
                           eos_token_id=1, pad_token_id=0, decoder_start_token_id=0,
                           use_cache=False).numpy()[:, 1:]
  for row in range(3):
    length = len(hf[row][hf[row] > 0]) if 1 not in hf[row] else list(hf[row]).index(1) + 1
    assert length >= 20, "the random model stopped too early to compare 20 steps"
    np.testing.assert_array_equal(ours[row, :length], hf[row, :length])


def test_top_p_near_zero_is_greedy_and_same_key_same_sample(imported):
  _, config, params = imported
  input_ids = random_ids(np.random.default_rng(2), (2, 8), config.vocab_size)
  greedy = sample(config, params, input_ids, jax.random.PRNGKey(0), max_length=12, greedy=True)
  tiny_p = sample(config, params, input_ids, jax.random.PRNGKey(7), max_length=12, num_samples=3, top_p=1e-6)
  np.testing.assert_array_equal(np.asarray(tiny_p), np.repeat(np.asarray(greedy), 3, axis=1))
  first = sample(config, params, input_ids, jax.random.PRNGKey(3), max_length=12, num_samples=4, top_p=0.9)
  again = sample(config, params, input_ids, jax.random.PRNGKey(3), max_length=12, num_samples=4, top_p=0.9)
  other = sample(config, params, input_ids, jax.random.PRNGKey(4), max_length=12, num_samples=4, top_p=0.9)
  np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
  assert not np.array_equal(np.asarray(first), np.asarray(other))


def test_sampling_stops_at_eos(imported):
  _, config, params = imported
  input_ids = random_ids(np.random.default_rng(3), (4, 8), config.vocab_size)
  # Temperature 100 makes the sampler nearly uniform, so EOS (id 1) turns up within 60 steps.
  tokens = np.asarray(sample(config, params, input_ids, jax.random.PRNGKey(0), max_length=60, num_samples=4,
                             temperature=100.0))
  rows = tokens.reshape(-1, 60)
  assert any(1 in row for row in rows)
  for row in rows:
    if 1 in row:
      assert not row[list(row).index(1) + 1:].any()


def _top_p_set(logits, top_p):
  """Independent definition: a token is in the set when the tokens strictly more probable than it
  have total mass below top_p."""
  probs = np.exp(logits - logits.max())
  probs /= probs.sum()
  return {j for j in range(len(probs)) if probs[probs > probs[j]].sum() < top_p}


# Jitted as the sampler runs them (inside one jit), so that each example does not trace its loop anew.
_jitted_nucleus_mask = jax.jit(nucleus_mask)
_jitted_choose_tokens = jax.jit(choose_tokens, static_argnames=("greedy",))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    # Three vocabulary sizes, not every size from 2 to 12: each new shape compiles the sampler again.
    logits=hnp.arrays(np.float32, st.sampled_from([2, 5, 12]), elements=st.floats(-6, 6, width=32)),
    top_p=st.floats(0.05, 0.99),
    seed=st.integers(0, 2**16))
def test_nucleus_never_leaves_top_p_set(logits, top_p, seed):
  allowed = _top_p_set(logits.astype(np.float64), top_p)
  mask = np.asarray(_jitted_nucleus_mask(jnp.asarray(logits)[None], top_p))[0]
  assert set(np.flatnonzero(mask)) <= allowed | _ties_at_edge(logits, allowed)
  draws = _jitted_choose_tokens(jnp.broadcast_to(jnp.asarray(logits), (64, len(logits))),
                                jax.random.PRNGKey(seed), temperature=1.0, top_p=top_p, greedy=False)
  # The sampler never draws id 0 (padding): its top-p set is that of the other ids.
  kept = np.asarray(_jitted_nucleus_mask(without_padding(jnp.asarray(logits)[None]), top_p))[0]
  assert 0 not in kept.nonzero()[0] and set(np.asarray(draws).tolist()) <= set(np.flatnonzero(kept))


@pytest.mark.parametrize("top_p", [0.0, 0.3, 0.9, 0.999, 1.0])
def test_nucleus_over_a_full_vocabulary_matches_the_sorted_definition(top_p):
  # T5's vocabulary size, peaked like a trained model's next-token distribution.
  logits = np.random.default_rng(5).standard_normal((3, 32128)).astype(np.float32) * np.float32(4.0)
  mask = np.asarray(nucleus_mask(jnp.asarray(logits), top_p))
  for row, kept in zip(logits, mask):
    probs = np.exp(row.astype(np.float64) - row.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    mass_before = np.cumsum(probs[order]) - probs[order]  # no ties among random floats
    # float32 masses decide tokens whose mass before them is within 1e-6 of top_p either way.
    inside = set(order[mass_before < top_p - 1e-6].tolist()) | {int(np.argmax(row))}
    outside = set(order[mass_before >= top_p + 1e-6].tolist()) if top_p < 1.0 else set()
    chosen = set(np.flatnonzero(kept).tolist())
    assert inside <= chosen and not chosen & outside
    assert top_p < 1.0 or len(chosen) == row.size


def _ties_at_edge(logits, allowed):
  # float32 softmax may round two nearly equal tokens to one probability; both are then kept.
  edge = min(logits[j] for j in allowed)
  return {j for j in range(len(logits)) if abs(logits[j] - edge) < 1e-5}


