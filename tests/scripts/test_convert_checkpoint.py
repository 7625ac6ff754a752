"""A random HF T5 converted to orbax loads back to the same parameters and scores the same."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import traverse_util

from models.checkpoint_import import load_hf_t5
from models.scoring import score_candidates
from runner import checkpoints
from scripts import convert_checkpoint
from tests.conftest import PROJECT_ROOT
from tests.models.hf_reference import hf_candidate_scores, make_hf_t5, random_ids


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  hf_dir = tmp_path_factory.mktemp("hf")
  hf_model = make_hf_t5(hf_dir)
  out = tmp_path_factory.mktemp("converted") / "t5"
  config = convert_checkpoint.convert(str(hf_dir), str(out))
  return hf_model, hf_dir, out, config


def _flat(params):
  return traverse_util.flatten_dict(jax.tree.map(np.asarray, params), sep="/")


def test_converted_params_equal_the_imported_ones_exactly(converted):
  _, hf_dir, out, config = converted
  hf_config, hf_params = load_hf_t5(hf_dir)
  assert config == hf_config
  assert checkpoints.read_model_config(str(out)) == hf_config
  restored = _flat(checkpoints.load_params(str(out), hf_config)[1])
  expected = _flat(hf_params)
  assert sorted(restored) == sorted(expected)
  for path, value in expected.items():
    assert restored[path].dtype == value.dtype, path
    np.testing.assert_array_equal(restored[path], value, err_msg=path)


def test_converted_checkpoint_scores_like_hf(converted):
  hf_model, hf_dir, out, _ = converted
  config, params = checkpoints.load_params(str(out))  # config from t5_config.json
  _, hf_params = checkpoints.load_params(str(hf_dir))  # the Hugging Face directory itself
  rng = np.random.default_rng(3)
  input_ids = random_ids(rng, (2, 12), config.vocab_size, pad_from=[12, 6])
  candidates = np.stack([random_ids(rng, (3, 5), config.vocab_size, pad_from=[5, 2, 4])] * 2)
  ours = np.asarray(score_candidates(config, params, input_ids, candidates))
  np.testing.assert_array_equal(ours, np.asarray(score_candidates(config, hf_params, input_ids, candidates)))
  np.testing.assert_allclose(ours, hf_candidate_scores(hf_model, input_ids, candidates, True), atol=1e-4)


def test_refuses_to_overwrite(converted):
  _, hf_dir, out, _ = converted
  with pytest.raises(FileExistsError, match="already exists"):
    convert_checkpoint.convert(str(hf_dir), str(out))


def test_command_line_writes_checkpoint_and_config(converted, tmp_path):
  _, hf_dir, _, config = converted
  out = tmp_path / "cli"
  result = subprocess.run(
      [sys.executable, "-m", "scripts.convert_checkpoint", f"--hf_dir={hf_dir}", f"--out={out}"],
      cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert result.returncode == 0, result.stderr[-2000:]
  assert checkpoints.read_model_config(str(out)) == config
  assert os.path.isdir(out / "params")
