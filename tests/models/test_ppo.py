"""PPO's pure functions (models/ppo.py) against computations written out here: GAE and returns
against a plain backward loop, the KL-penalised rewards, the clipped policy and value losses on
hand-worked cases, whitening, the adaptive KL controller, the value head's causal reading, and the
KL estimates against the exact KL of the sampler's whole distribution over responses, enumerated
over a six-id vocabulary.

These are what PPO optimises and reports; a sign, an off-by-one at the response's end or a mask in
the wrong place trains a policy that still runs, only wrongly, so each is checked by value.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import ppo
from models.config import T5Config
from models.decoding import sample
from models.network import Transformer, init_params
from models.reward import init_reward_params

# Vocabulary 6: 0 is padding (and the decoder's start token), 1 is EOS, 2..5 are words.
CONFIG = T5Config(vocab_size=6, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                  num_encoder_layers=1, num_decoder_layers=1)
EOS = 1
MAX_LENGTH = 3
TEMPERATURE = 0.8
PROMPT = np.array([[3, 4, 5, 2, 0]], np.int32)


def _mask(lengths, steps):
  """Responses of the given lengths, padded at the end: [B, T] bool."""
  return np.arange(steps)[None, :] < np.asarray(lengths)[:, None]


# ---- advantages_and_returns ----

def _gae_loop(rewards, values, lengths, gamma, lam):
  """GAE by a plain backward loop over each response's own tokens; V past its end is 0."""
  advantages = np.zeros_like(rewards)
  for b, n in enumerate(lengths):
    following = 0.0
    for t in reversed(range(n)):
      next_value = values[b, t + 1] if t + 1 < n else 0.0
      delta = rewards[b, t] + gamma * next_value - values[b, t]
      following = delta + gamma * lam * following
      advantages[b, t] = following
  return advantages


def test_advantages_and_returns_match_a_backward_loop():
  rng = np.random.default_rng(0)
  lengths = [7, 4, 1, 6]
  mask = _mask(lengths, 7)
  # Rewards and values off the mask are noise too: the function must not read them.
  rewards = rng.normal(size=(4, 7)).astype(np.float32)
  values = rng.normal(size=(4, 7)).astype(np.float32)
  for gamma, lam in [(0.9, 0.8), (1.0, 0.95)]:
    advantages, returns = ppo.advantages_and_returns(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(mask),
                                                     gamma, lam)
    expected = _gae_loop(rewards.astype(np.float64), values.astype(np.float64), lengths, gamma, lam)
    np.testing.assert_allclose(np.asarray(advantages), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(returns), np.where(mask, expected + values, 0.0), atol=1e-5, rtol=0)

  # gamma = lambda = 1: A_t is the reward still to come minus V_t, the return the reward to come.
  advantages, returns = ppo.advantages_and_returns(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(mask),
                                                   1.0, 1.0)
  for b, n in enumerate(lengths):
    for t in range(n):
      to_come = float(sum(rewards[b, t:n]))
      assert abs(float(advantages[b, t]) - (to_come - values[b, t])) < 1e-5
      assert abs(float(returns[b, t]) - to_come) < 1e-5
  assert not np.asarray(advantages)[~mask].any() and not np.asarray(returns)[~mask].any()


# ---- penalized_rewards ----

def test_penalized_rewards_put_the_score_on_the_last_token_and_the_penalty_on_every_token():
  rng = np.random.default_rng(1)
  lengths = [5, 2, 1]
  mask = _mask(lengths, 5)
  scores = np.array([2.0, -1.5, 0.7], np.float32)
  log_probs = rng.normal(size=(3, 5)).astype(np.float32)
  ref_log_probs = rng.normal(size=(3, 5)).astype(np.float32)
  beta = 0.3
  rewards = np.asarray(ppo.penalized_rewards(jnp.asarray(scores), jnp.asarray(log_probs), jnp.asarray(ref_log_probs),
                                             jnp.asarray(mask), beta))
  expected = np.zeros((3, 5))
  for b, n in enumerate(lengths):
    for t in range(n):
      expected[b, t] = -beta * (log_probs[b, t] - ref_log_probs[b, t]) + (scores[b] if t == n - 1 else 0.0)
  np.testing.assert_allclose(rewards, expected, atol=1e-6, rtol=0)
  # The whole score, once per response: the rewards sum to score - beta * summed KL estimate.
  np.testing.assert_allclose(rewards.sum(-1), scores - beta * np.where(mask, log_probs - ref_log_probs, 0).sum(-1),
                             atol=1e-5, rtol=0)


# ---- policy_loss and value_loss ----

def test_policy_loss_clips_only_where_the_ratio_would_gain_beyond_the_range():
  clip = 0.2
  # (advantage, ratio, per-token loss, clip binds): the objective is min(r A, clip(r) A), negated.
  cases = [(1.0, 1.5, -1.2, True),    # good action pushed past 1 + eps: capped at 1.2
           (1.0, 0.5, -0.5, False),   # good action made rarer: not clipped (pessimistic bound)
           (-1.0, 1.5, 1.5, False),   # bad action made likelier: not clipped
           (-1.0, 0.5, 0.8, True),    # bad action pushed below 1 - eps: capped at 0.8
           (2.0, 1.1, -2.2, False)]   # inside the range
  advantages = np.array([[a for a, _, _, _ in cases] + [50.0]], np.float32)  # and a padding token
  ratios = np.array([[r for _, r, _, _ in cases] + [3.0]], np.float32)
  mask = np.array([[True] * len(cases) + [False]])
  old_log_probs = np.array([[-1.0, -2.0, -0.5, -3.0, -1.5, -0.7]], np.float32)
  loss, clip_fraction = ppo.policy_loss(jnp.asarray(old_log_probs + np.log(ratios)), jnp.asarray(old_log_probs),
                                        jnp.asarray(advantages), jnp.asarray(mask), clip)
  assert abs(float(loss) - np.mean([l for _, _, l, _ in cases])) < 1e-5  # -0.32, padding ignored
  assert abs(float(clip_fraction) - np.mean([c for _, _, _, c in cases])) < 1e-6  # 2 of 5


def test_value_loss_keeps_the_new_value_within_the_range_of_the_old():
  clip = 0.2
  # (old value, new value, return, per-token squared error, clip binds): max of the two errors.
  cases = [(0.0, 0.5, 1.0, 0.64, True),     # moved past the range; clipped to 0.2 it is further off
           (0.0, 0.5, 0.0, 0.25, False),    # clipped value is closer: the unclipped error stands
           (0.0, -0.5, -1.0, 0.64, True),   # the same, moving down
           (0.3, 0.4, 1.3, 0.81, False)]    # inside the range
  old = np.array([[o for o, _, _, _, _ in cases] + [9.0]], np.float32)
  new = np.array([[n for _, n, _, _, _ in cases] + [-9.0]], np.float32)
  returns = np.array([[r for _, _, r, _, _ in cases] + [4.0]], np.float32)
  mask = np.array([[True] * len(cases) + [False]])
  loss, clip_fraction = ppo.value_loss(jnp.asarray(new), jnp.asarray(old), jnp.asarray(returns), jnp.asarray(mask),
                                       clip)
  assert abs(float(loss) - 0.5 * np.mean([e for _, _, _, e, _ in cases])) < 1e-5  # 0.2925
  assert abs(float(clip_fraction) - 0.5) < 1e-6


# ---- whiten ----

def test_whiten_gives_mean_zero_variance_one_over_the_mask():
  rng = np.random.default_rng(2)
  x = (3.0 + 5.0 * rng.normal(size=(3, 8))).astype(np.float32)
  mask = _mask([8, 3, 5], 8)
  x[~mask] = 1e3  # padding far off: it must not enter the statistics
  whitened = np.asarray(ppo.whiten(jnp.asarray(x), jnp.asarray(mask)))
  on = x[mask].astype(np.float64)
  np.testing.assert_allclose(whitened[mask], (on - on.mean()) / on.std(), atol=1e-5, rtol=0)
  assert abs(whitened[mask].mean()) < 1e-6 and abs(whitened[mask].var() - 1.0) < 1e-5
  assert not whitened[~mask].any()


# ---- adapted_kl_coefficient ----

@pytest.mark.parametrize("kl, episodes, horizon, expected", [
    (9.0, 512, 10000, 0.1 * (1 + 0.2 * 0.0512)),   # error +0.5, clipped to +0.2
    (3.0, 512, 10000, 0.1 * (1 - 0.2 * 0.0512)),   # error -0.5, clipped to -0.2
    (6.6, 512, 10000, 0.1 * (1 + 0.1 * 0.0512)),   # error +0.1, inside the clip
    (6.0, 512, 10000, 0.1),                        # on target: unchanged
    (100.0, 10000, 10000, 0.12),                   # a whole horizon at the clip: +20%
    (0.0, 5000, 10000, 0.09),                      # half a horizon at -20%: -10%
])
def test_adapted_kl_coefficient_by_hand(kl, episodes, horizon, expected):
  got = float(ppo.adapted_kl_coefficient(0.1, kl, 6.0, episodes, horizon))
  assert abs(got - expected) < 1e-7, (got, expected)


# ---- KL estimates against the exact KL over every response ----

def _every_response(tokens):
  """Every response the sampler can return drawing from `tokens`: up to MAX_LENGTH tokens, EOS
  kept and 0 after it; one without EOS stops at MAX_LENGTH."""
  responses = []

  def extend(prefix):
    if len(prefix) == MAX_LENGTH or (prefix and prefix[-1] == EOS):
      responses.append(prefix + [0] * (MAX_LENGTH - len(prefix)))
      return
    for token in tokens:
      extend(prefix + [token])

  extend([])
  return np.array(responses, np.int32)


def _teacher_forced(params, responses):
  """(log p(y) [N] of each whole response, next-token log-probs [N, T, vocab - 1] of ids 1.., the
  response's own positions [N, T]) from the network's logits, in float64 numpy; positions run up to
  the first EOS. The sampler never draws id 0 (padding): the distribution is over ids 1.."""
  decoder_inputs = np.pad(responses, ((0, 0), (1, 0)))[:, :-1]
  logits = Transformer(CONFIG).apply({"params": params}, np.repeat(PROMPT, len(responses), 0), decoder_inputs)
  scaled = np.asarray(logits, np.float64)[..., 1:] / TEMPERATURE
  top = scaled.max(-1, keepdims=True)
  log_probs = scaled - top - np.log(np.exp(scaled - top).sum(-1, keepdims=True))
  picked = np.take_along_axis(log_probs, np.maximum(responses[..., None].astype(np.int64) - 1, 0), -1)[..., 0]
  ended_before = np.cumsum(responses == EOS, axis=1) - (responses == EOS)
  own = ended_before == 0
  return np.where(own, picked, 0.0).sum(-1), log_probs, own


@pytest.fixture(scope="module")
def policies():
  # Plain random networks give id 0 as much mass as any id: the sampler must still never draw it.
  policy = init_params(CONFIG, jax.random.PRNGKey(10))
  reference = init_params(CONFIG, jax.random.PRNGKey(11))
  return policy, reference


def test_kl_estimates_have_the_exact_kl_as_expectation(policies):
  policy, reference = policies
  responses = _every_response(range(1, CONFIG.vocab_size))  # 1 + 4 * (1 + 4 * 5) = 85
  log_p, policy_next, own = _teacher_forced(policy, responses)
  log_q, reference_next, _ = _teacher_forced(reference, responses)
  p = np.exp(log_p)
  # (a) These are all the sampler can return (no id 0 before EOS): their probabilities add up to 1.
  assert abs(p.sum() - 1.0) < 1e-6
  exact = float(np.sum(p * (log_p - log_q)))
  assert exact > 0.05, "the two random policies should differ"

  prompts = jnp.asarray(np.repeat(PROMPT, len(responses), 0))
  responses_j = jnp.asarray(responses)
  # (b) The sampled estimate: log p(y) - log q(y) for each response, so its mean under p is the KL.
  log_probs, _ = ppo.log_probs_and_entropy(CONFIG, policy, prompts, responses_j, TEMPERATURE)
  ref_log_probs, _ = ppo.log_probs_and_entropy(CONFIG, reference, prompts, responses_j, TEMPERATURE)
  sampled = np.asarray(ppo.kl_estimate(log_probs, ref_log_probs, ppo.response_mask(responses_j)).sum(-1), np.float64)
  np.testing.assert_allclose(sampled, log_p - log_q, atol=2e-5, rtol=0)
  assert abs(float(np.sum(p * sampled)) - exact) < 1e-5
  # (c) The per-state KL over the whole vocabulary, summed along the response: same expectation.
  per_state = ppo.exact_kl(ppo.next_token_log_probs(CONFIG, policy, prompts, responses_j, TEMPERATURE),
                           ppo.next_token_log_probs(CONFIG, reference, prompts, responses_j, TEMPERATURE), responses_j)
  per_state_numpy = np.sum(np.exp(policy_next) * (policy_next - reference_next), axis=-1) * own
  np.testing.assert_allclose(np.asarray(per_state), per_state_numpy, atol=1e-5, rtol=0)
  assert abs(float(np.sum(p * np.asarray(per_state, np.float64).sum(-1))) - exact) < 1e-5
  # sequence_kl is that sum, per response.
  summed = np.asarray(ppo.sequence_kl(CONFIG, policy, reference, prompts, responses_j, TEMPERATURE), np.float64)
  np.testing.assert_allclose(summed, per_state_numpy.sum(-1), atol=2e-5, rtol=0)

  # (d) Responses the sampler actually draws: their frequencies are p's, their mean estimate the KL.
  n = 8192
  drawn = np.asarray(sample(CONFIG, policy, jnp.asarray(PROMPT), jax.random.PRNGKey(12), max_length=MAX_LENGTH,
                            num_samples=n, temperature=TEMPERATURE, top_p=1.0))[0]
  index = {tuple(r): i for i, r in enumerate(responses.tolist())}  # a response with a 0 in it is in none
  counts = np.bincount([index[tuple(r)] for r in drawn.tolist()], minlength=len(responses))
  assert 0.5 * np.abs(counts / n - p).sum() < 0.05
  prompts, drawn_j = jnp.asarray(np.repeat(PROMPT, n, 0)), jnp.asarray(drawn)
  log_probs, _ = ppo.log_probs_and_entropy(CONFIG, policy, prompts, drawn_j, TEMPERATURE)
  ref_log_probs, _ = ppo.log_probs_and_entropy(CONFIG, reference, prompts, drawn_j, TEMPERATURE)
  for estimates in (ppo.kl_estimate(log_probs, ref_log_probs, ppo.response_mask(drawn_j)).sum(-1),
                    ppo.sequence_kl(CONFIG, policy, reference, prompts, drawn_j, TEMPERATURE)):
    estimates = np.asarray(estimates, np.float64)
    standard_error = estimates.std() / np.sqrt(n)
    assert abs(estimates.mean() - exact) < 4 * standard_error, (estimates.mean(), exact, standard_error)


# ---- values ----

def test_values_read_the_state_before_each_token():
  params = init_reward_params(CONFIG, jax.random.PRNGKey(20))
  input_ids = np.array([[3, 4, 5, 0], [2, 2, 0, 0]], np.int32)
  responses = np.array([[3, 4, 5, 1], [2, 5, 1, 0]], np.int32)
  values = np.asarray(ppo.values(CONFIG, params, jnp.asarray(input_ids), jnp.asarray(responses)))
  assert values.shape == (2, 4) and values[1, 3] == 0.0

  # V(s_t) from a decoder that is only ever shown the start token and the first t tokens.
  model = Transformer(CONFIG)
  network = {"params": {k: v for k, v in params.items() if k != "reward_head"}}
  head = params["reward_head"]
  for b in range(2):
    encoded = model.apply(network, input_ids[b:b + 1], method=Transformer.encode)
    kv = model.apply(network, encoded, method=Transformer.cross_kv)
    for t in range(int((responses[b] > 0).sum())):
      seen = np.concatenate([[0], responses[b, :t]])[None].astype(np.int32)
      hidden = model.apply(network, kv, input_ids[b:b + 1] > 0, seen, method=Transformer.decode_hidden)
      expected = float(hidden[0, -1] @ head["kernel"][:, 0] + head["bias"][0])
      assert abs(values[b, t] - expected) < 1e-5, (b, t)

  # Changing token t changes V only after t: V at 0 is the prompt's alone.
  for t in range(4):
    changed = responses.copy()
    changed[0, t] = 2 if responses[0, t] != 2 else 3
    after = np.asarray(ppo.values(CONFIG, params, jnp.asarray(input_ids), jnp.asarray(changed)))
    np.testing.assert_allclose(after[0, :t + 1], values[0, :t + 1], atol=1e-6, rtol=0)
    assert np.all(np.abs(after[0, t + 1:] - values[0, t + 1:]) > 1e-4), t
    np.testing.assert_array_equal(after[1], values[1])
