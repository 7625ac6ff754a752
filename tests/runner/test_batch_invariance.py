"""An item's scores do not depend on how evaluation batched it: the same items scored with batch
sizes 1, 3, 8 and 32, in the task's order and bucketed by length, through
runner.scoring_loop.score_task (batching, padding to the batch's longest row and most candidates, packing
each item's candidates into one decoder row, trimming to length buckets, the mesh, predictions.jsonl) give the same lines, in the task's order.
An evaluation stopped mid-task and resumed writes what an uninterrupted one does, and bucketing
pads less (counted from the arrays the scorer was given).

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
from runner import data, outputs, partitioning, scorers, scoring_loop

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


MESH = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])


def _score(tmp_path, params, scorer, batch_size, bucket=True, should_stop=lambda: False, name=None):
  score_fn = scorers.make_score_fn(CONFIG, scorer, "token", partitioning.Partitioner.for_mesh(MESH))
  out = tmp_path / (name or f"{scorer}_{batch_size}_{bucket}")
  with outputs.PredictionsAppender(str(out)) as appender:
    stats = scoring_loop.score_task("quickstart_like", "test", LENGTHS, batch_size, score_fn, params, appender,
                                partitioner=partitioning.Partitioner.for_mesh(MESH), bucket_by_length=bucket, should_stop=should_stop)
  return outputs.read_predictions(str(out / outputs.PREDICTIONS_FILE)), stats


def _in_task_order(records):
  """The records as evaluate's finished file holds them (batches are written as they are scored)."""
  order = [item["id"] for item in ITEMS]
  return sorted(records, key=lambda record: order.index(record["id"]))


def _assert_batch_invariant(tmp_path, params, scorer, extras=()):
  by_size = {(size, bucket): _in_task_order(_score(tmp_path, params, scorer, size, bucket)[0])
             for size in BATCH_SIZES for bucket in (False, True)}
  reference = by_size[1, False]
  assert [r["id"] for r in reference] == [item["id"] for item in ITEMS]
  for size, records in by_size.items():
    assert [r["id"] for r in records] == [r["id"] for r in reference], size
    assert [r["prediction"] for r in records] == [r["prediction"] for r in reference], size
    for record, expected in zip(records, reference):
      where = f"{record['id']} with batch size {size}"
      # 1e-6 of the score's size (at least 1e-6): a mean log-probability near -6 is 4.8e-7 per float32
      # ulp, and XLA's CPU matmuls round a row differently when the batch around it differs (the
      # same item alone and among 2 others: its summed log-likelihood 1 ulp apart).
      np.testing.assert_allclose(record["scores"], expected["scores"], rtol=TOLERANCE, atol=TOLERANCE, err_msg=where)
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


def _assert_short_items(records, count):
  """`count` of the four short items, each written once."""
  ids = [r["id"] for r in records]
  assert len(set(ids)) == len(ids) == count and all(i.startswith("asq") for i in ids), ids


@pytest.mark.parametrize("row_multiple", [1, 3])
def test_a_windows_remainder_is_its_first_batch_of_the_shortest_items(row_multiple):
  """7 items in batches of 3: the one left over is batched first, in one row, or in three on a
  mesh that splits rows in 3 blocks, whose two empty rows are then the shortest shape, not the
  longest; every item is in one batch."""
  batches = list(data.bucketed_candidate_batches(iter(ITEMS), LENGTHS, 3, VOCAB, row_multiple=row_multiple))
  assert [len(positions) for positions, _, _ in batches] == [1, 3, 3]
  assert [int(batch["example_mask"].sum()) for _, _, batch in batches] == [1, 3, 3]
  assert [len(batch["input_ids"]) for _, _, batch in batches] == [row_multiple, 3, 3]
  assert sorted(p for positions, _, _ in batches for p in positions) == list(range(len(ITEMS)))
  keys = [data.length_key(ITEMS[p], LENGTHS) for positions, _, _ in batches for p in positions]
  assert keys == sorted(keys)
  widths = [sum(array.shape[1] for array in data.trim_padding(batch["input_ids"], batch["candidate_ids"]))
            for _, _, batch in batches]
  assert widths == sorted(widths) and widths[0] < widths[-1], widths


def _stop_after(batches: int):
  asked = []
  return lambda: asked.append(1) or len(asked) > batches


def test_a_stopped_bucketed_evaluation_resumes_to_the_uninterrupted_file(tmp_path, quickstart_like):
  """Stopped after two batches (bucketed: the remainder's one item, then three, the four short
  ASQ-like items), the finished items are kept; resumed, the rest are scored, and the file put in
  order is the uninterrupted run's, byte for byte."""
  params = init_params(CONFIG, jax.random.PRNGKey(0))
  _, whole = _score(tmp_path, params, "likelihood", 3, name="whole")
  records, stats = _score(tmp_path, params, "likelihood", 3, should_stop=_stop_after(2), name="resumed")
  _assert_short_items(records, 4)
  assert stats.items == 4
  records, stats = _score(tmp_path, params, "likelihood", 3, name="resumed")
  assert stats.items == len(ITEMS) - 4 and stats.ids == whole.ids == [item["id"] for item in ITEMS]
  assert [r["id"] for r in records] != stats.ids  # the first run's items came first
  order = [("quickstart_like", i) for i in stats.ids]
  path = tmp_path / "resumed" / outputs.PREDICTIONS_FILE
  assert outputs.reorder_predictions(str(path), order)
  outputs.reorder_predictions(str(tmp_path / "whole" / outputs.PREDICTIONS_FILE), order)  # as evaluate does
  assert path.read_bytes() == (tmp_path / "whole" / outputs.PREDICTIONS_FILE).read_bytes()


def test_an_error_reading_the_items_is_raised_with_its_message(tmp_path, quickstart_like, monkeypatch):
  """Batches are made on a thread: its error reaches the caller, and the items scored before stay written."""
  made = []

  def failing(examples, *args, **kwargs):
    if made:
      raise ValueError(f"item {data.example_id(examples[0])}: bad candidates")
    made.append(1)
    return real(examples, *args, **kwargs)
  real = data.candidate_batch
  monkeypatch.setattr(data, "candidate_batch", failing)
  with pytest.raises(ValueError, match=r"item \S+: bad candidates"):
    _score(tmp_path, init_params(CONFIG, jax.random.PRNGKey(0)), "likelihood", 3, name="failing")
  _assert_short_items(outputs.read_predictions(str(tmp_path / "failing" / outputs.PREDICTIONS_FILE)), 1)


@pytest.mark.parametrize("batch_size", [2, 3])
def test_bucketing_pads_less_and_the_counts_are_the_arrays_scored(tmp_path, quickstart_like, batch_size):
  """Short and long items alternate: in the task's order most batches hold both, bucketed few do.
  TaskStats' tokens and positions are counted again here from the arrays the scorer received."""
  def counted(stats_of):
    def score(params, arrays, lengths):
      del params
      stats_of.append((int(np.count_nonzero(arrays["input_ids"])) + int(np.count_nonzero(arrays["candidate_ids"])),
                       arrays["input_ids"].size + arrays["candidate_ids"].size))
      return {"scores": np.zeros(lengths["tokens"].shape)}  # [B, K]
    return score

  real_tokens = sum(min(len(item["inputs"]), LENGTHS["inputs"])
                    + sum(min(len(c), LENGTHS["targets"]) for c in item["candidates"]) for item in ITEMS)
  padding = {}
  for bucket in (False, True):
    sent = []
    with outputs.PredictionsAppender(str(tmp_path / f"{bucket}")) as appender:
      stats = scoring_loop.score_task("quickstart_like", "test", LENGTHS, batch_size, counted(sent), None, appender,
                                  bucket_by_length=bucket)
    assert stats.items == len(ITEMS) and stats.batches == len(sent) == -(-len(ITEMS) // batch_size)
    assert stats.real_tokens == sum(tokens for tokens, _ in sent) == real_tokens
    assert stats.positions == sum(positions for _, positions in sent)
    assert stats.padding_share == pytest.approx(1 - real_tokens / stats.positions)
    assert f"{stats.padding_share:.0%} of the tokens scored" in stats.line()
    padding[bucket] = stats.padding_share
  # With candidates packed, in-order batches of 3 pad 52% and bucketed ones 42% (10 points less).
  assert padding[True] < padding[False] - 0.05, padding


def test_each_batch_is_on_disk_before_the_next_is_scored(tmp_path, quickstart_like):
  """A SIGKILL (no `finally` runs) loses only the batch being scored: bucketed, the batches come out
  of the task's order (the remainder's one item first, then three short ones), and each is in
  predictions.jsonl before the next reaches the scorer. (Written in the task's order, as before,
  nothing was on disk until the task's first item was scored.)"""
  score_fn = scorers.make_score_fn(CONFIG, "likelihood", "token", partitioning.Partitioner.for_mesh(MESH))
  on_disk = []

  def scoring(params, arrays, lengths):
    on_disk.append(len(outputs.read_written_ids(str(tmp_path / "out" / outputs.PREDICTIONS_FILE))))
    return score_fn(params, arrays, lengths)

  with outputs.PredictionsAppender(str(tmp_path / "out")) as appender:
    stats = scoring_loop.score_task("quickstart_like", "test", LENGTHS, 3, scoring, init_params(CONFIG, jax.random.PRNGKey(0)),
                                appender, partitioner=partitioning.Partitioner.for_mesh(MESH))
  assert on_disk == [0, 1, 4] and stats.items == len(ITEMS) == 7
  first_batch = [r["id"] for r in outputs.read_predictions(str(tmp_path / "out" / outputs.PREDICTIONS_FILE))][:1]
  assert first_batch != [ITEMS[0]["id"]]  # the premise: the first batch scored is not the task's first item
