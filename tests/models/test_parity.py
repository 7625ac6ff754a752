"""The network, imported from a random HF T5.1.1 checkpoint, is the same function as HF's T5."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from models.checkpoint_import import load_hf_t5
from models.network import Transformer, shift_right
from models.scoring import score_candidates, score_packed, score_pairs, span_score_mask
from tests.models.hf_reference import hf_candidate_scores, make_hf_t5, random_ids

TOL = 1e-4


@pytest.fixture(scope="module")
def hf_and_ours(tmp_path_factory):
  directory = tmp_path_factory.mktemp("hf_t5")
  hf_model = make_hf_t5(directory)
  config, params = load_hf_t5(directory)
  return hf_model, config, params


def test_import_reads_config(hf_and_ours):
  _, config, params = hf_and_ours
  assert (config.emb_dim, config.num_heads, config.head_dim, config.mlp_dim) == (32, 4, 8, 48)
  assert (config.num_encoder_layers, config.num_decoder_layers) == (2, 3)
  assert config.mlp_activations == ("gelu", "linear") and not config.logits_via_embedding
  assert params["decoder"]["logits_dense"]["kernel"].shape == (32, 96)
  assert params["encoder"]["layers_1"]["attention"]["query"]["kernel"].shape == (32, 32)


def test_encoder_and_decoder_match_hf_with_padding(hf_and_ours):
  hf_model, config, params = hf_and_ours
  rng = np.random.default_rng(0)
  # Lengths past 16 and 32 exercise the logarithmic position buckets.
  input_ids = random_ids(rng, (3, 40), config.vocab_size, pad_from=[40, 23, 5])
  target_ids = random_ids(rng, (3, 36), config.vocab_size, pad_from=[36, 30, 2])
  model = Transformer(config)
  encoded = model.apply({"params": params}, jnp.asarray(input_ids), method=Transformer.encode)
  logits = model.apply({"params": params}, jnp.asarray(input_ids), shift_right(jnp.asarray(target_ids)))
  with torch.inference_mode():
    inputs = torch.tensor(input_ids, dtype=torch.long)
    out = hf_model(input_ids=inputs, attention_mask=inputs > 0,
                   decoder_input_ids=torch.tensor(np.asarray(shift_right(target_ids)), dtype=torch.long))
  real = input_ids > 0
  encoder_error = np.abs(np.asarray(encoded) - out.encoder_last_hidden_state.numpy())[real].max()
  logits_error = np.abs(np.asarray(logits) - out.logits.numpy()).max()
  print(f"parity: encoder max abs error {encoder_error:.2e}, decoder logits max abs error {logits_error:.2e}")
  assert encoder_error < TOL
  assert logits_error < TOL


def test_score_candidates_matches_hf_and_score_pairs(hf_and_ours):
  hf_model, config, params = hf_and_ours
  rng = np.random.default_rng(1)
  input_ids = random_ids(rng, (2, 20), config.vocab_size, pad_from=[20, 9])
  # Candidates of different lengths, so normalisation must divide by each one's own count.
  candidates = np.stack([random_ids(rng, (4, 7), config.vocab_size, pad_from=[7, 3, 1, 5]),
                         random_ids(rng, (4, 7), config.vocab_size, pad_from=[2, 7, 4, 6])])
  for normalize in (True, False):
    ours = np.asarray(score_candidates(config, params, input_ids, candidates, length_normalize=normalize))
    naive = np.asarray(score_pairs(config, params, input_ids, candidates, length_normalize=normalize))
    reference = hf_candidate_scores(hf_model, input_ids, candidates, normalize)
    assert ours.shape == (2, 4) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, atol=TOL, rtol=0)
    np.testing.assert_allclose(ours, naive, atol=TOL, rtol=0)
  totals = np.asarray(score_candidates(config, params, input_ids, candidates, length_normalize=False))
  means = np.asarray(score_candidates(config, params, input_ids, candidates, length_normalize=True))
  np.testing.assert_allclose(means, totals / (candidates > 0).sum(-1), rtol=1e-6)


def _packed_by_loop(candidates, mask, width):
  """Each row's candidates end to end, built token by token (independent of runner.data)."""
  ids, segments, scored = (np.zeros((len(candidates), width), dtype) for dtype in (np.int32, np.int32, bool))
  for b, row in enumerate(candidates):
    column = 0
    for k, candidate in enumerate(row):
      for t, token in enumerate(candidate):
        if token:
          ids[b, column], segments[b, column], scored[b, column] = token, k + 1, mask[b, k, t]
          column += 1
  return ids, segments, scored


def test_packed_candidates_score_as_hf_scores_each_alone(hf_and_ours):
  """Candidates packed end to end into one decoder row per context (segments attending only to
  themselves) score as HF scores each candidate in its own row; an empty candidate scores 0. The
  lengths pass 16 and 32 in the packed row, where T5's position buckets turn logarithmic, so a
  segment seeing its neighbours' positions would show."""
  hf_model, config, params = hf_and_ours
  rng = np.random.default_rng(5)
  input_ids = random_ids(rng, (2, 20), config.vocab_size, pad_from=[20, 9])
  candidates = np.stack([random_ids(rng, (4, 17), config.vocab_size, pad_from=[17, 3, 0, 12]),
                         random_ids(rng, (4, 17), config.vocab_size, pad_from=[2, 17, 14, 6])])
  mask = candidates > 0
  ids, segments, scored = _packed_by_loop(candidates, mask, 48)
  for normalize in (True, False):
    packed = np.asarray(score_packed(config, params, input_ids, ids, segments, scored, num_candidates=4,
                                     length_normalize=normalize))
    reference = hf_candidate_scores(hf_model, input_ids, candidates, normalize)
    assert packed.shape == (2, 4) and packed[0, 2] == 0.0
    np.testing.assert_allclose(packed, reference, atol=TOL, rtol=0)
    np.testing.assert_allclose(packed, np.asarray(score_candidates(config, params, input_ids, candidates,
                                                                   length_normalize=normalize)), atol=1e-5, rtol=0)


def test_tied_embeddings_match_hf(tmp_path):
  hf_model = make_hf_t5(tmp_path, seed=3, tie_word_embeddings=True, feed_forward_proj="relu")
  config, params = load_hf_t5(tmp_path)
  assert config.logits_via_embedding and "logits_dense" not in params["decoder"]
  rng = np.random.default_rng(2)
  input_ids = random_ids(rng, (2, 12), config.vocab_size, pad_from=[12, 6])
  target_ids = random_ids(rng, (2, 9), config.vocab_size, pad_from=[9, 4])
  logits = Transformer(config).apply({"params": params}, jnp.asarray(input_ids), shift_right(jnp.asarray(target_ids)))
  with torch.inference_mode():
    inputs = torch.tensor(input_ids, dtype=torch.long)
    expected = hf_model(input_ids=inputs, attention_mask=inputs > 0,
                        decoder_input_ids=torch.tensor(np.asarray(shift_right(target_ids)), dtype=torch.long)).logits
  np.testing.assert_allclose(np.asarray(logits), expected.numpy(), atol=TOL, rtol=0)


def test_span_corruption_scores_only_the_span_tokens(hf_and_ours):
  """A candidate `<extra_id_0> span <extra_id_1> EOS` (T5's span-corruption target) is scored on
  its span's tokens only; the sentinels and EOS are conditioned on. Checked against HF logits."""
  hf_model, config, params = hf_and_ours
  first_sentinel = config.vocab_size - 10  # the top 10 ids play <extra_id_9> ... <extra_id_0>
  s0, s1 = config.vocab_size - 1, config.vocab_size - 2
  rng = np.random.default_rng(3)
  input_ids = random_ids(rng, (2, 12), first_sentinel, pad_from=[12, 7])
  input_ids[:, 3] = s0  # the masked span's place in the context
  spans = [[5, 9, 11], [7], [20, 4], [13, 13, 13, 2]]
  candidates = np.zeros((2, 4, 8), np.int32)
  for b in range(2):
    for k, span in enumerate(spans[::1 if b == 0 else -1]):
      row = [s0, *span, s1, 1]
      candidates[b, k, :len(row)] = row
  mask = np.asarray(span_score_mask(candidates, first_sentinel))
  totals, means = (np.asarray(score_candidates(config, params, input_ids, candidates, mask,
                                               length_normalize=normalize)) for normalize in (False, True))
  with torch.inference_mode():
    for b in range(2):
      for k in range(4):
        target = torch.tensor(candidates[b, k][None].astype(np.int64))
        inputs = torch.tensor(input_ids[b][None].astype(np.int64))
        decoder_input = torch.cat([torch.zeros((1, 1), dtype=torch.long), target[:, :-1]], dim=1)
        logits = hf_model(input_ids=inputs, attention_mask=inputs > 0, decoder_input_ids=decoder_input).logits
        token_scores = torch.log_softmax(logits.double(), -1)[0, torch.arange(8), target[0]].numpy()
        span_length = len(spans[k if b == 0 else 3 - k])
        assert mask[b, k].tolist() == [0 < t <= span_length for t in range(8)]
        total = token_scores[1:1 + span_length].sum()  # positions 1..span: after <extra_id_0>
        assert abs(totals[b, k] - total) < TOL and abs(means[b, k] - total / span_length) < TOL, (b, k)
  # A candidate without a leading sentinel keeps every real token, EOS included.
  plain = np.asarray([[[5, 9, 1, 0]]])
  assert np.asarray(span_score_mask(plain, first_sentinel)).tolist() == [[[True, True, True, False]]]
  assert np.asarray(span_score_mask(plain, None)).tolist() == [[[True, True, True, False]]]
  # A span cut short before its closing sentinel (then EOS): EOS is not part of the span.
  cut = np.asarray([[[s0, 5, 9, 1]]])
  assert np.asarray(span_score_mask(cut, first_sentinel)).tolist() == [[[False, True, True, False]]]


def test_every_normalisation_matches_hf(hf_and_ours):
  """Evaluation's likelihood scorer under each NORMALIZATION, against sums from HF logits divided
  by the lengths it is given (or minus the HF sums given the context [EOS] alone)."""
  from models import scoring
  from runner import data, scorers  # pylint: disable=g-import-not-at-top
  hf_model, config, params = hf_and_ours
  rng = np.random.default_rng(4)
  input_ids = random_ids(rng, (2, 10), config.vocab_size, pad_from=[10, 4])
  candidates = np.stack([random_ids(rng, (3, 6), config.vocab_size, pad_from=[6, 2, 4]),
                         random_ids(rng, (3, 6), config.vocab_size, pad_from=[3, 5, 1])])
  arrays = {"input_ids": input_ids, **data.pack_candidates(candidates, candidates > 0)}
  lengths = {"tokens": (candidates > 0).sum(-1), "scored_chars": rng.integers(1, 30, (2, 3)),
             "scored_bytes": rng.integers(1, 40, (2, 3))}
  totals = hf_candidate_scores(hf_model, input_ids, candidates, False)
  empty = hf_candidate_scores(hf_model, np.ones((2, 1), np.int32), candidates, False)
  expected = {"none": totals, "token": totals / lengths["tokens"], "char": totals / lengths["scored_chars"],
              "byte": totals / lengths["scored_bytes"], "mutual_information": totals - empty}
  assert set(expected) == set(scoring.NORMALIZATIONS)
  for name, reference in expected.items():
    scored = scorers.make_score_fn(config, "likelihood", name)(params, arrays, lengths)
    np.testing.assert_allclose(scored["scores"], reference, atol=TOL, rtol=0, err_msg=name)
    np.testing.assert_allclose(scored["log_likelihoods"], totals, atol=TOL, rtol=0)
