"""Examples -> numpy arrays: an item's candidates as `[B, K, T]` tensors (`candidate_arrays`),
trimmed of padding, packed end to end into one decoder row (`pack_candidates`), the scored text's
lengths, and the metadata of an example that reports keep.
"""
from typing import Any, Mapping, Sequence

import numpy as np


# Features that hold tokens; every other feature of an example is metadata for reports.
TOKEN_FEATURES = ("inputs", "targets", "candidates", "candidate_labels")


def candidate_rows(value) -> list[np.ndarray]:
  """Candidates of one example as 1-D arrays, whether dense, ragged or lists."""
  if hasattr(value, "to_list"):
    value = value.to_list()
  return [np.asarray(row, np.int32).reshape(-1) for row in value]


def candidate_arrays(examples: Sequence[Mapping[str, Any]], input_length: int, candidate_length: int,
                     num_candidates: int | None = None) -> dict[str, np.ndarray]:
  """Tokenized cloze/preference examples -> padded arrays (0 = padding; lengths fixed for jit).

  Returns `input_ids` [B, input_length], `candidate_ids` [B, K, candidate_length],
  `candidate_labels` [B, K] int32 and `candidate_mask` [B, K] bool; K is `num_candidates` or the
  most candidates of any example. Longer inputs and candidates are cut, as seqio trims.
  """
  candidates = [candidate_rows(example["candidates"]) for example in examples]
  k = num_candidates or max(len(rows) for rows in candidates)
  rows = len(examples)
  out = {"input_ids": np.zeros((rows, input_length), np.int32),
         "candidate_ids": np.zeros((rows, k, candidate_length), np.int32),
         "candidate_labels": np.zeros((rows, k), np.int32),
         "candidate_mask": np.zeros((rows, k), bool)}
  for i, (example, options) in enumerate(zip(examples, candidates)):
    labels = np.asarray(example["candidate_labels"], np.int32).reshape(-1)
    if len(labels) != len(options) or len(options) > k:
      raise ValueError(f"example {i} (id {_text(example.get('id', '?'))!r}): {len(options)} candidates, "
                       f"{len(labels)} candidate_labels, room for {k}")
    inputs = np.asarray(example["inputs"], np.int32)[:input_length]
    out["input_ids"][i, :len(inputs)] = inputs
    for j, option in enumerate(options):
      out["candidate_ids"][i, j, :min(len(option), candidate_length)] = option[:candidate_length]
    out["candidate_labels"][i, :len(labels)] = labels
    out["candidate_mask"][i, :len(options)] = True
  return out


def bucket_length(length: int, limit: int, smallest: int = 8) -> int:
  """The smallest bucket that holds `length`, at most `limit`: multiples of `smallest`, four per
  doubling past 4 * `smallest` (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, ...).

  Past 32 tokens a row is at most 20% padding, where power-of-two buckets let it reach 50%:
  TimeDial's 400-512-byte dialogs made 25% of the positions scored padding (issue 14). A task's
  lengths still compile to a few shapes per doubling.
  """
  power = smallest
  while power < length:
    power *= 2
  step = max(power // 8, smallest)
  return min(-(-max(length, 1) // step) * step, limit)


def trim_padding(input_ids: np.ndarray, candidate_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Drops trailing all-padding columns (`trim_columns`) of the inputs and the candidates.

  Evaluation pads every batch to the task's feature lengths, but cloze candidates are usually
  far shorter (TimeDial's options are a few tokens against a `targets` length of 128): decoding
  the padding would cost more than the candidates. Scores are unchanged (padding is masked in
  the encoder and comes after every real token in the decoder); buckets keep the number of
  compiled shapes to a handful.
  """
  return trim_columns(input_ids), trim_columns(candidate_ids)


def trim_columns(ids: np.ndarray) -> np.ndarray:
  """`ids` [..., T] without its trailing all-padding columns, its length in `bucket_length`'s buckets."""
  columns = np.flatnonzero(ids.reshape(-1, ids.shape[-1]).any(axis=0))
  return ids[..., :bucket_length(int(columns[-1]) + 1 if columns.size else 1, ids.shape[-1])]


def pack_candidates(candidate_ids: np.ndarray, score_mask: np.ndarray) -> dict[str, np.ndarray]:
  """Candidates [B, K, T] (0 = padding after each) -> each row's candidates end to end:
  `candidate_ids`, `candidate_segments` (1..K, 0 = padding) and `score_mask`, all [B, S], S the
  longest row's real tokens in `bucket_length`'s buckets (at most K * T).

  `models.scoring.score_packed` scores them as `score_candidates` scores the unpacked ones, but
  decodes only real tokens and a row's padding: padded to the batch's longest candidate, four
  TimeDial options of 5 to 58 bytes were more than half padding, each position a pass through
  the decoder and the 32128-way output layer (issue 14).
  """
  rows, k, steps = candidate_ids.shape
  real = candidate_ids > 0
  flat = real.reshape(rows, k * steps)
  width = bucket_length(max(int(flat.sum(axis=1).max(initial=0)), 1), k * steps)
  row, slot = np.nonzero(flat)
  column = np.cumsum(flat, axis=1)[row, slot] - 1  # each real token's place in its packed row
  out = {"candidate_ids": np.zeros((rows, width), np.int32), "candidate_segments": np.zeros((rows, width), np.int32),
         "score_mask": np.zeros((rows, width), bool)}
  out["candidate_ids"][row, column] = candidate_ids.reshape(rows, -1)[row, slot]
  out["candidate_segments"][row, column] = slot // steps + 1
  out["score_mask"][row, column] = np.asarray(score_mask).reshape(rows, -1)[row, slot]
  return out


def packed_arrays(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """What evaluation's scorers read of a `candidate_batch`: `input_ids` [B, L] trimmed
  (`trim_columns`) and the candidates packed one row per item (`pack_candidates`)."""
  return {"input_ids": trim_columns(batch["input_ids"]), **pack_candidates(batch["candidate_ids"], batch["score_mask"])}


def first_sentinel_id(vocabulary) -> int | None:
  """The lowest sentinel id (`<extra_id_N>` is vocab_size - 1 - N in seqio's vocabularies), or None."""
  extra_ids = int(getattr(vocabulary, "extra_ids", 0) or 0)
  return int(vocabulary.vocab_size) - extra_ids if extra_ids else None


def scored_text_lengths(vocabulary, candidate_ids: np.ndarray, score_mask: np.ndarray) -> dict[str, np.ndarray]:
  """`scored_chars` and `scored_bytes` [..., K]: the length of the text each candidate's scored
  tokens decode to (EOS and sentinels decode to nothing), as lm-evaluation-harness measures a
  continuation for acc_norm (characters) and per-byte scores."""
  eos = vocabulary.eos_id
  chars = np.zeros(candidate_ids.shape[:-1], np.int32)
  octets = np.zeros(candidate_ids.shape[:-1], np.int32)
  for index in np.ndindex(*candidate_ids.shape[:-1]):
    ids = candidate_ids[index][score_mask[index]]
    if ids.size:
      text = vocabulary.decode([int(i) for i in ids if i != eos])
      chars[index], octets[index] = len(text), len(text.encode("utf-8"))
  return {"scored_chars": chars, "scored_bytes": octets}


def _text(value):
  return value.decode("utf-8") if isinstance(value, bytes) else value


def example_id(example: Mapping[str, Any]) -> str:
  return str(_text(example["id"]))


def example_metadata(example: Mapping[str, Any]) -> dict:
  """The non-token features of an example as JSON-ready Python values (bytes decoded)."""
  out = {}
  for name, value in example.items():
    if name in TOKEN_FEATURES:
      continue
    if hasattr(value, "to_list"):
      value = value.to_list()
    if isinstance(value, np.ndarray):
      value = value.tolist()
    if isinstance(value, np.generic):
      value = value.item()
    out[name] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
  return out
