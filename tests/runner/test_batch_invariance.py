"""An item's scores do not depend on how evaluation batched it: the same items scored with batch
sizes 1, 3, 8 and 32 through runner.evaluate.score_task (batching, padding to the batch's longest
row and most candidates, power-of-two trimming, the mesh, predictions.jsonl) give the same lines.

The items are quickstart-like (TimeDial- and ASQ-like clozes, a span-corruption candidate) of
different lengths and candidate counts, tokenized by bytes as the quickstart's vocabulary does; only
the seqio dataset they would be read from is replaced, so no TensorFlow is needed.
"""
import types

import jax
import numpy as np
import pytest

from models import reward as reward_lib
from models.config import T5Config
from models.network import init_params
from runner import data, evaluate, outputs, partitioning

CONFIG = T5Config(vocab_size=384, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                  num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 64, "targets": 16}
BATCH_SIZES = (1, 3, 8, 32)
TOLERANCE = 1e-6


class ByteVocabulary:
  """seqio.ByteVocabulary's ids without seqio: 0 pad, 1 EOS, 2 UNK, bytes from 3, then 100 sentinels."""
  eos_id, extra_ids, vocab_size = 1, 100, 3 + 256 + 100

  def encode(self, text: str) -> list[int]:
    return [b + 3 for b in text.encode("utf-8")]

  def sentinel(self, n: int) -> int:
    return self.vocab_size - 1 - n

  def decode(self, ids) -> str:
    return bytes(i - 3 for i in ids if 3 <= i < 259).decode("utf-8", errors="ignore")


VOCAB = ByteVocabulary()


def _item(item_id, context, candidates, gold):
  return {"id": item_id, "inputs": np.asarray(VOCAB.encode(context) + [1], np.int32),
          "candidates": [np.asarray(c if isinstance(c, list) else VOCAB.encode(c) + [1], np.int32)
                         for c in candidates],
          "candidate_labels": np.asarray([int(i == gold) for i in range(len(candidates))], np.int32)}


# Two kinds of item, interleaved so that every batch of 3 holds a long one: a short cloze (context
# in the 32-token bucket, 2 candidates of at most 8 tokens) and a long one (64 and 16, 4 candidates).
# Each batch size then compiles one or two shapes, and every item is padded differently by some.
ITEMS = [
    _item("asq-1", "Why do cats purr when calm?", ["Happy.", "No."], 0),
    _item("timedial-1", "A: When did you leave? B: About <MASK> ago, before the rain started.",
          ["five hours", "a decade", "3 seconds", "noon today"], 0),
    _item("asq-2", "What makes bread rise, then?", ["Yeast.", "Salt."], 0),
    _item("asq-3", "Is the sea salty or fresh?", ["Salty.", "Fresh."], 1),
    _item("span-1", "The meeting lasted <extra_id_0> and then we all went out to eat.",
          [[VOCAB.sentinel(0)] + VOCAB.encode(span) + [VOCAB.sentinel(1), 1]
           for span in ("two hours", "a century", "ten minutes", "a week")], 0),
    _item("asq-4", "Why is the night sky dark?", ["Space.", "Dark."], 0),
    _item("timedial-2", "B: I waited <MASK> for the bus; the stop had no roof at all.",
          ["twenty minutes", "two weeks", "1 ms", "an hour"], 0),
]


@pytest.fixture
def quickstart_like(monkeypatch):
  """data.get_provider answers with ITEMS for any task name, as a seqio task would (in order)."""
  task = types.SimpleNamespace(
      output_features={"candidates": types.SimpleNamespace(vocabulary=VOCAB)},
      get_dataset=lambda *args, **kwargs: types.SimpleNamespace(as_numpy_iterator=lambda: iter(ITEMS)))
  monkeypatch.setattr(data, "get_provider", lambda name: task)


def _score(tmp_path, params, scorer, batch_size):
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  score_fn = evaluate.make_score_fn(CONFIG, scorer, "token", mesh)
  out = tmp_path / f"{scorer}_{batch_size}"
  with outputs.PredictionsAppender(str(out)) as appender:
    evaluate.score_task("quickstart_like", "test", LENGTHS, batch_size, score_fn, params, appender, mesh=mesh)
  return outputs.read_predictions(str(out / outputs.PREDICTIONS_FILE))


def _assert_batch_invariant(tmp_path, params, scorer, extras=()):
  by_size = {size: _score(tmp_path, params, scorer, size) for size in BATCH_SIZES}
  reference = by_size[1]
  assert [r["id"] for r in reference] == [item["id"] for item in ITEMS]
  for size, records in by_size.items():
    assert [r["id"] for r in records] == [r["id"] for r in reference], size
    assert [r["prediction"] for r in records] == [r["prediction"] for r in reference], size
    for record, expected in zip(records, reference):
      where = f"{record['id']} with batch size {size}"
      np.testing.assert_allclose(record["scores"], expected["scores"], rtol=0, atol=TOLERANCE, err_msg=where)
      for name in extras:  # sums of tens of log-probabilities: 1e-6 relative is a few float32 ulps
        np.testing.assert_allclose(record[name], expected[name], rtol=TOLERANCE, atol=0, err_msg=where)


def test_likelihood_scores_do_not_depend_on_the_batch_size(tmp_path, quickstart_like):
  params = init_params(CONFIG, jax.random.PRNGKey(0))
  _assert_batch_invariant(tmp_path, params, "likelihood", extras=("log_likelihoods", "tokens"))


def test_the_items_are_padded_differently_by_different_batch_sizes():
  """The premise: batching changes each item's padded shape (context, candidates, steps)."""
  shapes = {}
  for size in BATCH_SIZES:
    for start in range(0, len(ITEMS), size):
      arrays = data.candidate_arrays(ITEMS[start:start + size], LENGTHS["inputs"], LENGTHS["targets"])
      inputs, candidates = data.trim_padding(arrays["input_ids"], arrays["candidate_ids"])
      for item in ITEMS[start:start + size]:
        shapes.setdefault(item["id"], set()).add((inputs.shape[1],) + candidates.shape[1:])
  assert all(len(seen) == 2 for name, seen in shapes.items() if name.startswith("asq")), shapes


def test_rewards_do_not_depend_on_the_batch_size(tmp_path, quickstart_like):
  params = reward_lib.init_reward_params(CONFIG, jax.random.PRNGKey(1))
  _assert_batch_invariant(tmp_path, params, "reward")
