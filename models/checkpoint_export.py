"""Export this project's parameters as a Hugging Face T5 directory: config.json + model.safetensors
(+ the tokenizer's files, `hf_tokenizer_files`).

The tensor names are `checkpoint_import.hf_tensor_names`, each filled from the parameter that
`checkpoint_import.hf_name_to_path` maps it to (the one mapping, read backwards): a
T5ForConditionalGeneration of `transformers` loads the directory with `from_pretrained`. A reward
model's head goes beside it as `reward_head.safetensors`, a `torch.nn.Linear(d_model, 1)`, with
`reward_head.md` saying how to load and apply it.

Dtype policy: this project keeps parameters in float32 (activations may run in bfloat16), and the
export writes float32. A checkpoint holding bfloat16 arrays is written as their exact float32
values (every bfloat16 is a float32), never rounded again. Pickle is never written.

The directory may be local or in a bucket (`gs://...`, through `storage`). Every file appears
whole, config.json last, so a directory with a config.json is complete: a local file is written to
a temporary name and renamed into place (the weights straight from the arrays, without a second
copy in memory), a bucket object is uploaded whole (the weights serialised to bytes first).
"""
import json
import os
import tempfile

import numpy as np
from flax import traverse_util

import storage
from models import checkpoint_import
from models import reward as reward_lib
from models.config import T5Config

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
REWARD_HEAD_FILE = "reward_head.safetensors"
REWARD_HEAD_NOTE = "reward_head.md"
TOKENIZER_CONFIG = "tokenizer_config.json"
SENTENCEPIECE_MODEL = "spiece.model"  # the name T5Tokenizer reads
# Our activations -> HF's feed_forward_proj, where HF computes the same function (our "gelu" is the
# tanh approximation: HF's "gated-gelu" uses it, HF's plain "gelu" does not).
_FEED_FORWARD = {activations: proj for proj, activations in checkpoint_import.FEED_FORWARD.items()
                 if proj != "gelu"}

_REWARD_HEAD_NOTE = '''# Reward head

`reward_head.safetensors` is the scalar reward head of this T5 reward model, a
`torch.nn.Linear(d_model, 1)` (`weight` [1, d_model], `bias` [1]). The reward of a response reads the
decoder's final hidden state (after its last layer norm) at the response's last real token: the
input goes to the encoder, the response itself (not shifted right) to the decoder; 0 is padding.

```python
import torch
import transformers
from safetensors.torch import load_file


def load_reward_model(directory):
  model = transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()
  head = torch.nn.Linear(model.config.d_model, 1)
  head.load_state_dict(load_file(f"{directory}/reward_head.safetensors"))
  return model, head.eval()


@torch.inference_mode()
def rewards(model, head, input_ids, response_ids):
  """Rewards [B] of responses [B, T] to inputs [B, S] (int64 token ids, 0 = padding)."""
  mask = input_ids > 0
  encoded = model.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
  hidden = model.decoder(input_ids=response_ids, encoder_hidden_states=encoded,
                         encoder_attention_mask=mask).last_hidden_state
  last = ((response_ids > 0).sum(-1) - 1).clamp(min=0)
  return head(hidden[torch.arange(len(last)), last])[:, 0]
```
'''


class CheckpointExportError(ValueError):
  pass


def hf_config(config: T5Config) -> dict:
  """The config.json of `config` for transformers' T5Config (T5.1.1: gated-gelu, untied head)."""
  if config.logits_via_embedding:
    raise CheckpointExportError("T5Config.logits_via_embedding: the export writes T5.1.1's own output layer "
                                "(lm_head); a tied, rescaled head (T5.1.0) is not supported")
  proj = _FEED_FORWARD.get(config.mlp_activations)
  if proj is None:
    raise CheckpointExportError(f"T5Config.mlp_activations {config.mlp_activations}: no Hugging Face "
                                f"feed_forward_proj computes it; supported: {sorted(_FEED_FORWARD)}")
  return {
      "architectures": ["T5ForConditionalGeneration"],
      "model_type": "t5",
      "vocab_size": config.vocab_size,
      "d_model": config.emb_dim,
      "d_kv": config.head_dim,
      "d_ff": config.mlp_dim,
      "num_layers": config.num_encoder_layers,
      "num_decoder_layers": config.num_decoder_layers,
      "num_heads": config.num_heads,
      "relative_attention_num_buckets": config.relative_attention_num_buckets,
      "relative_attention_max_distance": config.relative_attention_max_distance,
      "dropout_rate": config.dropout_rate,
      "layer_norm_epsilon": config.layer_norm_epsilon,
      "feed_forward_proj": proj,
      "is_gated_act": len(config.mlp_activations) > 1,
      "dense_act_fn": "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1],
      "tie_word_embeddings": False,
      "scale_decoder_outputs": False,  # transformers >= 5 reads this, older versions tie_word_embeddings
      "is_encoder_decoder": True,
      "decoder_start_token_id": 0,
      "pad_token_id": 0,
      "eos_token_id": 1,
  }


def hf_tokenizer_files(vocabulary: dict, sentencepiece_model: bytes | None = None) -> dict[str, bytes]:
  """{file name: bytes} for `transformers.AutoTokenizer` to give a vocabulary's own ids.

  `vocabulary` is runner.model_inputs' description ("kind" 'sentencepiece' with the model's bytes,
  or 'bytes'; "extra_ids"). Sentinels follow seqio: `<extra_id_N>` is id vocab_size - 1 - N, as
  T5Tokenizer numbers them. ByT5Tokenizer numbers its sentinels the other way (`<extra_id_0>` is
  the first id after the bytes), so a byte vocabulary's are listed with their ids.
  """
  extra_ids = int(vocabulary["extra_ids"])
  if vocabulary["kind"] == "sentencepiece":
    config = {"tokenizer_class": "T5Tokenizer", "extra_ids": extra_ids}
    return {SENTENCEPIECE_MODEL: sentencepiece_model, TOKENIZER_CONFIG: _json_bytes(config)}
  if vocabulary["kind"] != "bytes":
    raise CheckpointExportError(f"a {vocabulary['kind']} vocabulary has no Hugging Face tokenizer")
  size = 3 + 256 + extra_ids  # pad, eos, unk, the bytes (seqio.ByteVocabulary, ByT5Tokenizer)
  special = {"special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
  tokens = {0: "<pad>", 1: "</s>", 2: "<unk>", **{size - 1 - n: f"<extra_id_{n}>" for n in range(extra_ids)}}
  config = {"tokenizer_class": "ByT5Tokenizer", "extra_ids": 0,
            "additional_special_tokens": [f"<extra_id_{n}>" for n in range(extra_ids)],
            "added_tokens_decoder": {str(i): {"content": token, **special} for i, token in sorted(tokens.items())}}
  return {TOKENIZER_CONFIG: _json_bytes(config)}


def _json_bytes(value) -> bytes:
  return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def _float32(value, name) -> np.ndarray:
  array = np.asarray(value)
  if not np.issubdtype(array.dtype, np.floating) and array.dtype.name != "bfloat16":
    raise CheckpointExportError(f"parameter {name!r} has dtype {array.dtype}, not a float")
  return array.astype(np.float32)


def hf_tensors(config: T5Config, params) -> dict[str, np.ndarray]:
  """{HF tensor name: float32 array} of the transformer parameters (a reward head is left out)."""
  flat = traverse_util.flatten_dict({k: v for k, v in params.items() if k != reward_lib.HEAD}, sep="/")
  tensors, used = {}, set()
  for name in checkpoint_import.hf_tensor_names(config):
    path, transpose = checkpoint_import.hf_name_to_path(name)
    if path not in flat:
      raise CheckpointExportError(f"no parameter {path!r} for tensor {name!r}")
    value = _float32(flat[path], path)
    tensors[name] = np.ascontiguousarray(value.T if transpose else value)
    used.add(path)
  unused = sorted(set(flat) - used)
  if unused:
    raise CheckpointExportError(f"parameter(s) {', '.join(unused)} have no Hugging Face tensor")
  return tensors


def _reward_head_tensors(config: T5Config, head) -> dict[str, np.ndarray]:
  """The reward head as a torch.nn.Linear(d_model, 1) state dict: weight [1, d_model], bias [1]."""
  kernel, bias = _float32(head["kernel"], "reward_head/kernel"), _float32(head["bias"], "reward_head/bias")
  if kernel.shape != (config.emb_dim, 1) or bias.shape != (1,):
    raise CheckpointExportError(f"reward head of shapes kernel {kernel.shape}, bias {bias.shape}; "
                                f"expected ({config.emb_dim}, 1) and (1,)")
  return {"weight": np.ascontiguousarray(kernel.T), "bias": bias}


def _replace_atomically(directory: str, name: str, write) -> str:
  """Calls write(temporary path) in the local `directory`, then renames the file to `name`."""
  final = os.path.join(directory, name)
  handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
  os.close(handle)
  try:
    write(temporary)
    os.chmod(temporary, storage.FILE_MODE)  # read by others (the Hub uploader); mkstemp makes 0600
    os.replace(temporary, final)
  finally:
    if os.path.exists(temporary):
      os.remove(temporary)
  return final


def _write_safetensors(directory: str, name: str, tensors: dict[str, np.ndarray]) -> str:
  """Writes `tensors` as `directory/name`, whole; returns its path."""
  from safetensors import numpy as safetensors_numpy  # pylint: disable=import-outside-toplevel

  metadata = {"format": "pt"}  # transformers reads safetensors files that say they hold torch tensors
  if not storage.is_bucket(directory):
    return _replace_atomically(directory, name,
                               lambda path: safetensors_numpy.save_file(tensors, path, metadata))
  path = storage.join(directory, name)
  storage.write_bytes(path, safetensors_numpy.save(tensors, metadata))
  return path


def _write_text(directory: str, name: str, text: str) -> str:
  path = storage.join(directory, name)
  storage.write_text(path, text)  # a local file replaced atomically, a bucket object written whole
  return path


def save_hf_t5(directory, config: T5Config, params, extra_files: dict[str, bytes] | None = None) -> list[str]:
  """Writes `directory` (local or gs://) as a Hugging Face T5 checkpoint of `params`; returns the
  files written.

  Refuses a directory that holds a complete checkpoint (a config.json); the files of an
  interrupted export are replaced. A reward head (`params['reward_head']`) is written as
  REWARD_HEAD_FILE with its note. `extra_files` ({name: bytes}: the tokenizer's, the record of
  the model's inputs) are written before config.json.
  """
  directory = storage.absolute(directory)  # a local path as an absolute one, a bucket's as it is
  if storage.exists(storage.join(directory, CONFIG_FILE)):
    raise FileExistsError(f"{directory} already holds a checkpoint ({CONFIG_FILE}); choose a new directory")
  config_json = json.dumps(hf_config(config), indent=2, sort_keys=True) + "\n"
  tensors = hf_tensors(config, params)
  head_tensors = _reward_head_tensors(config, params[reward_lib.HEAD]) if reward_lib.HEAD in params else None
  storage.makedirs(directory)
  written = [_write_safetensors(directory, WEIGHTS_FILE, tensors)]
  if head_tensors is not None:
    written.append(_write_safetensors(directory, REWARD_HEAD_FILE, head_tensors))
    written.append(_write_text(directory, REWARD_HEAD_NOTE, _REWARD_HEAD_NOTE))
  else:
    for name in (REWARD_HEAD_FILE, REWARD_HEAD_NOTE):  # left by an interrupted export of a reward model
      storage.remove(storage.join(directory, name))
  for name, content in (extra_files or {}).items():
    path = storage.join(directory, name)
    storage.write_bytes(path, content)
    written.append(path)
  written.append(_write_text(directory, CONFIG_FILE, config_json))
  return written
