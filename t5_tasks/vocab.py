"""The vocabulary of every registered task: bytes by default, SentencePiece through gin.

Tasks are registered when `t5_tasks` is imported, usually before gin has parsed the run's
bindings, so they hold a `ConfiguredVocabulary` that asks `get_vocabulary()` each time it is
used. A gin file switches every task to a SentencePiece model with:

    SENTENCEPIECE_MODEL_PATH = 'gs://t5-data/vocabs/cc_all.32000/sentencepiece.model'
    t5_tasks.vocab.get_vocabulary.sentencepiece_model_path = %SENTENCEPIECE_MODEL_PATH

Both vocabularies hold 100 sentinels, `<extra_id_N>` = id `vocab_size - 1 - N` (seqio's
convention). The tasks' vocabulary reads that markup in text as the sentinel id, as T5's span
corruption lays it out: the text is cut at each sentinel and every piece between them is
encoded on its own (so a SentencePiece span gets its word-initial pieces, as in pre-training).
"""
import functools
import re
from typing import Optional

import gin
import numpy as np
import seqio
import tensorflow as tf

import storage
import t5_tasks  # _silent_stderr

# T5 checkpoints expect the SentencePiece model with 100 sentinel ids (<extra_id_0> ...).
DEFAULT_EXTRA_IDS = 100


@functools.lru_cache(maxsize=None)
def _build(sentencepiece_model_path: Optional[str], extra_ids: int) -> seqio.Vocabulary:
  if sentencepiece_model_path is None:
    return seqio.ByteVocabulary(extra_ids=extra_ids)
  vocabulary = seqio.SentencePieceVocabulary(sentencepiece_model_path, extra_ids=extra_ids)
  # Read now: seqio reads on first use, where an unreachable file is a 60-line TensorFlow traceback.
  # stderr is silent meanwhile: TensorFlow's C++ GCS client logs its failed credential probes there.
  try:
    with t5_tasks._silent_stderr():  # pylint: disable=protected-access
      vocabulary.tokenizer  # pylint: disable=pointless-statement
  except tf.errors.OpError as error:
    cause = " ".join(error.message.split()).split(" when reading ")[0]  # the path is named once, first
    advice = ("copy it to a local file and bind that path" if storage.is_bucket(sentencepiece_model_path)
              else "bind the path of a model that exists")
    raise storage.StorageError(
        f"{sentencepiece_model_path}: the SentencePiece model cannot be read ({cause}); {advice}: "
        "--gin.SENTENCEPIECE_MODEL_PATH=\"'spiece.model'\" with a recipe of "
        "gin/recipes/, else --gin.t5_tasks.vocab.get_vocabulary.sentencepiece_model_path=...") from None
  return vocabulary


@gin.configurable
def get_vocabulary(sentencepiece_model_path: Optional[str] = None,
                   extra_ids: int = DEFAULT_EXTRA_IDS) -> seqio.Vocabulary:
  """ByteVocabulary when no SentencePiece model path is bound, else that model."""
  return _build(sentencepiece_model_path, extra_ids)


_SENTINEL = re.compile(r"<extra_id_(\d+)>")
_HAS_SENTINEL_TF = r"(?s).*<extra_id_[0-9]+>.*"


def encode_with_sentinels(vocabulary: seqio.Vocabulary, text) -> list[int]:
  """`text`'s ids: each `<extra_id_N>` (N < extra_ids) its sentinel, each piece between on its own."""
  text = text.item() if isinstance(text, np.ndarray) else text  # from tf.numpy_function
  text = text.decode("utf-8") if isinstance(text, bytes) else text
  ids, start = [], 0
  for match in _SENTINEL.finditer(text):
    if int(match.group(1)) >= vocabulary.extra_ids:
      continue  # not a sentinel of this vocabulary: plain text
    if match.start() > start:
      ids.extend(vocabulary.encode(text[start:match.start()]))
    ids.append(vocabulary.vocab_size - 1 - int(match.group(1)))
    start = match.end()
  if start < len(text):
    ids.extend(vocabulary.encode(text[start:]))
  return [int(i) for i in ids]


def encode_tf_with_sentinels(vocabulary: seqio.Vocabulary, text: tf.Tensor) -> tf.Tensor:
  """`encode_with_sentinels` in tf.data: a scalar without markup takes the vocabulary's TF path.

  Only a scalar is searched for markup; other shapes go to the vocabulary's `encode_tf` as is.
  """
  if text.shape.rank != 0:
    return vocabulary.encode_tf(text)

  def with_markup():
    ids = tf.numpy_function(
        lambda t: np.asarray(encode_with_sentinels(vocabulary, t), np.int32), [text], tf.int32,
        stateful=False)
    ids.set_shape([None])
    return ids
  return tf.cond(tf.strings.regex_full_match(text, _HAS_SENTINEL_TF), with_markup,
                 lambda: tf.cast(vocabulary.encode_tf(text), tf.int32))


def decode_with_sentinels(vocabulary: seqio.Vocabulary, ids) -> str:
  """The text of `ids` up to the first EOS, each sentinel written back as `<extra_id_N>`."""
  ids = [int(i) for i in np.asarray(ids).reshape(-1)]
  if vocabulary.eos_id in ids:
    ids = ids[:ids.index(vocabulary.eos_id)]
  first_sentinel = vocabulary.vocab_size - vocabulary.extra_ids
  parts, run = [], []
  for i in ids + [None]:
    if i is not None and not first_sentinel <= i < vocabulary.vocab_size:
      run.append(i)
      continue
    if run:
      parts.append(vocabulary.decode(run))
      run = []
    if i is not None:
      parts.append(f"<extra_id_{vocabulary.vocab_size - 1 - i}>")
  return "".join(parts)


class ConfiguredVocabulary(seqio.Vocabulary):
  """Forwards every call to `get_vocabulary()`, resolved at use (dataset building) time.

  Encoding and decoding also read and write sentinel markup (`encode_with_sentinels`);
  `decode_tf` is the resolved vocabulary's, which drops sentinels.
  """

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
    return encode_with_sentinels(self.resolved, s)

  def decode(self, ids):
    return decode_with_sentinels(self.resolved, ids)

  def encode_tf(self, s):
    return encode_tf_with_sentinels(self.resolved, s)

  def decode_tf(self, ids):
    return self.resolved.decode_tf(ids)

  def _encode(self, s):
    return self.encode(s)

  def _decode(self, ids):
    return self.decode(ids)

  def _encode_tf(self, s):
    return self.encode_tf(s)

  def _decode_tf(self, ids):
    return self.resolved.decode_tf(ids)

  def __eq__(self, other):
    other = other.resolved if isinstance(other, ConfiguredVocabulary) else other
    return self.resolved == other

  def __repr__(self):
    return f"ConfiguredVocabulary({self.resolved!r})"
