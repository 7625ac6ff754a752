"""Checkpoint import fails loudly, naming the tensor, on anything it cannot map exactly."""
import json
import re

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from models.checkpoint_import import CheckpointImportError, hf_name_to_path, load_hf_t5
from tests.models.hf_reference import make_hf_t5


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp("hf_t5_errors")
  make_hf_t5(directory, seed=11)
  return directory


def _rewrite(hf_dir, tmp_path, edit):
  tensors = load_file(str(hf_dir / "model.safetensors"))
  edit(tensors)
  save_file(tensors, str(tmp_path / "model.safetensors"))
  (tmp_path / "config.json").write_text((hf_dir / "config.json").read_text())
  return tmp_path


def test_every_tensor_lands_on_its_rule_path(hf_dir):
  _, params = load_hf_t5(hf_dir)
  tensors = load_file(str(hf_dir / "model.safetensors"))
  for name, value in tensors.items():
    path, transpose = hf_name_to_path(name)
    ours = params
    for key in path.split("/"):
      ours = ours[key]
    np.testing.assert_array_equal(np.asarray(ours), value.T if transpose else value)


def test_missing_tensor_is_named(hf_dir, tmp_path):
  directory = _rewrite(hf_dir, tmp_path, lambda t: t.pop("decoder.block.2.layer.1.EncDecAttention.v.weight"))
  with pytest.raises(CheckpointImportError, match="decoder/layers_2/encoder_decoder_attention/value/kernel"):
    load_hf_t5(directory)


def test_extra_tensor_is_named(hf_dir, tmp_path):
  def add(tensors):
    tensors["decoder.block.7.layer.0.SelfAttention.q.weight"] = np.zeros((32, 32), np.float32)
  with pytest.raises(CheckpointImportError, match=r"unexpected tensor 'decoder\.block\.7\.layer\.0\.SelfAttention"):
    load_hf_t5(_rewrite(hf_dir, tmp_path, add))


def test_misshaped_tensor_is_named(hf_dir, tmp_path):
  def shrink(tensors):
    tensors["encoder.block.1.layer.1.DenseReluDense.wo.weight"] = np.zeros((32, 40), np.float32)
  with pytest.raises(CheckpointImportError, match=r"'encoder\.block\.1\.layer\.1\.DenseReluDense\.wo\.weight' has shape"):
    load_hf_t5(_rewrite(hf_dir, tmp_path, shrink))


def test_pickle_only_directory_is_refused(tmp_path, hf_dir):
  (tmp_path / "config.json").write_text((hf_dir / "config.json").read_text())
  (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
  with pytest.raises(CheckpointImportError, match="pytorch_model.bin: pickled weights are never loaded"):
    load_hf_t5(tmp_path)


def test_config_field_errors_name_the_field(hf_dir, tmp_path):
  config = json.loads((hf_dir / "config.json").read_text())
  del config["d_kv"]
  (tmp_path / "config.json").write_text(json.dumps(config))
  (tmp_path / "model.safetensors").write_bytes((hf_dir / "model.safetensors").read_bytes())
  with pytest.raises(CheckpointImportError, match="config.json: missing field 'd_kv'"):
    load_hf_t5(tmp_path)


def test_a_config_json_cut_short_is_one_line_naming_the_file(hf_dir, tmp_path):
  """A download stopped halfway: json's own error names no file."""
  text = (hf_dir / "config.json").read_text()
  (tmp_path / "model.safetensors").write_bytes((hf_dir / "model.safetensors").read_bytes())
  for cut in (len(text) // 2, text.index(",") + 1):  # inside a string; after a field's comma
    (tmp_path / "config.json").write_text(text[:cut])
    with pytest.raises(CheckpointImportError) as error:
      load_hf_t5(tmp_path)
    assert re.fullmatch(re.escape(f"{tmp_path / 'config.json'}: invalid JSON at line ") + r"\d+ column \d+ \(.+\); "
                        + re.escape("the file ends before its JSON does (cut short?)"), str(error.value)), error.value
  (tmp_path / "config.json").write_text("[1, 2]")
  with pytest.raises(CheckpointImportError, match=re.escape(f"{tmp_path / 'config.json'}: holds an array, "
                                                            "not a JSON object of fields")):
    load_hf_t5(tmp_path)
  (tmp_path / "config.json").write_bytes(b'{"d_model": "\xff"}')
  with pytest.raises(CheckpointImportError, match=re.escape(f"{tmp_path / 'config.json'}: not UTF-8 text (byte 13)")):
    load_hf_t5(tmp_path)


def test_a_safetensors_file_cut_short_or_not_safetensors_is_one_line_naming_the_file(hf_dir, tmp_path):
  """safetensors' own error ("incomplete metadata, file not fully covered") names no file, and was a
  traceback through the commands that load a checkpoint."""
  data = (hf_dir / "model.safetensors").read_bytes()
  header_end = 8 + int.from_bytes(data[:8], "little")
  (tmp_path / "config.json").write_text((hf_dir / "config.json").read_text())
  weights = tmp_path / "model.safetensors"
  for content, damage in (
      (data[:len(data) // 2], f"truncated: the file has {len(data) // 2} of the {len(data)} bytes its header describes"),
      (data[:100], f"truncated: the file ends at byte 100, inside its header (bytes 8 to {header_end})"),
      (data[:5], "truncated: 5 bytes, fewer than the 8 that begin a safetensors file"),
      (b"PK\x03\x04 a zip, not safetensors" * 4, "not a safetensors file (its first bytes are no safetensors header)")):
    weights.write_bytes(content)
    with pytest.raises(CheckpointImportError) as error:
      load_hf_t5(tmp_path)
    assert str(error.value) == f"{weights}: {damage}"
