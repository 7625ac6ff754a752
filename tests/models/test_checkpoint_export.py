"""The Hugging Face export: one mapping with the import, a round trip to identical tensors, and
`transformers` scoring an exported model as this project does (float32 and bfloat16-stored weights)."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import traverse_util
from safetensors.numpy import load_file

from models import checkpoint_export
from models import checkpoint_import
from models import reward as reward_lib
from models.config import T5Config
from models.network import Transformer, init_params, shift_right
from models.scoring import score_candidates
from tests.models import t5x_fixtures
from tests.models.hf_reference import hf_candidate_scores, make_hf_t5, random_ids

TOL = 1e-5
# A random tiny T5.1.1 (gated-GELU, untied head), decoder deeper than encoder (transformers#27448).
CONFIG = T5Config(vocab_size=96, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=48,
                  num_encoder_layers=2, num_decoder_layers=3)


def _batch():
  """A padded batch: two contexts of different lengths, three candidates each of lengths 6, 2, 4 / 3, 6, 1."""
  rng = np.random.default_rng(17)
  input_ids = random_ids(rng, (2, 11), CONFIG.vocab_size, pad_from=[11, 5])
  candidates = np.stack([random_ids(rng, (3, 6), CONFIG.vocab_size, pad_from=lengths)
                         for lengths in ([6, 2, 4], [3, 6, 1])])
  return input_ids, candidates


@pytest.mark.parametrize("config", [
    CONFIG, CONFIG.replace(mlp_activations=("relu",)), CONFIG.replace(logits_via_embedding=True)],
    ids=["t5_1_1", "relu", "tied"])
def test_hf_names_and_parameter_paths_correspond_one_to_one(config):
  names = checkpoint_import.hf_tensor_names(config)
  paths = [checkpoint_import.hf_name_to_path(name)[0] for name in names]
  shapes = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0)))
  expected = traverse_util.flatten_dict(shapes, sep="/")
  assert len(set(names)) == len(names) and sorted(paths) == sorted(expected)


def test_hf_to_here_to_hf_gives_identical_tensors_and_config(tmp_path):
  make_hf_t5(tmp_path / "hf", seed=3)
  config, params = checkpoint_import.load_hf_t5(tmp_path / "hf")
  checkpoint_export.save_hf_t5(tmp_path / "back", config, params)
  original, exported = load_file(str(tmp_path / "hf" / "model.safetensors")), load_file(
      str(tmp_path / "back" / "model.safetensors"))
  tied_copies = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}  # HF may store them too
  assert sorted(exported) == sorted(set(original) - tied_copies)
  for name, value in exported.items():
    assert value.dtype == np.float32, name
    np.testing.assert_array_equal(value, original[name], err_msg=name)
  back = json.loads((tmp_path / "back" / "config.json").read_text())
  assert checkpoint_import.config_from_hf(back) == config
  t5_1_1 = {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "is_gated_act": True,
            "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
  assert {name: back[name] for name in t5_1_1} == t5_1_1


@pytest.mark.parametrize("stored_dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_transformers_scores_the_export_as_we_do(stored_dtype, tmp_path):
  params = jax.tree.map(lambda x: np.asarray(x, stored_dtype), t5x_fixtures.random_params(CONFIG, seed=4))
  checkpoint_export.save_hf_t5(tmp_path, CONFIG, params)
  exported = load_file(str(tmp_path / "model.safetensors"))
  np.testing.assert_array_equal(exported["lm_head.weight"],
                                np.asarray(params["decoder"]["logits_dense"]["kernel"], np.float32).T)
  ours_params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)  # the project computes in float32
  hf_model = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
  input_ids, candidates = _batch()

  ours = np.asarray(score_candidates(CONFIG, ours_params, input_ids, candidates))
  theirs = hf_candidate_scores(hf_model, input_ids, candidates, length_normalize=True)
  np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)
  assert np.abs(ours - theirs).max() <= TOL

  rows = candidates[0]
  contexts = np.repeat(input_ids[:1], len(rows), axis=0)
  our_logits = np.asarray(Transformer(CONFIG).apply({"params": ours_params}, contexts, shift_right(rows)))
  with torch.inference_mode():
    inputs = torch.tensor(contexts, dtype=torch.long)
    decoder_inputs = torch.tensor(np.asarray(shift_right(rows)), dtype=torch.long)
    their_logits = hf_model(input_ids=inputs, attention_mask=inputs > 0,
                            decoder_input_ids=decoder_inputs).logits
  np.testing.assert_allclose(our_logits, their_logits.numpy(), atol=TOL, rtol=0)


def test_reward_head_file_and_its_note_give_our_rewards(tmp_path):
  params = reward_lib.init_reward_params(CONFIG, jax.random.PRNGKey(9),
                                         t5x_fixtures.random_params(CONFIG, seed=9))
  params[reward_lib.HEAD]["bias"] = jnp.array([0.25])
  checkpoint_export.save_hf_t5(tmp_path, CONFIG, params)
  head = load_file(str(tmp_path / "reward_head.safetensors"))
  assert head["weight"].shape == (1, CONFIG.emb_dim) and head["bias"].shape == (1,)
  note = (tmp_path / "reward_head.md").read_text()
  code = re.search(r"```python\n(.*?)```", note, re.S).group(1)
  namespace = {}
  exec(code, namespace)  # pylint: disable=exec-used  # the note's own code, as a user would paste it
  model, torch_head = namespace["load_reward_model"](str(tmp_path))

  input_ids, candidates = _batch()
  responses = candidates[:, 0]
  ours = np.asarray(reward_lib.reward(CONFIG, params, input_ids, responses))
  theirs = namespace["rewards"](model, torch_head, torch.tensor(input_ids, dtype=torch.long),
                                torch.tensor(responses, dtype=torch.long)).numpy()
  np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)


def test_refuses_a_complete_checkpoint_and_what_hf_cannot_compute(tmp_path):
  params = t5x_fixtures.random_params(CONFIG, seed=0)
  (tmp_path / "reward_head.safetensors").write_bytes(b"left by an interrupted export of a reward model")
  checkpoint_export.save_hf_t5(tmp_path, CONFIG, params)
  assert sorted(path.name for path in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
  with pytest.raises(FileExistsError, match=r"already holds a checkpoint \(config.json\)"):
    checkpoint_export.save_hf_t5(tmp_path, CONFIG, params)
  with pytest.raises(checkpoint_export.CheckpointExportError, match="logits_via_embedding"):
    checkpoint_export.hf_config(CONFIG.replace(logits_via_embedding=True))
  with pytest.raises(checkpoint_export.CheckpointExportError, match=r"mlp_activations \('gelu',\)"):
    checkpoint_export.hf_config(CONFIG.replace(mlp_activations=("gelu",)))
  flat = traverse_util.flatten_dict(params, sep="/")
  del flat["decoder/layers_2/mlp/wo/kernel"]
  with pytest.raises(checkpoint_export.CheckpointExportError,
                     match=r"no parameter 'decoder/layers_2/mlp/wo/kernel' for tensor "
                           r"'decoder\.block\.2\.layer\.2\.DenseReluDense\.wo\.weight'"):
    checkpoint_export.hf_tensors(CONFIG, traverse_util.unflatten_dict(flat, sep="/"))
