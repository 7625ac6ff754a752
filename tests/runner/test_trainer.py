"""The training step: losses against independent computations, accumulation, schedules, sharding."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from models import reward as reward_lib
from models.config import T5Config
from models.network import Transformer, init_params
from runner import partitioning, trainer

# One layer each way: what these tests check (losses, gradients, accumulation, donation) holds for
# any depth, and each step compiled costs about half of tiny.gin's two layers.
TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                num_encoder_layers=1, num_decoder_layers=1)


def _text_batch(rng, rows=4, length=8, targets=6):
  input_ids = rng.integers(3, 300, (rows, length)).astype(np.int32)
  input_ids[1, 5:] = 0
  target_ids = rng.integers(3, 300, (rows, targets)).astype(np.int32)
  target_ids[2, 3:] = 0
  return {"input_ids": input_ids, "target_ids": target_ids}


def _one_device_step(optimizer, objective="cross_entropy", accumulation_steps=1, z_loss=0.0):
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  params = init_params(TINY, jax.random.PRNGKey(0))
  shardings = partitioning.param_shardings(params, TINY, mesh)
  opt_shardings = partitioning.opt_state_shardings(optimizer, params, shardings, mesh)
  step = trainer.make_train_step(TINY, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings, opt_shardings, objective=objective,
                                 accumulation_steps=accumulation_steps, z_loss=z_loss)
  # The step donates its inputs: each call gets its own copy of the parameters.
  return params, lambda batch: step(jax.tree.map(jnp.array, params), optimizer.init(params), batch, 0)


@pytest.fixture(scope="module")
def sgd_step():
  """Plain SGD with rate 1 makes the update the gradient itself."""
  return _one_device_step(optax.sgd(1.0))


def test_cross_entropy_is_the_mean_over_real_target_tokens(sgd_step):
  batch = _text_batch(np.random.default_rng(0))
  params, step = sgd_step
  logits = np.asarray(jax.jit(Transformer(TINY).apply)(
      {"params": params}, batch["input_ids"], np.pad(batch["target_ids"], ((0, 0), (1, 0)))[:, :-1]), np.float64)
  log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
      - logits.max(-1, keepdims=True)
  picked = np.take_along_axis(log_probs, batch["target_ids"][..., None], -1)[..., 0]
  real = batch["target_ids"] > 0
  _, _, metrics = step(batch)
  assert float(metrics["units"]) == real.sum()
  np.testing.assert_allclose(float(metrics["loss"]), -picked[real].mean(), rtol=1e-5)


def test_z_loss_value_and_gradient_match_optax_cross_entropy_plus_squared_log_normaliser():
  """The step's loss with z-loss, and its update under SGD(1) (the gradient), against optax's
  cross-entropy plus z * logsumexp^2 written out separately."""
  z_loss = 0.5  # large, so that the z-loss term's gradient shows
  batch = _text_batch(np.random.default_rng(3))
  params, step = _one_device_step(optax.sgd(1.0), z_loss=z_loss)

  def reference(p):
    targets = jnp.asarray(batch["target_ids"])
    logits = Transformer(TINY).apply({"params": p}, batch["input_ids"], np.pad(batch["target_ids"], ((0, 0), (1, 0)))[:, :-1])
    token = (optax.softmax_cross_entropy_with_integer_labels(logits, targets)
             + z_loss * jnp.square(jax.nn.logsumexp(logits, axis=-1)))
    weights = (targets > 0).astype(jnp.float32)
    return (token * weights).sum() / weights.sum()

  loss, grads = jax.jit(jax.value_and_grad(reference))(params)
  new_params, _, metrics = step(batch)
  np.testing.assert_allclose(float(metrics["loss"]), float(loss), rtol=1e-5)
  jax.tree.map(lambda new, old, g: np.testing.assert_allclose(new, old - g, atol=1e-6), new_params, params, grads)


def test_accumulating_two_microbatches_matches_one_large_batch(sgd_step):
  batch = _text_batch(np.random.default_rng(1))
  _, whole = sgd_step
  _, accumulated = _one_device_step(optax.sgd(1.0), accumulation_steps=2)
  new_whole, _, m_whole = whole(batch)
  new_acc, _, m_acc = accumulated(batch)
  np.testing.assert_allclose(float(m_acc["loss"]), float(m_whole["loss"]), rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), new_acc, new_whole)


def test_pairwise_objective_uses_the_preferred_candidate_as_good():
  rng = np.random.default_rng(2)
  batch = {"input_ids": rng.integers(3, 300, (3, 8)).astype(np.int32),
           "candidate_ids": rng.integers(3, 300, (3, 2, 5)).astype(np.int32),
           "candidate_labels": np.array([[1, 0], [0, 1], [1, 0]], np.int32),
           "candidate_mask": np.ones((3, 2), np.int32)}
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  params = reward_lib.init_reward_params(TINY, jax.random.PRNGKey(0))
  optimizer = optax.sgd(0.0)
  shardings = partitioning.param_shardings(params, TINY, mesh)
  step = trainer.make_train_step(TINY, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings,
                                 partitioning.opt_state_shardings(optimizer, params, shardings, mesh),
                                 objective="pairwise")
  rewards = np.asarray(reward_lib.reward(TINY, params, batch["input_ids"], batch["candidate_ids"]), np.float64)
  good, bad = rewards[[0, 1, 2], [0, 1, 0]], rewards[[0, 1, 2], [1, 0, 1]]
  _, _, metrics = step(params, optimizer.init(params), batch, 0)
  np.testing.assert_allclose(float(metrics["loss"]), np.log1p(np.exp(bad - good)).mean(), rtol=1e-5)
  assert float(metrics["accuracy"]) == pytest.approx(np.mean(good > bad))


def test_schedules_follow_their_formulas():
  assert float(trainer.make_schedule("constant", 1e-3)(500)) == pytest.approx(1e-3)
  rsqrt = trainer.make_schedule("rsqrt", 0.01, warmup_steps=100)
  assert float(rsqrt(50)) == pytest.approx(0.005)
  assert float(rsqrt(400)) == pytest.approx(0.01 * (100 / 400) ** 0.5)
  cosine = trainer.make_schedule("cosine", 1.0, warmup_steps=0, decay_steps=100)
  assert float(cosine(50)) == pytest.approx(0.5 * (1 + np.cos(np.pi * 0.5)), abs=1e-6)
  with pytest.raises(ValueError, match="cosine' needs decay_steps"):
    trainer.make_schedule("cosine", 1.0)
  # Hugging Face's get_linear_schedule_with_warmup: up over 10 steps, down to 0 at step 110.
  linear = trainer.make_schedule("linear", 2e-5, warmup_steps=10, decay_steps=110)
  assert [float(linear(s)) for s in (0, 5, 10, 60, 110)] == pytest.approx([0, 1e-5, 2e-5, 1e-5, 0], abs=1e-12)
  assert float(trainer.make_schedule("linear", 2e-5, decay_steps=100)(25)) == pytest.approx(1.5e-5)
  with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
    trainer.make_optimizer("sgd")


def test_step_on_mesh_4x2_matches_one_device_and_shards_parameters(run_python):
  out = run_python("""
      import jax, numpy as np
      from models.config import T5Config
      from models.network import init_params
      from runner import partitioning, trainer
      config = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                        num_encoder_layers=1, num_decoder_layers=1)
      rng = np.random.default_rng(0)
      batch = {"input_ids": rng.integers(3, 300, (8, 12)).astype(np.int32),
               "target_ids": rng.integers(3, 300, (8, 6)).astype(np.int32)}
      optimizer = trainer.make_optimizer("adafactor", 1e-2)
      params = init_params(config, jax.random.PRNGKey(0))

      def two_steps(mesh):
        shardings = partitioning.param_shardings(params, config, mesh)
        opt_shardings = partitioning.opt_state_shardings(optimizer, params, shardings, mesh)
        step = trainer.make_train_step(config, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings, opt_shardings)
        p = jax.device_put(jax.tree.map(np.array, params), shardings)  # a copy: steps donate it
        o = jax.jit(optimizer.init, out_shardings=opt_shardings)(p)
        losses = []
        for i in range(2):
          p, o, metrics = step(p, o, partitioning.global_batch(batch, mesh), i)
          losses.append(float(metrics["loss"]))
        return p, losses

      one, one_losses = two_steps(partitioning.create_mesh(1, 1, devices=jax.devices()[:1]))
      many, many_losses = two_steps(partitioning.create_mesh(4, 2))
      np.testing.assert_allclose(many_losses, one_losses, atol=1e-5)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5), many, one)
      kernel = many["encoder"]["layers_0"]["mlp"]["wi_0"]["kernel"]
      assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model"), kernel.sharding
      assert kernel.addressable_shards[0].data.shape == (64, 64), kernel.addressable_shards[0].data.shape
      embedding = many["token_embedder"]["embedding"]
      assert embedding.addressable_shards[0].data.shape == (192, 64)
      print("losses", one_losses, many_losses)
      """, devices=8)
  assert "losses" in out


def test_cpu_step_updates_donated_parameters_in_place():
  """XLA's CPU copy insertion, left to its default, copied every donated parameter at the start of
  the step; the step's compiler options let it update them in place."""
  optimizer = trainer.make_optimizer("adafactor", learning_rate=1e-3)
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  params = init_params(TINY, jax.random.PRNGKey(0))
  shardings = partitioning.param_shardings(params, TINY, mesh)
  step = trainer.make_train_step(TINY, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings,
                                 partitioning.opt_state_shardings(optimizer, params, shardings, mesh))
  batch = partitioning.global_batch(_text_batch(np.random.default_rng(0)), mesh)
  hlo = step.lower(params, optimizer.init(params), batch, jnp.asarray(0, jnp.int32)).compile().as_text()
  assert hlo.count("= f32") and "%params" in hlo  # the text names the parameters, so the count below means something
  assert hlo.count("copy(%params") == 0, "the compiled step copies its donated parameters"
