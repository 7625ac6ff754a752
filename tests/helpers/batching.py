"""Tokenized cloze or preference examples padded into numpy arrays, independently of
runner.data: what the runner tests compare the scores of their batches against."""
from typing import Any, Mapping, Sequence

import numpy as np


def _rows(value) -> list[np.ndarray]:
  """The candidates of one example as a list of 1-D int arrays (dense, ragged or lists)."""
  if hasattr(value, "to_list"):  # tf.RaggedTensor / RaggedTensorValue
    value = value.to_list()
  return [np.asarray(row, dtype=np.int32).reshape(-1) for row in value]


def candidates_to_numpy(examples: Sequence[Mapping[str, Any]], max_candidates: int | None = None,
                        candidate_length: int | None = None) -> dict[str, np.ndarray]:
  """Pads tokenized examples into a batch of items with their candidates.

  Args:
    examples: tokenized examples from a cloze or preference task (e.g. from
      `task.get_dataset(...).as_numpy_iterator()`), each with `inputs` [L_i],
      `candidates` [K_i, T_ij] (EOS already appended) and `candidate_labels` [K_i].
    max_candidates: K of the output; default the largest K_i. An item with more
      candidates is an error (dropping one could drop the correct answer).
    candidate_length: T of the output; default the longest candidate. Longer
      candidates are cut to T tokens, as seqio trims features.

  Returns:
    `input_ids` [B, L] int32 (L the longest input), `candidate_ids` [B, K, T] int32,
    `candidate_labels` [B, K] int32, `candidate_mask` [B, K] bool (False for the
    padding candidates of items with fewer than K). Token id 0 is padding.
  """
  if not examples:
    raise ValueError("candidates_to_numpy needs at least one example")
  candidates = [_rows(ex["candidates"]) for ex in examples]
  labels = [np.asarray(ex["candidate_labels"], np.int32).reshape(-1) for ex in examples]
  inputs = [np.asarray(ex["inputs"], np.int32).reshape(-1) for ex in examples]
  for i, (rows, gold) in enumerate(zip(candidates, labels)):
    if len(rows) != len(gold):
      raise ValueError(f"example {i}: {len(rows)} candidates but {len(gold)} candidate_labels")
  k = max(len(rows) for rows in candidates) if max_candidates is None else max_candidates
  t = (max(len(row) for rows in candidates for row in rows)
       if candidate_length is None else candidate_length)
  batch = len(examples)
  out = {
      "input_ids": np.zeros((batch, max(len(x) for x in inputs)), np.int32),
      "candidate_ids": np.zeros((batch, k, t), np.int32),
      "candidate_labels": np.zeros((batch, k), np.int32),
      "candidate_mask": np.zeros((batch, k), bool),
  }
  for i, (ids, rows, gold) in enumerate(zip(inputs, candidates, labels)):
    if len(rows) > k:
      raise ValueError(f"example {i}: {len(rows)} candidates, more than max_candidates={k}")
    out["input_ids"][i, :len(ids)] = ids
    for j, row in enumerate(rows):
      out["candidate_ids"][i, j, :min(len(row), t)] = row[:t]
    out["candidate_labels"][i, :len(gold)] = gold
    out["candidate_mask"][i, :len(rows)] = True
  return out
