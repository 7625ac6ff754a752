"""Import a Hugging Face T5 checkpoint (config.json + *.safetensors) into this project's parameters.

Every HF tensor maps by rule onto exactly one parameter path of `models.network.Transformer`;
a missing, extra or mis-shaped tensor is an error naming it. Pickled `.bin` files are never
loaded (unpickling runs arbitrary code). The directory may be local (its files memory-mapped) or in
a bucket (`gs://...`, each file read whole through `storage`).
"""
import json
import os
import re

import jax
import ml_dtypes
import numpy as np
from flax import traverse_util

import storage
from models.config import T5Config
from models.network import init_params

# HF feed_forward_proj -> our mlp_activations.
FEED_FORWARD = {
    "gated-gelu": ("gelu", "linear"),
    "gated-relu": ("relu", "linear"),
    "gated-silu": ("silu", "linear"),
    "relu": ("relu",),
    "gelu": ("gelu",),
}
_ATTENTION = {"q": "query", "k": "key", "v": "value", "o": "out"}
_MLP = "DenseReluDense"
# HF sub-layer index -> (HF module, our module, our layer norm), per stack.
_SUBLAYERS = {
    "encoder": {"0": ("SelfAttention", "attention", "pre_attention_layer_norm"),
                "1": (_MLP, "mlp", "pre_mlp_layer_norm")},
    "decoder": {"0": ("SelfAttention", "self_attention", "pre_self_attention_layer_norm"),
                "1": ("EncDecAttention", "encoder_decoder_attention", "pre_cross_attention_layer_norm"),
                "2": (_MLP, "mlp", "pre_mlp_layer_norm")},
}
_RELATIVE_BIAS = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"  # block 0's, shared by all
_TIED_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
# safetensors' float dtypes, for a file read from a bucket as bytes (numpy has no bfloat16 of its own).
_FLOAT_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on a header


class CheckpointImportError(ValueError):
  pass


def _scales_decoder_outputs(hf_config: dict) -> bool:
  # transformers >= 5 records T5.1.0's 1/sqrt(d_model) output rescaling as scale_decoder_outputs;
  # older configs signal T5.1.1 (no rescaling) with tie_word_embeddings = false.
  if "scale_decoder_outputs" in hf_config:
    return bool(hf_config["scale_decoder_outputs"])
  return hf_config.get("tie_word_embeddings", True) is not False


def config_from_hf(hf_config: dict, path="config.json") -> T5Config:
  """T5Config from a Hugging Face T5 config.json dictionary.

  A rescaled, tied head (T5.1.0) reads the embedding; otherwise the head is `logits_dense`, taken
  from `lm_head.weight`, or copied from the embedding when the checkpoint ties it without rescaling.
  """
  proj = hf_config.get("feed_forward_proj", "relu")
  if proj not in FEED_FORWARD:
    raise CheckpointImportError(f"{path}: field 'feed_forward_proj': unsupported value {proj!r}")
  try:
    return T5Config(
        vocab_size=hf_config["vocab_size"],
        emb_dim=hf_config["d_model"],
        num_heads=hf_config["num_heads"],
        head_dim=hf_config["d_kv"],
        mlp_dim=hf_config["d_ff"],
        mlp_activations=FEED_FORWARD[proj],
        num_encoder_layers=hf_config["num_layers"],
        num_decoder_layers=hf_config.get("num_decoder_layers") or hf_config["num_layers"],
        dropout_rate=hf_config.get("dropout_rate", 0.1),
        relative_attention_num_buckets=hf_config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=hf_config.get("relative_attention_max_distance", 128),
        logits_via_embedding=_scales_decoder_outputs(hf_config),
        layer_norm_epsilon=hf_config.get("layer_norm_epsilon", 1e-6),
    )
  except KeyError as e:
    raise CheckpointImportError(f"{path}: missing field {e.args[0]!r}") from None


def hf_name_to_path(name: str):
  """(our parameter path, transpose?) for one HF tensor name; None when the name is not T5's.

  The one mapping between the two namings: import reads it forwards, export
  (`models.checkpoint_export`) backwards over `hf_tensor_names`.
  """
  if name == "shared.weight":
    return "token_embedder/embedding", False
  if name == "lm_head.weight":
    return "decoder/logits_dense/kernel", True
  m = re.fullmatch(r"(encoder|decoder)\.final_layer_norm\.weight", name)
  if m:
    return f"{m[1]}/{m[1]}_norm/scale", False
  m = re.fullmatch(r"(encoder|decoder)\." + re.escape(_RELATIVE_BIAS), name)
  if m:
    return f"{m[1]}/relpos_bias/rel_embedding", True
  m = re.fullmatch(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(.+)", name)
  if not m:
    return None
  stack, block, sublayer, rest = m.groups()
  names = _SUBLAYERS[stack].get(sublayer)
  if names is None:
    return None
  hf_module, module, norm = names
  prefix = f"{stack}/layers_{block}"
  if rest == "layer_norm.weight":
    return f"{prefix}/{norm}/scale", False
  if hf_module == _MLP:
    m = re.fullmatch(rf"{_MLP}\.(wi_0|wi_1|wi|wo)\.weight", rest)
    return (f"{prefix}/mlp/{m[1]}/kernel", True) if m else None
  m = re.fullmatch(rf"{hf_module}\.([qkvo])\.weight", rest)
  return (f"{prefix}/{module}/{_ATTENTION[m[1]]}/kernel", True) if m else None


def hf_tensor_names(config: T5Config) -> list[str]:
  """Every HF tensor name of a checkpoint of `config` (one per parameter; tied copies left out)."""
  names = ["shared.weight"] + ([] if config.logits_via_embedding else ["lm_head.weight"])
  mlp = ("wi_0", "wi_1", "wo") if len(config.mlp_activations) > 1 else ("wi", "wo")
  for stack, depth in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
    names += [f"{stack}.final_layer_norm.weight", f"{stack}.{_RELATIVE_BIAS}"]
    for block in range(depth):
      for sublayer, (hf_module, _, _) in _SUBLAYERS[stack].items():
        prefix = f"{stack}.block.{block}.layer.{sublayer}"
        names.append(f"{prefix}.layer_norm.weight")
        weights = mlp if hf_module == _MLP else _ATTENTION
        names += [f"{prefix}.{hf_module}.{weight}.weight" for weight in weights]
  return names


def _header_damage(path: str) -> str | None:
  """What is wrong with the safetensors file `path` by its header alone (8 bytes giving the header's
  length, then the header, a JSON object of each tensor's byte range): cut short (a download or copy
  stopped early), or no safetensors header at all; None when its bytes hold all the header
  describes. Reads the header only (a bucket's object in ranged reads)."""
  size = storage.size(path)
  if size < 8:
    return f"truncated: {size} bytes, fewer than the 8 that begin a safetensors file"
  with storage.open_file(path, "rb") as f:
    header_length = int.from_bytes(f.read(8), "little")
    header = f.read(header_length) if header_length <= _MAX_HEADER_BYTES else b""
  if header_length > _MAX_HEADER_BYTES or (header and not header.startswith(b"{")):
    return "not a safetensors file (its first bytes are no safetensors header)"
  if 8 + header_length > size:
    return f"truncated: the file ends at byte {size}, inside its header (bytes 8 to {8 + header_length})"
  try:
    ranges = [entry["data_offsets"] for name, entry in json.loads(header).items() if name != "__metadata__"]
    described = 8 + header_length + max((int(end) for _, end in ranges), default=0)
  except (ValueError, TypeError, KeyError, AttributeError):
    return "not a safetensors file (its header is not the JSON of safetensors)"
  if size < described:
    return f"truncated: the file has {size} of the {described} bytes its header describes"
  return None


def _safetensors_files(directory: str) -> list[str]:
  """The *.safetensors files of `directory`; an error when it has none."""
  files = storage.glob(directory, "*.safetensors")
  if not files:
    pickles = [storage.name(p) for p in storage.glob(directory, "*.bin")]
    hint = (f" It has {', '.join(pickles)}: pickled weights are never loaded; convert them once with "
            "`transformers` (model.save_pretrained(dir, safe_serialization=True)).") if pickles else ""
    raise CheckpointImportError(f"{directory}: no *.safetensors file.{hint}")
  return files


def check_safetensors(directory: str) -> None:
  """Refuses, naming the file and what is wrong with it, a Hugging Face directory without a
  *.safetensors file or with one cut short or not safetensors; reads the headers alone, so that a
  command can check its checkpoint before it prepares any data."""
  for path in _safetensors_files(directory):
    damage = _header_damage(path)
    if damage:
      raise CheckpointImportError(f"{path}: {damage}")


def _unreadable(path: str, error: Exception) -> CheckpointImportError:
  """safetensors' refusal of `path` (its message names no file), said with the file's damage."""
  return CheckpointImportError(f"{path}: {_header_damage(path) or f'not a readable safetensors file ({error})'}")


def _float32_tensors(path: str, data: bytes):
  """(name, float32 array) of each tensor in the bytes `data` of the safetensors file `path`."""
  import safetensors  # pylint: disable=import-outside-toplevel

  try:
    tensors = safetensors.deserialize(data)
  except safetensors.SafetensorError as error:
    raise _unreadable(path, error) from None
  for name, tensor in tensors:
    dtype = _FLOAT_DTYPES.get(tensor["dtype"])
    if dtype is None:
      raise CheckpointImportError(f"{path}: tensor {name!r} has dtype {tensor['dtype']}, not a float")
    yield name, np.frombuffer(tensor["data"], dtype).reshape(tensor["shape"]).astype(np.float32)


def _read_safetensors(directory: str):
  """{tensor name: (file name, float32 array)} of every *.safetensors file in `directory`."""
  from safetensors import SafetensorError, safe_open  # pylint: disable=import-outside-toplevel

  tensors = {}
  for path in _safetensors_files(directory):
    file_name = storage.name(path)
    if storage.is_bucket(path):  # an object is read whole, then decoded from the bytes
      for name, value in _float32_tensors(path, storage.read_bytes(path)):
        tensors[name] = (file_name, value)
      continue
    try:
      with safe_open(path, framework="flax") as f:
        for name in f.keys():
          tensors[name] = (file_name, np.asarray(f.get_tensor(name), dtype=np.float32))
    except SafetensorError as error:
      raise _unreadable(path, error) from None
  return tensors


def _read_hf_config(config_path: str) -> dict:
  """config.json's dictionary. A file cut short (a download stopped halfway), not UTF-8 or not a
  JSON object is a CheckpointImportError naming the file and what is wrong: json's and the
  decoder's own errors name no file."""
  try:
    text = storage.read_bytes(config_path).decode("utf-8")
  except UnicodeDecodeError as error:
    raise CheckpointImportError(f"{config_path}: not UTF-8 text (byte {error.start})") from None
  try:
    hf_config = json.loads(text)
  except json.JSONDecodeError as error:
    unterminated = error.msg.startswith("Unterminated string")  # json places it where the string starts
    reason = "a string starts there and never ends" if unterminated else error.msg
    cut = "; the file ends before its JSON does (cut short?)" if unterminated or error.pos >= len(text.rstrip()) else ""
    raise CheckpointImportError(f"{config_path}: invalid JSON at line {error.lineno} column {error.colno} "
                                f"({reason}){cut}") from None
  if not isinstance(hf_config, dict):
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(hf_config), "a number")
    raise CheckpointImportError(f"{config_path}: holds {kind}, not a JSON object of fields")
  return hf_config


def load_hf_t5(path) -> tuple[T5Config, dict]:
  """(T5Config, params) from a Hugging Face T5 directory (local or gs://) with config.json and
  *.safetensors."""
  directory = os.fspath(path)
  config_path = storage.join(directory, "config.json")
  if not storage.is_file(config_path):
    raise CheckpointImportError(f"{directory}: no config.json")
  tensors = _read_safetensors(directory)
  config = config_from_hf(_read_hf_config(config_path), config_path)
  if config.logits_via_embedding:
    aliases = _TIED_ALIASES + ("lm_head.weight",)
  else:
    aliases = _TIED_ALIASES
    if "lm_head.weight" not in tensors and "shared.weight" in tensors:
      file_name, shared = tensors["shared.weight"]
      tensors["lm_head.weight"] = (file_name, shared)  # tied but unscaled: the head is the embedding

  expected = traverse_util.flatten_dict(
      jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0))), sep="/")

  def at(file_name):
    return storage.join(directory, file_name)

  params = {}
  for name, (file_name, array) in tensors.items():
    if name in aliases:
      # Older checkpoints store the shared embedding three times; the copies must agree.
      if "shared.weight" in tensors and not np.array_equal(array, tensors["shared.weight"][1]):
        raise CheckpointImportError(f"{at(file_name)}: tensor {name!r} differs from 'shared.weight'")
      continue
    rule = hf_name_to_path(name)
    if rule is None or rule[0] not in expected:
      raise CheckpointImportError(f"{at(file_name)}: unexpected tensor {name!r} {array.shape} "
                                  "(no parameter of this T5 config takes it)")
    target, transpose = rule
    value = array.T if transpose else array
    if value.shape != expected[target].shape:
      raise CheckpointImportError(
          f"{at(file_name)}: tensor {name!r} has shape {array.shape}; parameter {target!r} "
          f"needs {expected[target].shape}{' transposed' if transpose else ''}")
    params[target] = value
  missing = sorted(set(expected) - set(params))
  if missing:
    raise CheckpointImportError(f"{directory}: no tensor for parameter(s) {', '.join(missing)}")
  return config, traverse_util.unflatten_dict(params, sep="/")
