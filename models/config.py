"""The architecture of a T5.1.1 encoder-decoder, as data."""
import dataclasses

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class T5Config:
  """Sizes and choices of one T5 network: T5.1.1 by default; published sizes live in
  gin/models/t5_1_1/ and, for the original T5 (ReLU MLP, tied output layer), gin/models/t5_1_0/."""
  vocab_size: int = 32128
  emb_dim: int = 512
  num_heads: int = 6
  head_dim: int = 64
  mlp_dim: int = 1024
  mlp_activations: tuple[str, ...] = ("gelu", "linear")
  num_encoder_layers: int = 8
  num_decoder_layers: int = 8
  dropout_rate: float = 0.0
  dtype: str = "float32"
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  logits_via_embedding: bool = False
  layer_norm_epsilon: float = 1e-6
  # Recompute each layer's activations in the backward pass instead of keeping them (jax.checkpoint):
  # memory for a layer's input per layer, at about a third more compute. Parameters are unchanged.
  remat: bool = False

  def __post_init__(self):
    # gin hands over lists; a frozen, hashable config needs tuples (it is a jit static arg).
    object.__setattr__(self, "mlp_activations", tuple(self.mlp_activations))
    if self.dtype not in ("float32", "bfloat16", "float16"):
      raise ValueError(f"T5Config.dtype must be float32, bfloat16 or float16, got {self.dtype!r}")

  @property
  def activation_dtype(self):
    return jnp.dtype(self.dtype)

  def replace(self, **changes) -> "T5Config":
    return dataclasses.replace(self, **changes)
