"""scripts.convert_checkpoint: a random HF T5 or t5x checkpoint converted to orbax loads back to the same
parameters and scores the same; the export writes the same tensors back; one direction per call."""
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from absl import app
from flax import traverse_util
from safetensors.numpy import load_file

import storage
from models import checkpoint_import
from models.checkpoint_import import load_hf_t5
from models.config import T5Config
from models.scoring import score_candidates
from runner import checkpoints
from scripts import convert_checkpoint
from tests.conftest import PROJECT_ROOT
from tests.models import t5x_fixtures
from tests.models.hf_reference import hf_candidate_scores, make_hf_t5, random_ids

TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                num_encoder_layers=2, num_decoder_layers=2)  # gin/models/t5_1_1/tiny.gin


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  hf_dir = tmp_path_factory.mktemp("hf")
  hf_model = make_hf_t5(hf_dir)
  out = tmp_path_factory.mktemp("converted") / "t5"
  config = convert_checkpoint.convert(str(hf_dir), str(out))
  return hf_model, hf_dir, out, config


def _flat(params):
  return traverse_util.flatten_dict(jax.tree.map(np.asarray, params), sep="/")


def _run(*args):
  return subprocess.run([sys.executable, "-m", "scripts.convert_checkpoint", *args], cwd=PROJECT_ROOT,
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})


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
  result = _run(f"--hf_dir={hf_dir}", f"--out={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert checkpoints.read_model_config(str(out)) == config
  assert os.path.isdir(out / "params")


# --- t5x in, Hugging Face out -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def t5x_model_dir(tmp_path_factory):
  """A t5x model directory (legacy layout) of a random tiny T5.1.1, and its parameters."""
  params = t5x_fixtures.random_params(TINY, seed=21)
  model_dir = tmp_path_factory.mktemp("t5x") / "base"
  t5x_fixtures.write_legacy(model_dir, 4000, params)
  return model_dir, params


def test_t5x_checkpoint_converts_to_the_same_parameters(t5x_model_dir, tmp_path):
  model_dir, params = t5x_model_dir
  result = _run(f"--t5x_dir={model_dir}", "--gin_file=gin/models/t5_1_1/tiny.gin",
                f"--out={tmp_path / 'out'}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert str(tmp_path / "out" / "params") in result.stdout
  config, restored = checkpoints.load_params(str(tmp_path / "out"))  # t5_config.json from MODEL_CONFIG
  assert config == TINY
  restored, expected = _flat(restored), _flat(params)
  assert sorted(restored) == sorted(expected)
  for path, value in expected.items():
    np.testing.assert_array_equal(restored[path], value, err_msg=path)


def test_export_writes_what_transformers_reads(converted, tmp_path):
  _, hf_dir, out, config = converted
  result = _run(f"--checkpoint={out}", f"--to_hf={tmp_path / 'hf'}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert str(tmp_path / "hf" / "model.safetensors") in result.stdout
  assert checkpoint_import.config_from_hf(json.loads((tmp_path / "hf" / "config.json").read_text())) == config
  exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
  original = load_file(str(hf_dir / "model.safetensors"))
  assert sorted(exported) == sorted(original)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, original[name], err_msg=name)


@pytest.mark.parametrize("values, message", [
    ({}, "give exactly one of --hf_dir or --t5x_dir"),
    ({"hf_dir": "a", "t5x_dir": "b", "out": "c"}, "got --hf_dir, --t5x_dir"),
    ({"checkpoint": "a"}, "--checkpoint needs --to_hf DIR"),
    ({"t5x_dir": "a", "to_hf": "b"}, "--t5x_dir needs --out DIR"),
    ({"checkpoint": "a", "to_hf": "b", "out": "c"}, "--out does not go with --checkpoint"),
    ({"t5x_dir": "a", "out": "b"}, "--t5x_dir: a t5x checkpoint records no architecture"),
])
def test_one_direction_per_call(values, message):
  values = {name: values.get(name) for name in ("hf_dir", "t5x_dir", "checkpoint", "out", "to_hf", "gin")}
  with pytest.raises(app.UsageError, match=re.escape(message)):
    convert_checkpoint._check_directions(values)  # pylint: disable=protected-access


def test_a_directory_of_another_format_is_refused_in_one_line(converted, tmp_path):
  _, hf_dir, _, _ = converted
  result = _run(f"--t5x_dir={hf_dir}", "--gin_file=gin/models/t5_1_1/tiny.gin", f"--out={tmp_path / 'out'}")
  assert result.returncode == 1 and result.stderr.splitlines() == [
      f"error: --t5x_dir {hf_dir}: no t5x checkpoint there (a checkpoint_<step>/ directory with a `checkpoint` "
      "msgpack file or a `state/` directory)"], result.stderr[-3000:]
  assert not (tmp_path / "out").exists()


# --- to a bucket (a local emulator) -----------------------------------------------------------------


def _run_in(cwd, gcs_emulator, *args):
  """The command line with gs:// routed to the emulator, run from `cwd`: a gs:// path mistaken for a
  local one would become a folder `gs:` there."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(PROJECT_ROOT), **gcs_emulator.env}
  for variable in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING",
                   "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"):  # the command sets these from STORAGE_EMULATOR_HOST
    env.pop(variable, None)
  return subprocess.run([sys.executable, "-m", "scripts.convert_checkpoint", *args], cwd=cwd,
                        capture_output=True, text=True, timeout=300, env=env)


def _objects(gcs_emulator, directory):
  prefix = directory.split("gs://runs/", 1)[1].rstrip("/") + "/"
  return [name[len(prefix):] for name in gcs_emulator.object_names("runs", prefix)]


def test_export_command_line_writes_to_a_bucket(converted, bucket, gcs_emulator, tmp_path):
  _, hf_dir, out, config = converted
  target = f"{bucket}/hf"
  result = _run_in(tmp_path, gcs_emulator, f"--checkpoint={out}", f"--to_hf={target}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert f"{target}/model.safetensors" in result.stdout
  assert _objects(gcs_emulator, target) == ["config.json", "model.safetensors"]
  assert not (tmp_path / "gs:").exists()
  hf_config, hf_params = load_hf_t5(hf_dir)
  exported_config, exported = load_hf_t5(target)
  assert exported_config == hf_config == config
  exported, expected = _flat(exported), _flat(hf_params)
  assert sorted(exported) == sorted(expected)
  for path, value in expected.items():
    np.testing.assert_array_equal(exported[path], value, err_msg=path)


def test_convert_command_line_reads_and_writes_a_bucket(converted, bucket, gcs_emulator, tmp_path):
  """A Hugging Face directory in a bucket converted to an orbax checkpoint in the bucket, and that
  exported back to Hugging Face in the bucket: the same tensors all the way."""
  _, hf_dir, _, config = converted
  source, target, back = f"{bucket}/hf", f"{bucket}/t5", f"{bucket}/back"
  for path in sorted(hf_dir.iterdir()):
    storage.write_bytes(storage.join(source, path.name), path.read_bytes())
  result = _run_in(tmp_path, gcs_emulator, f"--hf_dir={source}", f"--out={target}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert f"wrote {target}/params and {target}/t5_config.json" in result.stdout
  objects = _objects(gcs_emulator, target)
  assert "t5_config.json" in objects and "params/_METADATA" in objects, objects
  assert checkpoints.read_model_config(target) == config
  _, hf_params = load_hf_t5(hf_dir)
  expected = _flat(hf_params)
  restored = _flat(checkpoints.load_params(target, config)[1])
  assert sorted(restored) == sorted(expected)
  for path, value in expected.items():
    np.testing.assert_array_equal(restored[path], value, err_msg=path)
  with pytest.raises(FileExistsError, match=f"^{target}/params already exists"):
    convert_checkpoint.convert(str(hf_dir), target)

  result = _run_in(tmp_path, gcs_emulator, f"--checkpoint={target}", f"--to_hf={back}")
  assert result.returncode == 0, result.stderr[-2000:]
  assert _objects(gcs_emulator, back) == ["config.json", "model.safetensors"]
  exported_config, exported = load_hf_t5(back)
  assert exported_config == config
  exported = _flat(exported)
  for path, value in expected.items():
    np.testing.assert_array_equal(exported[path], value, err_msg=path)
  assert not (tmp_path / "gs:").exists()
