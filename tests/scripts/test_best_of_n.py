"""Best-of-N TL;DR summaries end to end, as a user runs them (Stiennon et al. 2020, §4.1).

One tiny pairwise run on the quickstart comparisons (in this process) is both models: its reward head is the reward
model (normalised on the quickstart references at the end of training), its transformer the
policy (a few steps of either objective only need to be a model that samples). Then
scripts.generate's command line with the best_of_n recipe (run in this process, as its
`__main__` runs it, so that the checks reuse its compiled programs); each line is checked against an
independent re-sampling (the documented seed scheme) and re-scoring with `models.reward.reward`.
The checks here read no TensorFlow: the inputs are byte-encoded as ByteVocabulary does.
"""
import json
import math
import re

import jax
import numpy as np
import pytest

from models import decoding
from models import reward as reward_lib
from models.config import T5Config
from runner import checkpoints
from runner import partitioning
from runner import reward_normalization
from tests.helpers import cli

N = 3
INPUT_LENGTH, MAX_LENGTH, BATCH = 256, 16, 2


def _generate(argv) -> str:
  """stdout of `python -m scripts.generate ARGV`, run in this process as its `__main__` runs it
  (tests/helpers/cli.py), from the project root; fails on a non-zero exit."""
  from scripts import generate as generate_script  # pylint: disable=g-import-not-at-top
  result = cli.run_script(generate_script.main, argv, program="generate")
  assert result.code == 0, f"exit {result.code}\n{result.stderr[-3000:]}"
  return result.stdout


# gin/models/t5_1_1/tiny.gin's model, so that scripts.generate's model file agrees with the checkpoint.
TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
                num_decoder_layers=2, mlp_activations=("gelu", "linear"), dropout_rate=0.0, dtype="float32",
                logits_via_embedding=False)


@pytest.fixture(scope="module")
def best_of_n(tmp_path_factory):
  """(model dir, output lines, stdout of scripts.generate)."""
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  from runner import train as train_lib  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp("best_of_n")
  model_dir = directory / "run"
  # Training is tested elsewhere (as scripts.train); here it makes the models, in this process.
  train_lib.train(model_config=TINY, mixture_or_task_name="summarize_feedback_preference",
                  objective="pairwise", task_feature_lengths={"inputs": INPUT_LENGTH, "targets": 128},
                  train_steps=3, batch_size=4, model_dir=str(model_dir), log_every=1000,
                  normalize_reward_task="summarize_feedback_sft")
  output = directory / "best_of_n.jsonl"
  stdout = _generate([
      "--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/runs/infer.gin",
      "--gin_file=gin/recipes/summarize_from_feedback/best_of_n.gin",
      f"--gin.CHECKPOINT_PATH='{model_dir}'", f"--gin.REWARD_CHECKPOINT_PATH='{model_dir}/normalized'",
      f"--gin.INFER_OUTPUT_FILE='{output}'", "--gin.SPLIT='validation'", f"--gin.NUM_SAMPLES={N}",
      f"--gin.BATCH_SIZE={BATCH}", f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {INPUT_LENGTH}, 'targets': {MAX_LENGTH}}}",
      # The recipe's summary lengths are the paper's BPE tokens; quickstart bytes are longer.
      "--gin_bindings=t5_tasks.families.reference_filter.min_summary_tokens = None",
      "--gin_bindings=t5_tasks.families.reference_filter.max_summary_tokens = None"])
  lines = [json.loads(line) for line in output.read_text().splitlines()]
  return model_dir, lines, stdout


def _byte_ids(texts):
  """[B, INPUT_LENGTH] ids as ByteVocabulary encodes (byte + 3), EOS (1) appended."""
  ids = np.zeros((len(texts), INPUT_LENGTH), np.int32)
  for row, text in enumerate(texts):
    tokens = [b + 3 for b in text.encode("utf-8")][:INPUT_LENGTH - 1] + [1]
    ids[row, :len(tokens)] = tokens
  return ids


def _byte_text(tokens):
  """The text of a sample before EOS, sentinel ids left out: the bytes between them decoded
  (invalid UTF-8 dropped) piece by piece, as the tasks' vocabulary decodes around sentinels."""
  tokens = list(tokens)
  for stop in (1, 0):
    tokens = tokens[:tokens.index(stop)] if stop in tokens else tokens
  pieces, piece = [], []
  for token in tokens + [259]:
    if 3 <= token < 259:
      piece.append(token - 3)
    elif 259 <= token < 359:  # a sentinel (<extra_id_{358 - id}>) ends a piece; other ids decode to nothing
      pieces.append(bytes(piece).decode("utf-8", errors="ignore"))
      piece = []
  return "".join(pieces)


def test_every_line_holds_n_samples_their_rewards_and_the_best(best_of_n):
  model_dir, lines, stdout = best_of_n
  assert len(lines) == 2  # the quickstart's two validation references
  kl = math.log(N) - (N - 1) / N
  assert decoding.best_of_n_kl(1) == 0.0  # one sample is the policy itself
  for line in lines:
    assert len(line["predictions"]) == len(line["rewards"]) == N
    assert line["best"] == int(np.argmax(line["rewards"]))
    assert line["kl"] == pytest.approx(kl, abs=1e-12)
    assert line["inputs"].startswith("SUBREDDIT: r/") and line["inputs"].endswith("\n\nTL;DR:")
  printed = re.search(r"best-of-3: KL ([0-9.]+) nats .*chosen samples ([-+0-9.]+), of all samples ([-+0-9.]+) "
                      r"\(2 inputs\)", stdout)
  assert printed, stdout[-2000:]
  assert float(printed.group(1)) == pytest.approx(kl, abs=1e-6)
  chosen = np.mean([line["rewards"][line["best"]] for line in lines])
  assert float(printed.group(2)) == pytest.approx(chosen, abs=1e-4)
  assert float(printed.group(3)) == pytest.approx(np.mean([line["rewards"] for line in lines]), abs=1e-4)
  assert chosen >= np.mean([line["rewards"] for line in lines])


def test_samples_and_rewards_match_an_independent_resampling_and_rescoring(best_of_n):
  model_dir, lines, _ = best_of_n
  config, params = checkpoints.load_params(str(model_dir))
  reward_config, reward_params = checkpoints.load_params(str(model_dir / reward_normalization.NORMALIZED_SUBDIR))
  rng = jax.random.PRNGKey(0)  # infer.gin's SEED; batch i samples with fold_in(rng, i)
  # On generate's mesh and rules, so that the programs are generate's (and in the compilation cache).
  with partitioning.activate(partitioning.create_mesh(-1, 1, devices=jax.local_devices())):
    _check_batches(lines, rng, config, params, reward_config, reward_params)


def _check_batches(lines, rng, config, params, reward_config, reward_params):
  for index, first in enumerate(range(0, len(lines), BATCH)):
    batch = lines[first:first + BATCH]
    ids = _byte_ids([line["inputs"] for line in batch] + [""] * (BATCH - len(batch)))
    ids[len(batch):] = 0  # generate pads the last batch with empty rows
    samples = decoding.sample(config, params, ids, jax.random.fold_in(rng, index), max_length=MAX_LENGTH,
                              num_samples=N, temperature=0.7, top_p=1.0, eos_id=1)
    rewards = np.asarray(reward_lib.reward(reward_config, reward_params, ids, samples))
    for row, line in enumerate(batch):
      # Sentinel ids decode to `<extra_id_N>` markup in the tasks' vocabulary, to nothing here.
      assert [re.sub(r"<extra_id_\d+>", "", p) for p in line["predictions"]] == [
          _byte_text(s) for s in np.asarray(samples[row])]
      np.testing.assert_allclose(line["rewards"], rewards[row], rtol=1e-5, atol=1e-5)


def test_the_reward_model_was_normalised_at_the_end_of_training(best_of_n):
  model_dir, _, _ = best_of_n
  record = json.loads((model_dir / "normalized" / reward_normalization.NORMALIZATION_FILE).read_text())
  assert record["references"]["task"] == "summarize_feedback_sft" and record["references"]["count"] == 7
  assert record["bias_after"] == pytest.approx(record["bias_before"] - record["offset"], abs=1e-6)
  _, trained = checkpoints.load_params(str(model_dir))
  _, normalized = checkpoints.load_params(str(model_dir / "normalized"))
  np.testing.assert_allclose(normalized[reward_lib.HEAD]["bias"], np.asarray(trained[reward_lib.HEAD]["bias"])
                             - record["offset"], atol=1e-6)
  np.testing.assert_array_equal(normalized[reward_lib.HEAD]["kernel"], trained[reward_lib.HEAD]["kernel"])


def test_a_reward_checkpoint_without_a_reward_head_is_refused(best_of_n, tmp_path):
  from runner import infer  # pylint: disable=g-import-not-at-top
  model_dir, _, _ = best_of_n
  policy = tmp_path / "policy"
  checkpoints.save_params(str(policy / "params"), {k: v for k, v in checkpoints.load_params(str(model_dir))[1].items()
                                                   if k != reward_lib.HEAD})
  checkpoints.write_model_config(str(policy), TINY)
  with pytest.raises(ValueError, match="has no 'reward_head': train it with OBJECTIVE='pairwise'"):
    infer.infer(checkpoint_path=str(model_dir), output_file=str(tmp_path / "x"),
                task_feature_lengths={"inputs": INPUT_LENGTH, "targets": MAX_LENGTH},
                mixture_or_task_name="summarize_feedback_sft", split="validation",
                reward_checkpoint_path=str(policy))
