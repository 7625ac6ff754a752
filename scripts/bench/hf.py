"""The Hugging Face baseline: a PyTorch T5.1.1 twin of a T5Config and its scoring, training and sampling.

The twin is saved with safetensors and read back through `models.checkpoint_import.load_hf_t5`,
so both sides of every comparison run the same weights.
"""
import copy

import numpy as np
import torch
import transformers

from models.config import T5Config

_FEED_FORWARD = {("gelu", "linear"): "gated-gelu", ("relu", "linear"): "gated-relu",
                 ("silu", "linear"): "gated-silu", ("relu",): "relu", ("gelu",): "gelu"}


def hf_config_of(config: T5Config) -> transformers.T5Config:
  if config.logits_via_embedding:
    raise ValueError("the benchmark's twin is T5.1.1 (untied output layer); logits_via_embedding must be False")
  hf_config = transformers.T5Config(
      vocab_size=config.vocab_size, d_model=config.emb_dim, d_kv=config.head_dim, num_heads=config.num_heads,
      d_ff=config.mlp_dim, num_layers=config.num_encoder_layers, num_decoder_layers=config.num_decoder_layers,
      feed_forward_proj=_FEED_FORWARD[config.mlp_activations], dropout_rate=0.0,
      relative_attention_num_buckets=config.relative_attention_num_buckets,
      relative_attention_max_distance=config.relative_attention_max_distance,
      layer_norm_epsilon=config.layer_norm_epsilon, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
      tie_word_embeddings=False)
  hf_config.tie_word_embeddings = False  # transformers 5 forces tying on; T5.1.1 has its own output layer
  return hf_config


def _t5_init(model: transformers.T5ForConditionalGeneration, config: T5Config):
  """Mesh TensorFlow's T5 initialisation: unit-variance embeddings, fan-in scaled projections."""
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith("layer_norm.weight"):
        param.fill_(1.0)
      elif name == "shared.weight":
        param.normal_(0.0, 1.0)
      elif name.endswith("relative_attention_bias.weight"):
        param.normal_(0.0, config.emb_dim ** -0.5)
      else:  # a Linear weight [out, in]; the query also carries attention's 1/sqrt(head_dim)
        scale = config.head_dim ** -0.5 if name.endswith(".q.weight") else 1.0
        param.normal_(0.0, scale * param.shape[1] ** -0.5)


def make_twin(config: T5Config, directory, seed: int = 0) -> transformers.T5ForConditionalGeneration:
  """A random T5ForConditionalGeneration of `config`'s sizes, saved to `directory`, in eval mode."""
  torch.manual_seed(seed)
  model = transformers.T5ForConditionalGeneration(hf_config_of(config))
  _t5_init(model, config)
  model.set_input_embeddings(model.shared)  # both stacks read the one shared embedding
  model.eval()
  transformers.utils.logging.disable_progress_bar()  # the saving bar is the library's line, not the run's
  model.save_pretrained(directory, safe_serialization=True)
  return model


def _long(array, device):
  return torch.from_numpy(np.asarray(array, np.int64)).to(device)


def scorer(model, input_ids, candidate_ids, *, length_normalize=True, device="cpu"):
  """A runner returning scores [B, K] (numpy) the usual way: one forward per (context, candidate) pair."""
  batch, num_candidates, steps = candidate_ids.shape
  inputs = _long(np.repeat(input_ids, num_candidates, axis=0), device)
  rows = _long(candidate_ids.reshape(batch * num_candidates, steps), device)
  decoder_inputs = torch.nn.functional.pad(rows, (1, 0))[:, :-1]
  mask = rows > 0

  def run():
    with torch.inference_mode():
      logits = model(input_ids=inputs, attention_mask=inputs > 0, decoder_input_ids=decoder_inputs).logits
      picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, rows[..., None])[..., 0]
      totals = (picked * mask).sum(-1)
      if length_normalize:
        totals = totals / mask.sum(-1).clamp(min=1)
      return totals.reshape(batch, num_candidates).cpu().numpy()
  return run


def trainer(model, input_ids, target_ids, *, learning_rate=1e-3, device="cpu", autocast_dtype=None):
  """A runner doing one Adafactor training step on the batch; it returns the step's loss (float).

  The loss is the mean token cross-entropy over non-padding targets, as runner.trainer's with z_loss 0.
  """
  optimizer = transformers.optimization.Adafactor(
      model.parameters(), lr=learning_rate, scale_parameter=True, relative_step=False, warmup_init=False)
  inputs = _long(input_ids, device)
  labels = _long(target_ids, device).masked_fill(_long(target_ids, device) == 0, -100)

  def run():
    model.train()
    with torch.autocast(device_type=device.split(":")[0], dtype=autocast_dtype,
                        enabled=autocast_dtype is not None):
      loss = model(input_ids=inputs, attention_mask=inputs > 0, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
  return run


def training_phases(model, input_ids, target_ids, *, learning_rate=1e-3, device="cpu"):
  """Runners of the training step's phases, each on its own copy of `model`: `hf/forward` (the loss),
  `hf/forward_backward`, `hf/optimizer` (one Adafactor step on gradients computed once) and
  `hf/train_step` (the three together, as `trainer` runs them)."""
  inputs = _long(input_ids, device)
  labels = _long(target_ids, device).masked_fill(_long(target_ids, device) == 0, -100)
  forward_model, backward_model, optimizer_model = (copy.deepcopy(model).train() for _ in range(3))
  loss = lambda m: m(input_ids=inputs, attention_mask=inputs > 0, labels=labels).loss

  def forward_backward():
    loss(backward_model).backward()
    backward_model.zero_grad(set_to_none=True)

  loss(optimizer_model).backward()  # its gradients stay: each optimizer run steps on them
  optimizer = transformers.optimization.Adafactor(
      optimizer_model.parameters(), lr=learning_rate, scale_parameter=True, relative_step=False, warmup_init=False)
  return {"hf/forward": lambda: loss(forward_model).item(), "hf/forward_backward": forward_backward,
          "hf/optimizer": optimizer.step,
          "hf/train_step": trainer(copy.deepcopy(model), input_ids, target_ids, learning_rate=learning_rate,
                                   device=device)}


def sampler(model, input_ids, *, new_tokens, top_p=0.95, greedy=False, device="cpu"):
  """A runner generating exactly `new_tokens` tokens per context (nucleus, or greedy), as numpy [B, new_tokens]."""
  inputs = _long(input_ids, device)
  # Sampling runs to full length on both sides, so EOS is held back; greedy stops at EOS like ours.
  options = (dict(do_sample=False) if greedy else
             dict(do_sample=True, top_p=top_p, top_k=0, min_new_tokens=new_tokens))

  def run():
    with torch.inference_mode():
      out = model.generate(input_ids=inputs, attention_mask=inputs > 0, max_new_tokens=new_tokens,
                           num_beams=1, **options)
    tokens = out[:, 1:].cpu().numpy()  # drop the decoder start token
    return np.pad(tokens, [(0, 0), (0, new_tokens - tokens.shape[1])])
  return run
