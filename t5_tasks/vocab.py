"""The vocabulary of every registered task: bytes by default, SentencePiece through gin.

Tasks are registered when `t5_tasks` is imported, usually before gin has parsed the run's
bindings, so they hold a `ConfiguredVocabulary` that asks `get_vocabulary()` each time it is
used. A gin file switches every task to a SentencePiece model with:

    SENTENCEPIECE_MODEL_PATH = 'gs://t5-data/vocabs/cc_all.32000/sentencepiece.model'
    t5_tasks.vocab.get_vocabulary.sentencepiece_model_path = %SENTENCEPIECE_MODEL_PATH
"""
import functools
from typing import Optional

import gin
import seqio

# T5 checkpoints expect the SentencePiece model with 100 sentinel ids (<extra_id_0> ...).
DEFAULT_EXTRA_IDS = 100


@functools.lru_cache(maxsize=None)
def _build(sentencepiece_model_path: Optional[str], extra_ids: int) -> seqio.Vocabulary:
  if sentencepiece_model_path is None:
    return seqio.ByteVocabulary()
  return seqio.SentencePieceVocabulary(sentencepiece_model_path, extra_ids=extra_ids)


@gin.configurable
def get_vocabulary(sentencepiece_model_path: Optional[str] = None,
                   extra_ids: int = DEFAULT_EXTRA_IDS) -> seqio.Vocabulary:
  """ByteVocabulary when no SentencePiece model path is bound, else that model."""
  return _build(sentencepiece_model_path, extra_ids)


class ConfiguredVocabulary(seqio.Vocabulary):
  """Forwards every call to `get_vocabulary()`, resolved at use (dataset building) time."""

  def __init__(self):
    super().__init__(extra_ids=0)

  @property
  def resolved(self) -> seqio.Vocabulary:
    return get_vocabulary()

  @property
  def bos_id(self):
    return self.resolved.bos_id

  @property
  def eos_id(self):
    return self.resolved.eos_id

  @property
  def pad_id(self):
    return self.resolved.pad_id

  @property
  def unk_id(self):
    return self.resolved.unk_id

  @property
  def extra_ids(self):
    return self.resolved.extra_ids

  @property
  def vocab_size(self):
    return self.resolved.vocab_size

  @property
  def _base_vocab_size(self):
    return self.resolved._base_vocab_size  # pylint: disable=protected-access

  def encode(self, s):
    return self.resolved.encode(s)

  def decode(self, ids):
    return self.resolved.decode(ids)

  def encode_tf(self, s):
    return self.resolved.encode_tf(s)

  def decode_tf(self, ids):
    return self.resolved.decode_tf(ids)

  def _encode(self, s):
    return self.resolved.encode(s)

  def _decode(self, ids):
    return self.resolved.decode(ids)

  def _encode_tf(self, s):
    return self.resolved.encode_tf(s)

  def _decode_tf(self, ids):
    return self.resolved.decode_tf(ids)

  def __eq__(self, other):
    other = other.resolved if isinstance(other, ConfiguredVocabulary) else other
    return self.resolved == other

  def __repr__(self):
    return f"ConfiguredVocabulary({self.resolved!r})"
