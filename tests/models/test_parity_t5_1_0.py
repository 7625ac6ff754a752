"""The original T5 ("T5 1.0": ReLU MLP, output layer tied to the embedding and scaled by
d_model**-0.5), imported from a random HF checkpoint, scores candidates as HF's T5 does; the model
files of gin/models/t5_1_0/ build the configs the importer derives from HF's published configs."""
import gin
import numpy as np
import pytest

from models.checkpoint_import import config_from_hf, load_hf_t5
from models.config import T5Config
from models.scoring import score_candidates, score_pairs
from scripts import gin_cli
from tests.models.hf_reference import hf_candidate_scores, make_hf_t5, random_ids

TOL = 1e-5  # float32 on both sides; the T5.1.1 tests' 1e-4 is looser

# The published t5-small config.json (huggingface.co/t5-small, the fields that shape the network):
# it names no feed_forward_proj (HF's default, "relu") and no tie_word_embeddings (default true,
# with the output rescaled), as the T5 1.0 checkpoints predate both fields.
HF_T5_SMALL = {
    "d_ff": 2048, "d_kv": 64, "d_model": 512, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6,
    "num_heads": 8, "num_layers": 6, "relative_attention_num_buckets": 32, "vocab_size": 32128,
    "decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "model_type": "t5",
}


@pytest.fixture(scope="module")
def hf_and_ours(tmp_path_factory):
  directory = tmp_path_factory.mktemp("hf_t5_1_0")
  hf_model = make_hf_t5(directory, seed=7, feed_forward_proj="relu", tie_word_embeddings=True,
                        dropout_rate=0.1)
  config, params = load_hf_t5(directory)
  return hf_model, config, params


def test_import_reads_a_t5_1_0_checkpoint(hf_and_ours):
  hf_model, config, params = hf_and_ours
  assert not hf_model.training  # eval mode: HF's dropout 0.1 is off, as ours is when scoring
  assert config.mlp_activations == ("relu",) and config.logits_via_embedding
  assert config.dropout_rate == 0.1
  assert "logits_dense" not in params["decoder"]
  assert params["encoder"]["layers_0"]["mlp"]["wi"]["kernel"].shape == (32, 48)  # one ReLU input layer


def test_score_candidates_matches_hf_t5_1_0(hf_and_ours):
  hf_model, config, params = hf_and_ours
  rng = np.random.default_rng(11)
  input_ids = random_ids(rng, (2, 24), config.vocab_size, pad_from=[24, 10])
  candidates = np.stack([random_ids(rng, (4, 7), config.vocab_size, pad_from=[7, 3, 1, 5]),
                         random_ids(rng, (4, 7), config.vocab_size, pad_from=[2, 7, 4, 6])])
  for normalize in (True, False):
    reference = hf_candidate_scores(hf_model, input_ids, candidates, normalize)
    ours = np.asarray(score_candidates(config, params, input_ids, candidates, length_normalize=normalize))
    naive = np.asarray(score_pairs(config, params, input_ids, candidates, length_normalize=normalize))
    print(f"T5 1.0 parity (normalize={normalize}): max abs error {np.abs(ours - reference).max():.2e}")
    np.testing.assert_allclose(ours, reference, atol=TOL, rtol=0)
    np.testing.assert_allclose(naive, reference, atol=TOL, rtol=0)
  # The tie and the rescaling matter: the same weights read as T5.1.1's unscaled head score otherwise.
  unscaled = config.replace(logits_via_embedding=False)
  untied = {**params, "decoder": {**params["decoder"], "logits_dense": {
      "kernel": np.asarray(params["token_embedder"]["embedding"]).T}}}
  wrong = np.asarray(score_candidates(unscaled, untied, input_ids, candidates, length_normalize=True))
  assert np.abs(wrong - hf_candidate_scores(hf_model, input_ids, candidates, True)).max() > 1e-2


def _gin_model_config(path: str) -> T5Config:
  gin.clear_config()
  try:
    gin_cli.parse_gin([path], [], [str(gin_cli.PROJECT_ROOT)])
    return gin.get_configurable(T5Config)()
  finally:
    gin.clear_config()


def test_small_gin_is_hf_t5_small():
  assert _gin_model_config("gin/models/t5_1_0/small.gin") == config_from_hf(HF_T5_SMALL)


# The other published sizes (Raffel et al. 2020, §3.7; HF t5-base ... t5-11b config.json):
# (d_model, d_ff, num_heads, d_kv, num_layers).
PUBLISHED = {"base": (768, 3072, 12, 64, 12), "large": (1024, 4096, 16, 64, 24),
             "3b": (1024, 16384, 32, 128, 24), "11b": (1024, 65536, 128, 128, 24)}


@pytest.mark.parametrize("size", sorted(PUBLISHED))
def test_each_size_is_hf_t5(size):
  d_model, d_ff, heads, d_kv, layers = PUBLISHED[size]
  hf_config = {**HF_T5_SMALL, "d_model": d_model, "d_ff": d_ff, "num_heads": heads, "d_kv": d_kv,
               "num_layers": layers}
  assert _gin_model_config(f"gin/models/t5_1_0/{size}.gin") == config_from_hf(hf_config)
