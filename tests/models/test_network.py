"""Parameter paths follow t5x's T5 example; every parameter carries logical axis names."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from models.config import T5Config
from models.network import Transformer, relative_position_bucket

CONFIG = T5Config(vocab_size=64, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=24,
                  num_encoder_layers=2, num_decoder_layers=2)


def _boxed():
  return jax.eval_shape(lambda: Transformer(CONFIG).init(
      jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32), jnp.ones((1, 4), jnp.int32)))["params"]


def test_parameter_paths_are_t5x():
  paths = set(traverse_util.flatten_dict(nn.meta.unbox(_boxed()), sep="/"))
  for expected in ["token_embedder/embedding", "encoder/relpos_bias/rel_embedding", "decoder/relpos_bias/rel_embedding",
                   "encoder/layers_0/attention/query/kernel", "encoder/layers_1/mlp/wi_0/kernel",
                   "encoder/layers_1/mlp/wi_1/kernel", "encoder/layers_1/mlp/wo/kernel",
                   "encoder/layers_0/pre_attention_layer_norm/scale", "encoder/encoder_norm/scale",
                   "decoder/layers_1/self_attention/out/kernel", "decoder/layers_1/encoder_decoder_attention/key/kernel",
                   "decoder/layers_0/pre_cross_attention_layer_norm/scale", "decoder/decoder_norm/scale",
                   "decoder/logits_dense/kernel"]:
    assert expected in paths, expected
  per_encoder_layer = 4 + 3 + 2  # q k v o, wi_0 wi_1 wo, two norms
  per_decoder_layer = 8 + 3 + 3
  assert len(paths) == 1 + 2 * per_encoder_layer + 1 + 1 + 2 * per_decoder_layer + 1 + 1 + 1


def test_every_parameter_has_logical_axes():
  flat = traverse_util.flatten_dict(_boxed(), sep="/", is_leaf=lambda _, x: isinstance(x, nn.Partitioned))
  allowed = {"vocab", "embed", "joined_kv", "mlp", "heads", "relpos_buckets"}
  for path, leaf in flat.items():
    assert isinstance(leaf, nn.Partitioned), path
    assert len(leaf.names) == leaf.value.ndim and set(leaf.names) <= allowed, (path, leaf.names)


def test_relative_position_buckets_by_hand():
  # Bidirectional, 32 buckets: offsets below 8 are exact, positive offsets use the upper 16 buckets.
  assert relative_position_bucket(0, True, 32, 128) == 0
  assert relative_position_bucket(-3, True, 32, 128) == 3
  assert relative_position_bucket(3, True, 32, 128) == 16 + 3
  # Past max_exact: 8 + floor(log(n / 8) / log(128 / 8) * 8); n = 40 -> 8 + floor(4.6439) = 12.
  assert relative_position_bucket(-40, True, 32, 128) == 12
  assert relative_position_bucket(-1000, True, 32, 128) == 15
  # Causal: future keys (positive offsets) share bucket 0; n = 40 -> 16 + floor(log(2.5) / log(8) * 16) = 23.
  assert relative_position_bucket(5, False, 32, 128) == 0
  assert relative_position_bucket(-40, False, 32, 128) == 23


def test_remat_keeps_the_parameters_and_the_gradients():
  """T5Config.remat recomputes each layer in the backward pass: same parameter tree, same loss and
  gradients as keeping the activations (jax.checkpoint changes what is stored, not what is computed)."""
  from models.network import init_params  # pylint: disable=g-import-not-at-top
  remat = CONFIG.replace(remat=True)
  params = init_params(CONFIG, jax.random.PRNGKey(1))
  assert jax.tree.structure(jax.eval_shape(lambda: init_params(remat, jax.random.PRNGKey(1)))) == jax.tree.structure(params)
  inputs = jax.random.randint(jax.random.PRNGKey(2), (2, 6), 1, 64)
  targets = jax.random.randint(jax.random.PRNGKey(3), (2, 5), 1, 64)

  def loss(config, p):
    logits = Transformer(config).apply({"params": p}, inputs, targets)
    return jnp.mean(jax.nn.logsumexp(logits, -1))

  plain = jax.jit(jax.value_and_grad(lambda p: loss(CONFIG, p)))(params)
  recomputed = jax.jit(jax.value_and_grad(lambda p: loss(remat, p)))(params)
  # The same function is differentiated: tight agreement, not bitwise (recomputation may fuse differently).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), plain, recomputed)
  # jax.checkpoint shows in the traced program as its primitive (remat2 in this jax).
  assert "remat" in str(jax.make_jaxpr(lambda p: loss(remat, p))(params))
  assert "remat" not in str(jax.make_jaxpr(lambda p: loss(CONFIG, p))(params))
