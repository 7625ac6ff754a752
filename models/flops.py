"""Analytic matmul FLOPs of T5.1.1 work (2 per multiply-add), the numerator of model-FLOPs utilisation,
and the bf16 peak FLOP/s of the accelerators whose peak is published, its denominator.

Only matrix products count (projections, attention scores and mixing, MLP, output layer), as in
the usual MFU convention; norms, softmax and embedding lookups are left out. Shapes are the padded
shapes the programs run on. scripts/benchmark.py divides by a measured matmul rate instead; the
trainer's progress line, which measures nothing, by the published peak (MaxText's way).
"""
from typing import Sequence

from models.config import T5Config

# Dense bf16 peak FLOP/s per chip from the vendors' data sheets, by a fragment of JAX's
# `device_kind`; the first fragment found wins, so a variant precedes its family's name.
PEAK_BF16_FLOPS = (
    ("TPU v4", 275e12),
    ("TPU v5 lite", 197e12),  # v5e
    ("TPU v5e", 197e12),
    ("TPU v5p", 459e12),
    ("TPU v5", 459e12),  # v5p reports itself as "TPU v5"
    ("TPU v6 lite", 918e12),  # v6e (Trillium)
    ("TPU v6e", 918e12),
    ("A100", 312e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
)


def _inner(config: T5Config) -> int:
  return config.num_heads * config.head_dim


def _mlp_per_token(config: T5Config) -> int:
  return 2 * (len(config.mlp_activations) + 1) * config.emb_dim * config.mlp_dim


def encoder_flops(config: T5Config, batch: int, length: int) -> int:
  """The encoder stack over [batch, length] tokens."""
  inner = _inner(config)
  projections = batch * length * (2 * 4 * config.emb_dim * inner + _mlp_per_token(config))
  attention = 2 * 2 * batch * length * length * inner
  return config.num_encoder_layers * (projections + attention)


def cross_kv_flops(config: T5Config, batch: int, length: int) -> int:
  """Every decoder layer's cross-attention keys and values of [batch, length] encoder outputs."""
  return config.num_decoder_layers * 2 * 2 * batch * length * config.emb_dim * _inner(config)


def decoder_flops(config: T5Config, rows: int, steps: int, context: int, self_keys: int | None = None) -> int:
  """The decoder stack and output layer for [rows, steps] queries, cross keys/values excluded.

  `self_keys` is how many positions each query's self-attention reads (steps when teacher-forced).
  """
  inner = _inner(config)
  self_keys = steps if self_keys is None else self_keys
  tokens = rows * steps
  # self-attention q, k, v, o and cross-attention q, o projections
  projections = tokens * (2 * 6 * config.emb_dim * inner + _mlp_per_token(config))
  attention = 2 * 2 * tokens * (self_keys + context) * inner
  logits = 2 * tokens * config.emb_dim * config.vocab_size
  return config.num_decoder_layers * (projections + attention) + logits


def forward_flops(config: T5Config, batch: int, length: int, steps: int) -> int:
  """A teacher-forced forward pass: one encoding per decoder row."""
  return (encoder_flops(config, batch, length) + cross_kv_flops(config, batch, length)
          + decoder_flops(config, batch, steps, length))


def shared_scoring_flops(config: T5Config, batch: int, length: int, candidates: int, steps: int) -> int:
  """Scoring K candidates per context with the context encoded once (score_candidates)."""
  return (encoder_flops(config, batch, length) + cross_kv_flops(config, batch, length)
          + decoder_flops(config, batch * candidates, steps, length))


def pair_scoring_flops(config: T5Config, batch: int, length: int, candidates: int, steps: int) -> int:
  """Scoring with one full forward per (context, candidate) pair (score_pairs, Hugging Face)."""
  return forward_flops(config, batch * candidates, length, steps)


def training_flops(config: T5Config, batch: int, length: int, steps: int) -> int:
  """One training step: the backward pass costs twice the forward."""
  return 3 * forward_flops(config, batch, length, steps)


def generation_flops(config: T5Config, batch: int, length: int, new_tokens: int) -> int:
  """Encoding once, then one cached decoder step per new token reading the positions so far."""
  steps = sum(decoder_flops(config, batch, 1, length, self_keys=t + 1) for t in range(new_tokens))
  return encoder_flops(config, batch, length) + cross_kv_flops(config, batch, length) + steps


def peak_flops_per_second(device_kinds: Sequence[str]) -> float | None:
  """The summed bf16 peak of devices of these `device_kind`s; None if one has no known peak (a CPU)."""
  peaks = [next((peak for fragment, peak in PEAK_BF16_FLOPS if fragment in kind), None) for kind in device_kinds]
  return None if not peaks or None in peaks else sum(peaks)
