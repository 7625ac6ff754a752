"""The network, imported from a random HF T5.1.1 checkpoint, is the same function as HF's T5."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from models.checkpoint_import import load_hf_t5
from models.network import Transformer, shift_right
from models.scoring import score_candidates, score_pairs
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
