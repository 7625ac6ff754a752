"""Hugging Face checkpoints in and out of a bucket (issue 33): an export to `gs://` (a local emulator)
is the same bytes as a local one and reads back exactly; an import from `gs://` reads what a local
one reads, bfloat16 included; the refusals and one-line errors are those of a local directory."""
import jax
import numpy as np
import pytest
import torch
from flax import traverse_util
from safetensors import numpy as safetensors_numpy
from safetensors import torch as safetensors_torch

import storage
from models import checkpoint_export
from models import checkpoint_import
from models import reward as reward_lib
from tests.models import t5x_fixtures
from tests.models.hf_reference import make_hf_t5
from tests.models.test_checkpoint_export import CONFIG

BUCKET = "runs"


def _objects(gcs_emulator, directory):
  """The names (relative to `directory`, a gs://runs/... path) of the objects under it."""
  prefix = directory.split(f"gs://{BUCKET}/", 1)[1].rstrip("/") + "/"
  return [name[len(prefix):] for name in gcs_emulator.object_names(BUCKET, prefix)]


def _flat(params):
  return traverse_util.flatten_dict(jax.tree.map(np.asarray, params), sep="/")


def _upload(local_dir, directory):
  for path in sorted(local_dir.iterdir()):
    storage.write_bytes(storage.join(directory, path.name), path.read_bytes())


def test_export_to_a_bucket_is_the_local_export_and_reads_back_exactly(bucket, gcs_emulator, tmp_path,
                                                                       monkeypatch):
  monkeypatch.chdir(tmp_path)  # where a gs:// path mistaken for a local one would become a folder
  params = t5x_fixtures.random_params(CONFIG, seed=5)
  directory = f"{bucket}/hf"
  written = checkpoint_export.save_hf_t5(directory, CONFIG, params)
  assert written == [f"{directory}/model.safetensors", f"{directory}/config.json"]
  assert _objects(gcs_emulator, directory) == ["config.json", "model.safetensors"]

  config, back = checkpoint_import.load_hf_t5(directory)
  assert config == CONFIG
  expected, restored = _flat(params), _flat(back)
  assert sorted(restored) == sorted(expected)
  for path, value in expected.items():
    assert restored[path].dtype == np.float32, path
    np.testing.assert_array_equal(restored[path], value, err_msg=path)

  checkpoint_export.save_hf_t5(tmp_path / "local", CONFIG, params)
  for name in ("config.json", "model.safetensors"):
    assert storage.read_bytes(f"{directory}/{name}") == (tmp_path / "local" / name).read_bytes(), name
  with pytest.raises(FileExistsError, match=rf"^{directory} already holds a checkpoint \(config.json\)"):
    checkpoint_export.save_hf_t5(directory, CONFIG, params)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["local"]  # no folder named gs:


def test_reward_head_goes_to_the_bucket_and_an_interrupted_exports_head_is_removed(bucket, gcs_emulator):
  params = reward_lib.init_reward_params(CONFIG, jax.random.PRNGKey(2), t5x_fixtures.random_params(CONFIG, 2))
  reward_dir = f"{bucket}/reward"
  checkpoint_export.save_hf_t5(reward_dir, CONFIG, params)
  assert _objects(gcs_emulator, reward_dir) == ["config.json", "model.safetensors", "reward_head.md",
                                                "reward_head.safetensors"]
  head = safetensors_numpy.load(storage.read_bytes(f"{reward_dir}/reward_head.safetensors"))
  np.testing.assert_array_equal(head["weight"], np.asarray(params[reward_lib.HEAD]["kernel"]).T)
  np.testing.assert_array_equal(head["bias"], np.asarray(params[reward_lib.HEAD]["bias"]))
  assert "load_reward_model" in storage.read_text(f"{reward_dir}/reward_head.md")

  plain_dir = f"{bucket}/plain"  # an export of a reward model stopped before its config.json
  storage.write_bytes(f"{plain_dir}/reward_head.safetensors", b"left by an interrupted export")
  storage.write_text(f"{plain_dir}/reward_head.md", "left by an interrupted export")
  checkpoint_export.save_hf_t5(plain_dir, CONFIG, t5x_fixtures.random_params(CONFIG, seed=3))
  assert _objects(gcs_emulator, plain_dir) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_import_from_a_bucket_reads_what_a_local_import_reads(dtype, bucket, tmp_path):
  make_hf_t5(tmp_path / "made", seed=6)
  local = tmp_path / "local"
  local.mkdir()
  tensors = safetensors_torch.load_file(str(tmp_path / "made" / "model.safetensors"))
  # Two files, as a sharded checkpoint has them: the import reads every *.safetensors.
  names = sorted(tensors)
  for index, part in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
    safetensors_torch.save_file({name: tensors[name].to(dtype) for name in part},
                                str(local / f"model-0000{index + 1}-of-00002.safetensors"), {"format": "pt"})
  (local / "config.json").write_text((tmp_path / "made" / "config.json").read_text())
  _upload(local, f"{bucket}/hf")

  local_config, local_params = checkpoint_import.load_hf_t5(local)
  config, params = checkpoint_import.load_hf_t5(f"{bucket}/hf")
  assert config == local_config
  expected, restored = _flat(local_params), _flat(params)
  assert sorted(restored) == sorted(expected)
  for path, value in expected.items():
    assert restored[path].dtype == np.float32, path
    np.testing.assert_array_equal(restored[path], value, err_msg=path)
  if dtype == torch.bfloat16:  # read as the exact float32 values of the stored bfloat16 ones
    np.testing.assert_array_equal(_flat(params)["token_embedder/embedding"],
                                  tensors["shared.weight"].to(torch.bfloat16).float().numpy())


def test_a_bucket_without_weights_or_config_is_one_line(bucket, tmp_path):
  with pytest.raises(checkpoint_import.CheckpointImportError, match=rf"^{bucket}/none: no config.json$"):
    checkpoint_import.load_hf_t5(f"{bucket}/none")
  make_hf_t5(tmp_path, seed=7)
  storage.write_text(f"{bucket}/pickled/config.json", (tmp_path / "config.json").read_text())
  storage.write_bytes(f"{bucket}/pickled/pytorch_model.bin", b"never unpickled")
  with pytest.raises(checkpoint_import.CheckpointImportError,
                     match=rf"^{bucket}/pickled: no \*.safetensors file. It has pytorch_model.bin: pickled"):
    checkpoint_import.load_hf_t5(f"{bucket}/pickled")
  storage.write_bytes(f"{bucket}/pickled/model.safetensors", (tmp_path / "model.safetensors").read_bytes()[:100])
  with pytest.raises(checkpoint_import.CheckpointImportError,
                     match=rf"^{bucket}/pickled/model.safetensors: truncated: the file ends at byte 100, inside its header"):
    checkpoint_import.load_hf_t5(f"{bucket}/pickled")
