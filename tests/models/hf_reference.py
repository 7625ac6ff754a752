"""A random tiny Hugging Face T5.1.1 model saved with safetensors: the reference the network is proven against."""
import numpy as np
import torch
import transformers

HF_CONFIG = dict(
    vocab_size=96, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2, num_decoder_layers=3,
    feed_forward_proj="gated-gelu", tie_word_embeddings=False, dropout_rate=0.0,
    relative_attention_num_buckets=32, relative_attention_max_distance=128,
    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
)


def make_hf_t5(directory, seed=0, **overrides):
  """Saves a random T5ForConditionalGeneration to `directory` (safetensors) and returns it in eval mode."""
  torch.manual_seed(seed)
  config = transformers.T5Config(**{**HF_CONFIG, **overrides})
  # transformers 5 forces tying on in T5Config; T5.1.1 checkpoints have their own lm_head.
  config.tie_word_embeddings = overrides.get("tie_word_embeddings", HF_CONFIG["tie_word_embeddings"])
  model = transformers.T5ForConditionalGeneration(config)
  with torch.no_grad():  # HF's default init leaves some tensors near zero; make every weight matter.
    for param in model.parameters():
      param.normal_(0.0, 0.3)
  model.set_input_embeddings(model.shared)  # T5 always shares input embeddings between the stacks
  model.eval()
  model.save_pretrained(directory, safe_serialization=True)
  return model


def random_ids(rng, shape, vocab, pad_from=None):
  """Token ids in [2, vocab) with trailing padding (0) from the given per-row lengths."""
  ids = rng.integers(2, vocab, size=shape).astype(np.int32)
  if pad_from is not None:
    for row, length in enumerate(pad_from):
      ids[row, length:] = 0
  return ids


def hf_candidate_scores(model, input_ids, candidate_ids, length_normalize):
  """Scores from HF logits alone: shift right with start 0, log-softmax, sum over non-padding tokens."""
  batch, num_candidates, steps = candidate_ids.shape
  scores = np.zeros((batch, num_candidates))
  with torch.inference_mode():
    for b in range(batch):
      for k in range(num_candidates):
        target = torch.tensor(candidate_ids[b, k][None].astype(np.int64))
        decoder_input = torch.cat([torch.zeros((1, 1), dtype=torch.long), target[:, :-1]], dim=1)
        inputs = torch.tensor(input_ids[b][None].astype(np.int64))
        logits = model(input_ids=inputs, attention_mask=inputs > 0, decoder_input_ids=decoder_input).logits
        log_probs = torch.log_softmax(logits.double(), -1)[0, torch.arange(steps), target[0]]
        mask = target[0] > 0
        total = float(log_probs[mask].sum())
        scores[b, k] = total / max(int(mask.sum()), 1) if length_normalize else total
  return scores
