"""The reward head: where it reads, its losses, normalisation, and that it learns a content preference."""
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from models.config import T5Config
from models.network import Transformer
from models.reward import init_reward_params, listwise_loss, pairwise_loss, reward, reward_packed
from tests.conftest import PROJECT_ROOT

CONFIG = T5Config(vocab_size=32, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                  num_encoder_layers=2, num_decoder_layers=2)


def test_reward_reads_last_real_token_and_head_init():
  params = init_reward_params(CONFIG, jax.random.PRNGKey(0))
  kernel = np.asarray(params["reward_head"]["kernel"])
  assert kernel.shape == (32, 1) and abs(kernel.std() - (32 + 1) ** -0.5) < 0.1
  input_ids = jnp.array([[5, 6, 7, 0], [8, 9, 0, 0]])
  responses = jnp.array([[[3, 4, 0], [3, 4, 5]], [[6, 0, 0], [6, 7, 8]]])
  values = np.asarray(reward(CONFIG, params, input_ids, responses))
  model = Transformer(CONFIG)
  network = {"params": {k: v for k, v in params.items() if k != "reward_head"}}
  for b in range(2):
    for k in range(2):
      row = responses[b, k]
      n = int((row > 0).sum())
      encoded = model.apply(network, input_ids[b:b + 1], method=Transformer.encode)
      kv = model.apply(network, encoded, method=Transformer.cross_kv)
      hidden = model.apply(network, kv, input_ids[b:b + 1] > 0, row[None, :n], method=Transformer.decode_hidden)
      expected = float(hidden[0, n - 1] @ params["reward_head"]["kernel"][:, 0])
      assert abs(values[b, k] - expected) < 1e-5
  single = np.asarray(reward(CONFIG, params, input_ids, responses[:, 1]))
  np.testing.assert_allclose(single, values[:, 1], atol=1e-6)


def test_packed_responses_get_the_rewards_they_get_alone():
  """Evaluation's layout: each input's responses end to end in one decoder row, numbered by
  segment. The rewards are `reward`'s, read at each response's own last token."""
  params = init_reward_params(CONFIG, jax.random.PRNGKey(2))
  input_ids = jnp.array([[5, 6, 7, 0], [8, 9, 0, 0]])
  responses = jnp.array([[[3, 4, 0, 0], [3, 4, 5, 9]], [[6, 0, 0, 0], [6, 7, 8, 0]]])
  packed = jnp.array([[3, 4, 3, 4, 5, 9, 0, 0], [6, 6, 7, 8, 0, 0, 0, 0]])
  segments = jnp.array([[1, 1, 2, 2, 2, 2, 0, 0], [1, 2, 2, 2, 0, 0, 0, 0]])
  values = np.asarray(reward_packed(CONFIG, params, input_ids, packed, segments, num_responses=2))
  np.testing.assert_allclose(values, np.asarray(reward(CONFIG, params, input_ids, responses)), atol=1e-5, rtol=0)


def test_losses_equal_hand_computation():
  good, bad = jnp.array([1.0, -0.5]), jnp.array([0.0, 0.5])
  expected = np.mean([np.log1p(np.exp(0.0 - 1.0)), np.log1p(np.exp(0.5 + 0.5))])
  assert abs(float(pairwise_loss(good, bad)) - expected) < 1e-6
  rewards = jnp.array([[2.0, 0.0, 1.0], [0.5, 0.5, 9.0]])
  labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
  mask = jnp.array([[True, True, True], [True, True, False]])
  row0 = -(2.0 - np.log(np.exp(2.0) + 1 + np.exp(1.0)))
  row1 = -(0.5 - np.log(2 * np.exp(0.5)))
  assert abs(float(listwise_loss(rewards, labels, mask)) - (row0 + row1) / 2) < 1e-5


def _preference_pairs(rng, count):
  """Good responses use tokens 2..16, bad ones 17..31; lengths are drawn alike for both."""
  inputs = rng.integers(2, 32, size=(count, 6))
  good = np.zeros((count, 5), np.int32)
  bad = np.zeros((count, 5), np.int32)
  for i in range(count):
    n_good, n_bad = rng.integers(1, 6), rng.integers(1, 6)
    good[i, :n_good] = rng.integers(2, 17, size=n_good)
    bad[i, :n_bad] = rng.integers(17, 32, size=n_bad)
  return inputs, good, bad


def test_reward_model_learns_content_preference():
  rng = np.random.default_rng(0)
  params = init_reward_params(CONFIG, jax.random.PRNGKey(0))
  optimizer = optax.adam(3e-3)
  state = optimizer.init(params)

  @jax.jit
  def step(params, state, inputs, good, bad):
    def loss_fn(p):
      rewards = reward(CONFIG, p, inputs, jnp.stack([good, bad], axis=1))
      return pairwise_loss(rewards[:, 0], rewards[:, 1])
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, state = optimizer.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  for _ in range(300):
    params, state, loss = step(params, state, *_preference_pairs(rng, 16))
  inputs, good, bad = _preference_pairs(np.random.default_rng(99), 200)
  accuracy = float(np.mean(np.asarray(reward(CONFIG, params, inputs, good) > reward(CONFIG, params, inputs, bad))))
  print(f"held-out pairwise accuracy {accuracy:.3f}, final loss {float(loss):.4f}")
  assert accuracy >= 0.9


def test_models_import_without_tensorflow_or_seqio():
  code = ("import models.network, models.scoring, models.reward, models.decoding, models.checkpoint_import, sys; "
          "assert 'tensorflow' not in sys.modules and 'seqio' not in sys.modules, sorted(sys.modules)")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=PROJECT_ROOT)
