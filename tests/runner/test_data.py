"""runner.data on a small synthetic seqio task: token ids, deterministic resumable order, every item once."""
import jax
import numpy as np
import pytest

seqio = pytest.importorskip("seqio")
tf = pytest.importorskip("tensorflow")

from models import scoring  # pylint: disable=g-import-not-at-top
from runner import data  # pylint: disable=g-import-not-at-top

TASK = "runner_test_synthetic_cloze"
LENGTHS = {"inputs": 12, "targets": 6}
ITEMS = [{"id": f"item{i}", "inputs": f"question {i}", "targets": f"a{i}",
          "candidates": [f"a{i}", f"b{i}"] + ([f"c{i}"] if i % 3 == 0 else []),
          "candidate_labels": [1, 0] + ([0] if i % 3 == 0 else [])} for i in range(10)]


def _byte_ids(text, length):
  """ByteVocabulary by hand: each UTF-8 byte + 3, then EOS (1), cut and padded to `length`."""
  ids = [b + 3 for b in text.encode("utf-8")][:length - 1] + [1]
  return ids + [0] * (length - len(ids))


def _tokenize_rank2(dataset, output_features):
  def step(example):
    example = dict(example, candidates_pretokenized=example["candidates"])
    for key in ("inputs", "targets"):
      example[key] = output_features[key].vocabulary.encode_tf(example[key])
    example["candidates"] = tf.map_fn(output_features["candidates"].vocabulary.encode_tf, example["candidates"],
                                      fn_output_signature=tf.RaggedTensorSpec([None], tf.int32))
    return example
  return dataset.map(step)


def _append_eos(dataset, output_features, sequence_length):
  lengths = dict(sequence_length, candidates=sequence_length["targets"])
  return seqio.preprocessors.append_eos_after_trim(dataset, output_features, lengths)


@pytest.fixture(scope="module", autouse=True)
def synthetic_task():
  vocabulary = seqio.ByteVocabulary()
  signature = {"id": tf.TensorSpec([], tf.string), "inputs": tf.TensorSpec([], tf.string),
               "targets": tf.TensorSpec([], tf.string), "candidates": tf.TensorSpec([None], tf.string),
               "candidate_labels": tf.TensorSpec([None], tf.int32)}
  def dataset_fn(split, shuffle_files, seed=None):
    return tf.data.Dataset.from_generator(lambda: iter(ITEMS), output_signature=signature)
  source = seqio.FunctionDataSource(dataset_fn, splits=["train"])
  seqio.TaskRegistry.add(
      TASK, source=source, preprocessors=[_tokenize_rank2, _append_eos],
      output_features={"inputs": seqio.Feature(vocabulary), "targets": seqio.Feature(vocabulary),
                       "candidates": seqio.Feature(vocabulary, rank=2),
                       "candidate_labels": seqio.Feature(seqio.PassThroughVocabulary(0), add_eos=False,
                                                         dtype=tf.int32)})
  yield
  seqio.TaskRegistry.remove(TASK)


def _take(iterator, count):
  return [next(iterator) for _ in range(count)]


def test_cross_entropy_batches_hold_the_tokenized_examples():
  batch = next(data.train_batches(TASK, LENGTHS, 4, seed=1))
  expected = {tuple(_byte_ids(item["inputs"], 12)): _byte_ids(item["targets"], 6) for item in ITEMS}
  assert batch["input_ids"].shape == (4, 12) and batch["target_ids"].shape == (4, 6)
  for inputs, targets in zip(batch["input_ids"], batch["target_ids"]):
    assert expected[tuple(inputs)] == list(targets)


def test_training_order_is_fixed_by_the_seed_and_resumes_at_a_step():
  first = _take(data.train_batches(TASK, LENGTHS, 4, seed=7), 6)  # 24 rows: more than one epoch
  again = _take(data.train_batches(TASK, LENGTHS, 4, seed=7), 6)
  resumed = _take(data.train_batches(TASK, LENGTHS, 4, seed=7, start_step=4), 2)
  other_seed = _take(data.train_batches(TASK, LENGTHS, 4, seed=8), 6)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
  for a, b in zip(first[4:], resumed):
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    np.testing.assert_array_equal(a["target_ids"], b["target_ids"])
  assert any(not np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(first, other_seed))


def test_reward_training_batches_are_candidate_tensors_and_resume():
  first = _take(data.train_batches(TASK, LENGTHS, 4, candidates=True, seed=3), 3)
  resumed = next(data.train_batches(TASK, LENGTHS, 4, candidates=True, seed=3, start_step=2))
  for name in ("input_ids", "candidate_ids", "candidate_labels", "candidate_mask"):
    np.testing.assert_array_equal(first[2][name], resumed[name])
  batch = first[0]
  assert batch["candidate_ids"].shape[::2] == (4, 6) and batch["input_ids"].shape == (4, 12)
  np.testing.assert_array_equal(batch["candidate_mask"].sum(1), (batch["candidate_ids"][..., 0] > 0).sum(1))
  np.testing.assert_array_equal(batch["candidate_labels"][:, 0], 1)


@pytest.mark.parametrize("candidates", [False, True])
def test_every_process_reads_the_batches_one_process_reads(monkeypatch, candidates):
  """No host-dependent sharding of the stream: process 1 of 2 reads the very batches of a single
  process (partitioning.global_batch then keeps the rows its devices hold), so 2 processes x 2
  devices train as 1 x 4, and a run resumes on another process count with the same data."""
  whole = _take(data.train_batches(TASK, LENGTHS, 4, candidates=candidates, seed=5, start_step=1), 2)
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  second = _take(data.train_batches(TASK, LENGTHS, 4, candidates=candidates, seed=5, start_step=1), 2)
  for one, other in zip(whole, second):
    assert one.keys() == other.keys()
    for name in one:
      np.testing.assert_array_equal(one[name], other[name])


@pytest.mark.parametrize("row_multiple, last_rows", [(1, 2), (4, 4)])
def test_candidate_batches_cover_every_item_once_and_pad_the_last_batch(row_multiple, last_rows):
  """10 items in batches of 4: the last batch's 2 items fill 2 rows, or 4 on a mesh that splits
  rows in 4 blocks (empty rows padded, example_mask False)."""
  batches = list(data.candidate_batches(TASK, "train", LENGTHS, 4, row_multiple=row_multiple))
  assert [len(metadata) for metadata, _ in batches] == [4, 4, 2]
  assert [len(batch["input_ids"]) for _, batch in batches] == [4, 4, last_rows]
  metadata = [m for ms, _ in batches for m in ms]
  assert [m["id"] for m in metadata] == [item["id"] for item in ITEMS]
  assert metadata[3]["candidates_pretokenized"] == ["a3", "b3", "c3"]
  last = batches[-1][1]
  np.testing.assert_array_equal(last["example_mask"], [True, True] + [False] * (last_rows - 2))
  assert all(len(value) == last_rows for value in last.values())
  assert not last["input_ids"][2:].any() and not last["candidate_mask"][2:].any()
  for (ms, batch) in batches:
    for row, m in enumerate(ms):
      item = ITEMS[int(m["id"][4:])]
      assert list(batch["input_ids"][row]) == _byte_ids(item["inputs"], 12)
      for k, text in enumerate(item["candidates"]):
        assert list(batch["candidate_ids"][row, k]) == _byte_ids(text, 6)
      assert batch["candidate_mask"][row].sum() == len(item["candidates"])
      assert list(batch["candidate_labels"][row, :len(item["candidates"])]) == item["candidate_labels"]


def test_a_short_batch_has_its_items_rounded_up_to_the_row_multiple():
  assert [data.batch_rows(items, 32) for items in (1, 7, 32)] == [1, 7, 32]
  assert [data.batch_rows(items, 32, 8) for items in (1, 7, 9, 25, 32)] == [8, 8, 16, 32, 32]
  assert data.batch_rows(5, 6, 3) == 6


def test_powers_of_two_keep_a_servers_short_batches_to_a_few_sizes():
  assert [data.batch_rows(items, 8, powers_of_two=True) for items in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
  # Blocks of 2 rows (a data axis of 2): 1-2 items take one block, 3-4 two, 5-8 four.
  assert [data.batch_rows(items, 8, 2, powers_of_two=True) for items in (1, 2, 3, 4, 5, 8)] == [2, 2, 4, 4, 8, 8]
  # Never past batch_size, also when batch_size is no power of two.
  assert [data.batch_rows(items, 6, powers_of_two=True) for items in (3, 5, 6)] == [4, 6, 6]
  sizes = {data.batch_rows(items, 64, 4, powers_of_two=True) for items in range(1, 65)}
  assert sizes == {4, 8, 16, 32, 64}


def _assert_same(ours, theirs):
  """Equal values of the same types, dtypes, shapes and writability, down to ragged rows."""
  assert type(ours) is type(theirs)
  if isinstance(theirs, np.ndarray):
    assert (ours.dtype, ours.shape, ours.flags.writeable) == (theirs.dtype, theirs.shape, theirs.flags.writeable)
    if theirs.dtype == object:
      for a, b in zip(ours, theirs):
        _assert_same(a, b)
    else:
      np.testing.assert_array_equal(ours, theirs)
  else:
    assert ours == theirs


@pytest.mark.parametrize("group", [1, 3, 64])
def test_candidate_examples_are_tf_datas_own_examples_read_in_groups(group):
  with data.graph_mode_maps():
    theirs = list(data.get_provider(TASK).get_dataset(LENGTHS, "train", shuffle=False, num_epochs=1)
                  .as_numpy_iterator())
  ours = list(data.candidate_examples(TASK, "train", LENGTHS, group=group)[0])
  assert len(ours) == len(theirs) == len(ITEMS)
  for a, b in zip(ours, theirs):
    assert list(a) == list(b)
    for name in b:
      _assert_same(a[name], b[name])


def test_grouped_ragged_features_split_as_ragged_tensor_numpy():
  rows = [[[1, 2], [3]], [[4, 5], [6, 7]], [], [[8]]]  # rows of unequal, equal, no and one candidate
  dataset = tf.data.Dataset.from_tensor_slices({"candidates": tf.ragged.constant(rows, tf.int32),
                                                "id": tf.constant([b"a", b"b", b"c", b"d"])})
  for ours, theirs in zip(data._grouped_examples(dataset, 3), dataset.as_numpy_iterator()):  # pylint: disable=protected-access
    for name in theirs:
      _assert_same(ours[name], theirs[name])


def test_candidate_arrays_name_the_inconsistent_example():
  examples = [{"id": b"x1", "inputs": np.array([5, 1]), "candidates": [[4, 1], [6, 1]],
               "candidate_labels": np.array([1])}]
  with pytest.raises(ValueError, match=r"example 0 \(id 'x1'\): 2 candidates, 1 candidate_labels"):
    data.candidate_arrays(examples, 4, 4)


def test_trim_padding_keeps_every_real_token_in_length_buckets():
  inputs = np.zeros((2, 64), np.int32)
  inputs[0, :9] = 5  # longest real input: 9 tokens -> bucket 16
  candidates = np.zeros((2, 3, 128), np.int32)
  candidates[1, 2, :3] = 7  # longest candidate: 3 tokens -> the smallest bucket, 8
  trimmed_inputs, trimmed_candidates = data.trim_padding(inputs, candidates)
  assert trimmed_inputs.shape == (2, 16) and trimmed_candidates.shape == (2, 3, 8)
  np.testing.assert_array_equal(trimmed_inputs, inputs[:, :16])
  np.testing.assert_array_equal(trimmed_candidates, candidates[..., :8])
  assert [data.bucket_length(n, 100) for n in (1, 8, 9, 17, 33, 64, 65, 97)] == [8, 8, 16, 24, 40, 64, 80, 100]
  # Every length up to 2,048 fits its bucket, a multiple of 8; past 32 at most 20% of it is padding;
  # each doubling past 32 holds four buckets.
  buckets = {n: data.bucket_length(n, 2048) for n in range(1, 2049)}
  assert all(n <= b and b % 8 == 0 for n, b in buckets.items())
  assert max((b - n) / b for n, b in buckets.items() if n > 32) <= 0.2
  for low in (32, 64, 128, 256, 512, 1024):
    assert len({b for n, b in buckets.items() if low < n <= 2 * low}) == 4, low
  full = np.ones((1, 20), np.int32)  # a full row keeps its length even off the buckets
  assert data.trim_padding(full, np.ones((1, 1, 5), np.int32))[0].shape == (1, 20)


def test_pack_candidates_puts_each_rows_candidates_end_to_end():
  candidates = np.zeros((2, 3, 20), np.int32)
  candidates[0, 0, :2], candidates[0, 1, :20], candidates[0, 2, :3] = [4, 5], np.arange(6, 26), [7, 8, 9]
  candidates[1, 1, :1] = 3  # row 1: an empty first and last candidate
  mask = candidates > 0
  mask[0, 2, 2] = False  # a token conditioned on, not scored (a span's EOS)
  packed = data.pack_candidates(candidates, mask)
  assert packed["candidate_ids"].shape == (2, 32)  # 25 real tokens in the longest row -> bucket 32
  assert packed["candidate_ids"][0, :25].tolist() == [4, 5, *range(6, 26), 7, 8, 9]
  assert packed["candidate_segments"][0].tolist() == [1] * 2 + [2] * 20 + [3] * 3 + [0] * 7
  assert packed["score_mask"][0].tolist() == [True] * 24 + [False] * 8
  assert packed["candidate_ids"][1].tolist() == [3] + [0] * 31
  assert packed["candidate_segments"][1].tolist() == [2] + [0] * 31
  # Every real token once, its segment its candidate's number: packing loses nothing.
  assert np.count_nonzero(packed["candidate_ids"]) == np.count_nonzero(candidates)
  # All-real candidates pack to exactly K x T, off the buckets (the benchmark's kernel shape).
  assert data.pack_candidates(np.ones((1, 4, 13), np.int32), np.ones((1, 4, 13), bool))["candidate_ids"].shape == (1, 52)


def test_scored_text_lengths_count_characters_and_bytes_of_the_scored_tokens():
  vocabulary = seqio.ByteVocabulary(extra_ids=10)
  first_sentinel = data.first_sentinel_id(vocabulary)
  assert first_sentinel == vocabulary.vocab_size - 10
  s0, s1 = vocabulary.vocab_size - 1, vocabulary.vocab_size - 2
  span = vocabulary.encode("héllo")  # 5 characters, 6 bytes
  candidates = np.zeros((1, 2, 10), np.int32)
  candidates[0, 0, :len(span) + 3] = [s0, *span, s1, 1]
  candidates[0, 1, :4] = [*vocabulary.encode("abc"), 1]
  mask = scoring.span_score_mask(candidates, first_sentinel)
  lengths = data.scored_text_lengths(vocabulary, candidates, np.asarray(mask))
  assert lengths["scored_chars"].tolist() == [[5, 3]] and lengths["scored_bytes"].tolist() == [[6, 3]]
  assert data.first_sentinel_id(seqio.ByteVocabulary()) is None
