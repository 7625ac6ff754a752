"""The T5.1.1 encoder-decoder in Flax linen, with t5x's parameter paths and logical axis names.

Parameter paths follow t5x's `examples/t5/network.py` (`token_embedder/embedding`,
`encoder/layers_0/attention/query/kernel`, `decoder/logits_dense/kernel`, ...) so t5x and
Hugging Face checkpoints map onto them by rule. Attention kernels are stored 2-D as
[embed, heads * head_dim] ("joined_kv"), as in t5x checkpoints.

The decoder takes `num_candidates`: N = B * K decoder rows share B encodings. Self-attention
runs per row; cross-attention folds the K rows of one context into its query axis, so the
encoder output and its cross-attention keys/values are computed once per context.
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models.config import T5Config

_NEG_INF = -1e10


def _param(module, name, init, shape, axes):
  return module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)


def _constrain(x, axes):
  return nn.with_logical_constraint(x, axes)


def _project(x, kernel):
  """x [..., d] @ kernel [d, f] as one matrix product over the flattened leading axes.

  The kernel's gradient is then a single [tokens, d] x [tokens, f] product. Contracting two leading
  axes at once (einsum "...d,df->...f"), XLA's CPU compiler transposed the output gradient first,
  recomputing the GELU backward in a transposed layout (the small gated MLP's forward+backward took
  1.2x as long; same values, bit for bit).
  """
  return jnp.dot(x.reshape(-1, x.shape[-1]), kernel).reshape(x.shape[:-1] + kernel.shape[-1:])


class RMSNorm(nn.Module):
  """T5's layer norm: scale only, no mean subtraction, no bias; statistics in float32."""
  config: T5Config

  @nn.compact
  def __call__(self, x):
    scale = _param(self, "scale", nn.initializers.ones, (x.shape[-1],), ("embed",))
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.config.layer_norm_epsilon)
    return (x32 * scale).astype(self.config.activation_dtype)


class Dense(nn.Module):
  """A bias-free projection whose kernel carries logical axis names."""
  features: int
  kernel_axes: tuple[str, str]
  kernel_init: nn.initializers.Initializer
  dtype: jnp.dtype

  @nn.compact
  def __call__(self, x):
    kernel = _param(self, "kernel", self.kernel_init, (x.shape[-1], self.features), self.kernel_axes)
    return _project(x.astype(self.dtype), kernel.astype(self.dtype))


def _fan_in_init(scale=1.0):
  return nn.initializers.variance_scaling(scale, "fan_in", "normal")


class Embed(nn.Module):
  config: T5Config

  def setup(self):
    self.embedding = _param(self, "embedding", nn.initializers.normal(1.0),
                            (self.config.vocab_size, self.config.emb_dim), ("vocab", "embed"))

  def __call__(self, ids):
    return jnp.take(self.embedding, ids, axis=0).astype(self.config.activation_dtype)

  def attend(self, x):
    return _project(x, self.embedding.astype(x.dtype).T)


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
  """T5's bucketing of key - query offsets, computed in numpy float32 exactly as the reference does."""
  relative_position = np.asarray(relative_position)
  buckets = np.zeros_like(relative_position)
  if bidirectional:
    num_buckets //= 2
    buckets += (relative_position > 0).astype(relative_position.dtype) * num_buckets
    distance = np.abs(relative_position)
  else:
    distance = -np.minimum(relative_position, 0)
  max_exact = num_buckets // 2
  with np.errstate(divide="ignore"):
    log_ratio = np.log(distance.astype(np.float32) / np.float32(max_exact))
  large = max_exact + (log_ratio / np.float32(np.log(max_distance / max_exact))
                       * np.float32(num_buckets - max_exact))
  large = np.minimum(np.where(distance < max_exact, 0, large).astype(np.int64), num_buckets - 1)
  return buckets + np.where(distance < max_exact, distance, large)


class RelativePositionBiases(nn.Module):
  """One learned bias per (head, bucket), shared by every layer of a stack."""
  config: T5Config
  bidirectional: bool

  def setup(self):
    c = self.config
    self.rel_embedding = _param(self, "rel_embedding", _fan_in_init(),
                                (c.num_heads, c.relative_attention_num_buckets),
                                ("heads", "relpos_buckets"))

  def _buckets(self, query_len, key_len):
    offsets = np.arange(key_len)[None, :] - np.arange(query_len)[:, None]
    return relative_position_bucket(offsets, self.bidirectional, self.config.relative_attention_num_buckets,
                                    self.config.relative_attention_max_distance)

  def __call__(self, query_len, key_len):
    """Biases [1, heads, query_len, key_len] for a whole sequence."""
    bias = jnp.take(self.rel_embedding, jnp.asarray(self._buckets(query_len, key_len)), axis=1)
    return bias[None].astype(jnp.float32)

  def at_position(self, position, key_len):
    """Biases [1, heads, 1, key_len] for one query at a traced position (cached decoding)."""
    row = jnp.take(jnp.asarray(self._buckets(key_len, key_len)), position, axis=0)
    return jnp.take(self.rel_embedding, row, axis=1)[None, :, None, :].astype(jnp.float32)


class Attention(nn.Module):
  """Multi-head dot-product attention without scaling (T5 folds 1/sqrt(d) into the query init)."""
  config: T5Config

  def setup(self):
    c = self.config
    inner = c.num_heads * c.head_dim
    dtype = c.activation_dtype
    self.query = Dense(inner, ("embed", "joined_kv"), _fan_in_init(1.0 / c.head_dim), dtype)
    self.key = Dense(inner, ("embed", "joined_kv"), _fan_in_init(), dtype)
    self.value = Dense(inner, ("embed", "joined_kv"), _fan_in_init(), dtype)
    self.out = Dense(c.emb_dim, ("joined_kv", "embed"), _fan_in_init(), dtype)
    self.dropout = nn.Dropout(c.dropout_rate)

  def _split(self, x):
    return x.reshape(x.shape[:-1] + (self.config.num_heads, self.config.head_dim))

  def project_kv(self, x):
    """Keys and values [B, S, heads, head_dim] of `x` [B, S, embed]."""
    axes = ("batch", "length", "heads", "kv")
    return _constrain(self._split(self.key(x)), axes), _constrain(self._split(self.value(x)), axes)

  def __call__(self, x, keys, values, bias, deterministic):
    """Attends from `x` [B, T, embed] to keys/values [B, S, heads, head_dim]; bias broadcasts to [B, heads, T, S]."""
    query = _constrain(self._split(self.query(x)), ("batch", "length", "heads", "kv"))
    logits = jnp.einsum("bthd,bshd->bhts", query, keys).astype(jnp.float32) + bias
    weights = jax.nn.softmax(logits, axis=-1).astype(x.dtype)
    weights = self.dropout(weights, deterministic=deterministic)
    # Heads-major output, then one transpose: asked for [B, T, heads, head_dim] directly, XLA's CPU
    # compiler computes the transposed product with a strided read of the weights, 1.6x slower for
    # the small encoder at 8 x 256 tokens (same values, bit for bit).
    y = jnp.einsum("bhts,bshd->bhtd", weights, values).transpose(0, 2, 1, 3)
    return self.out(y.reshape(y.shape[:-2] + (-1,)))


class MlpBlock(nn.Module):
  """Gated MLP: act_0(x W_0) * act_1(x W_1), then W_o (gated-GELU in T5.1.1)."""
  config: T5Config

  @nn.compact
  def __call__(self, x, deterministic):
    c = self.config
    hidden = 1.0
    for i, activation in enumerate(c.mlp_activations):
      name = f"wi_{i}" if len(c.mlp_activations) > 1 else "wi"  # t5x's names
      h = Dense(c.mlp_dim, ("embed", "mlp"), _fan_in_init(), c.activation_dtype, name=name)(x)
      hidden = hidden * (h if activation == "linear" else _ACTIVATIONS[activation](h))
    hidden = _constrain(nn.Dropout(c.dropout_rate)(hidden, deterministic=deterministic),
                        ("batch", "length", "mlp"))
    return Dense(c.emb_dim, ("mlp", "embed"), _fan_in_init(), c.activation_dtype, name="wo")(hidden)


_ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=True),  # HF "gelu_new", as T5.1.1 was trained
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


def padding_bias(key_mask):
  """[B, S] validity mask -> additive bias [B, 1, 1, S]."""
  return jnp.where(key_mask[:, None, None, :], 0.0, _NEG_INF).astype(jnp.float32)


class EncoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    self.pre_attention_layer_norm = RMSNorm(self.config)
    self.attention = Attention(self.config)
    self.pre_mlp_layer_norm = RMSNorm(self.config)
    self.mlp = MlpBlock(self.config)
    self.dropout = nn.Dropout(self.config.dropout_rate)

  def __call__(self, x, bias, deterministic):
    h = self.pre_attention_layer_norm(x)
    keys, values = self.attention.project_kv(h)
    x = x + self.dropout(self.attention(h, keys, values, bias, deterministic), deterministic=deterministic)
    h = self.pre_mlp_layer_norm(x)
    x = x + self.dropout(self.mlp(h, deterministic), deterministic=deterministic)
    return _constrain(x, ("batch", "length", "embed"))


class Encoder(nn.Module):
  config: T5Config
  token_embedder: Embed

  def setup(self):
    c = self.config
    self.relpos_bias = RelativePositionBiases(c, bidirectional=True)
    # `deterministic` (argument 3, counting self) is a Python bool: static under remat.
    layer = nn.remat(EncoderLayer, static_argnums=(3,)) if c.remat else EncoderLayer
    self.layers = [layer(c, name=f"layers_{i}") for i in range(c.num_encoder_layers)]
    self.encoder_norm = RMSNorm(c)
    self.dropout = nn.Dropout(c.dropout_rate)

  def __call__(self, input_ids, deterministic):
    x = self.dropout(self.token_embedder(input_ids), deterministic=deterministic)
    length = input_ids.shape[1]
    bias = self.relpos_bias(length, length) + padding_bias(input_ids > 0)
    for layer in self.layers:
      x = layer(x, bias, deterministic)
    return self.dropout(self.encoder_norm(x), deterministic=deterministic)


class DecoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    c = self.config
    self.pre_self_attention_layer_norm = RMSNorm(c)
    self.self_attention = Attention(c)
    self.pre_cross_attention_layer_norm = RMSNorm(c)
    self.encoder_decoder_attention = Attention(c)
    self.pre_mlp_layer_norm = RMSNorm(c)
    self.mlp = MlpBlock(c)
    self.dropout = nn.Dropout(c.dropout_rate)

  def __call__(self, x, cross_kv, self_bias, cross_bias, deterministic, cache=None, cache_index=None):
    """x [N, T, embed]; cross_kv: keys/values [B, S, heads, kv] with N = B * K.

    With a cache ({'key', 'value'} of [N, max_len, heads, kv]) x is one step (T = 1) written at
    `cache_index`; returns (x, updated cache).
    """
    h = self.pre_self_attention_layer_norm(x)
    keys, values = self.self_attention.project_kv(h)
    if cache is not None:
      keys = jax.lax.dynamic_update_slice_in_dim(cache["key"], keys.astype(cache["key"].dtype), cache_index, axis=1)
      values = jax.lax.dynamic_update_slice_in_dim(cache["value"], values.astype(cache["value"].dtype),
                                                   cache_index, axis=1)
      cache = {"key": keys, "value": values}
    y = self.self_attention(h, keys, values, self_bias, deterministic)
    x = x + self.dropout(y, deterministic=deterministic)

    h = self.pre_cross_attention_layer_norm(x)
    rows, steps, width = h.shape
    contexts = cross_kv[0].shape[0]
    grouped = h.reshape(contexts, (rows // contexts) * steps, width)  # K candidates share one context
    y = self.encoder_decoder_attention(grouped, *cross_kv, cross_bias, deterministic).reshape(rows, steps, width)
    x = x + self.dropout(y, deterministic=deterministic)

    h = self.pre_mlp_layer_norm(x)
    x = x + self.dropout(self.mlp(h, deterministic), deterministic=deterministic)
    return _constrain(x, ("batch", "length", "embed")), cache


class Decoder(nn.Module):
  config: T5Config
  token_embedder: Embed

  def setup(self):
    c = self.config
    self.relpos_bias = RelativePositionBiases(c, bidirectional=False)
    layer = nn.remat(DecoderLayer, static_argnums=(5,)) if c.remat else DecoderLayer
    self.layers = [layer(c, name=f"layers_{i}") for i in range(c.num_decoder_layers)]
    self.decoder_norm = RMSNorm(c)
    self.dropout = nn.Dropout(c.dropout_rate)
    if not c.logits_via_embedding:
      self.logits_dense = Dense(c.vocab_size, ("embed", "vocab"), _fan_in_init(), c.activation_dtype)

  def cross_kv(self, encoded):
    """Every layer's cross-attention keys and values of an encoding: computed once per context."""
    return [layer.encoder_decoder_attention.project_kv(encoded) for layer in self.layers]

  def __call__(self, decoder_input_ids, cross_kvs, encoder_mask, deterministic, cache=None, cache_index=None,
               segment_ids=None):
    """Final hidden states [N, T, embed] (after the last norm); with a cache also the new cache.

    `segment_ids` [N, T] packs several sequences into a row: a position attends only to earlier
    positions of its own segment. T5's self-attention sees relative positions only, so each
    segment is decoded exactly as it would be alone in a row (t5x's packing, decoder side).
    """
    x = self.dropout(self.token_embedder(decoder_input_ids), deterministic=deterministic)
    steps = decoder_input_ids.shape[1]
    if cache is None:
      causal = jnp.tril(jnp.ones((steps, steps), bool))
      self_bias = self.relpos_bias(steps, steps) + jnp.where(causal, 0.0, _NEG_INF)[None, None]
      if segment_ids is not None:
        same = segment_ids[:, :, None] == segment_ids[:, None, :]
        self_bias = self_bias + jnp.where(same, 0.0, _NEG_INF)[:, None]
    else:
      max_len = cache[0]["key"].shape[1]
      visible = jnp.arange(max_len) <= cache_index
      self_bias = self.relpos_bias.at_position(cache_index, max_len) + jnp.where(visible, 0.0, _NEG_INF)
    cross_bias = padding_bias(encoder_mask)
    new_cache = []
    for i, layer in enumerate(self.layers):
      x, layer_cache = layer(x, cross_kvs[i], self_bias, cross_bias, deterministic,
                             None if cache is None else cache[i], cache_index)
      new_cache.append(layer_cache)
    x = self.dropout(self.decoder_norm(x), deterministic=deterministic)
    return (x, new_cache) if cache is not None else x

  def logits(self, hidden):
    if self.config.logits_via_embedding:
      # Tied output layer: T5.1.0 rescales by 1/sqrt(d_model) before attending to the embedding.
      return self.token_embedder.attend(hidden * self.config.emb_dim ** -0.5).astype(jnp.float32)
    return _constrain(self.logits_dense(hidden).astype(jnp.float32), ("batch", "length", "vocab"))


class Transformer(nn.Module):
  """The encoder-decoder. Call methods with `Transformer(config).apply({'params': p}, ..., method=...)`."""
  config: T5Config

  def setup(self):
    self.token_embedder = Embed(self.config)
    self.encoder = Encoder(self.config, self.token_embedder)
    self.decoder = Decoder(self.config, self.token_embedder)

  def encode(self, input_ids, deterministic=True):
    """input_ids [B, L] (0 = padding) -> encoder output [B, L, embed]."""
    return self.encoder(input_ids, deterministic)

  def cross_kv(self, encoded):
    return self.decoder.cross_kv(encoded)

  def decode_hidden(self, cross_kvs, encoder_mask, decoder_input_ids, deterministic=True, segment_ids=None):
    """Decoder final hidden states [N, T, embed]; N = B * K rows share B contexts (or, with
    `segment_ids` [N, T], N = B rows each pack their context's candidates)."""
    return self.decoder(decoder_input_ids, cross_kvs, encoder_mask, deterministic, segment_ids=segment_ids)

  def logits(self, hidden):
    return self.decoder.logits(hidden)

  def decode(self, encoded, encoder_mask, decoder_input_ids, deterministic=True):
    """Logits [N, T, vocab] of decoder_input_ids [N, T] against encoded [B, L, embed], N = B * K."""
    hidden = self.decoder(decoder_input_ids, self.decoder.cross_kv(encoded), encoder_mask, deterministic)
    return self.decoder.logits(hidden)

  def decode_step(self, cross_kvs, encoder_mask, token_ids, cache, cache_index):
    """One cached step: token_ids [N, 1] at position cache_index -> (logits [N, vocab], new cache)."""
    hidden, cache = self.decoder(token_ids, cross_kvs, encoder_mask, True, cache, cache_index)
    return self.decoder.logits(hidden)[:, 0], cache

  def __call__(self, input_ids, decoder_input_ids, deterministic=True):
    """Full forward: logits [B, T, vocab] (teacher forcing)."""
    encoded = self.encode(input_ids, deterministic)
    hidden = self.decoder(decoder_input_ids, self.decoder.cross_kv(encoded), input_ids > 0, deterministic)
    return self.decoder.logits(hidden)


def init_cache(config: T5Config, rows: int, max_len: int):
  """An empty self-attention cache for cached decoding of `rows` sequences up to max_len tokens."""
  shape = (rows, max_len, config.num_heads, config.head_dim)
  return [{"key": jnp.zeros(shape, config.activation_dtype), "value": jnp.zeros(shape, config.activation_dtype)}
          for _ in range(config.num_decoder_layers)]


def init_params(config: T5Config, rng, input_len=8, target_len=8):
  """Random parameters (with their logical partitioning boxes removed)."""
  variables = Transformer(config).init(
      rng, jnp.ones((1, input_len), jnp.int32), jnp.ones((1, target_len), jnp.int32))
  return nn.meta.unbox(variables["params"])


def shift_right(target_ids):
  """Decoder inputs: targets shifted right with start token 0 (T5's decoder_start_token_id)."""
  return jnp.pad(target_ids, [(0, 0)] * (target_ids.ndim - 1) + [(1, 0)])[..., :-1]
