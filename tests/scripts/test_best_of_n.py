"""The summarize-from-feedback recipes end to end on the quickstart files, as a user runs them
(Stiennon et al. 2020: B.1's supervised baseline and reward model, §3.4's normalisation, §4.1's
best-of-N), with the tiny model and a few steps.

Each recipe runs through its command line in this process (tests/helpers/cli.py), with nothing
but sizes overridden: appendix A's filters keep the quickstart references. The supervised run is
the policy, the reward run (started from it) the reward model, normalised at the end of training
and again by normalize_reward.gin, which must give the same offset. Each best-of-N line is then
checked against an independent re-sampling (the documented seed scheme) and re-scoring with
`models.reward.reward`; those checks read no TensorFlow: the inputs are byte-encoded as
ByteVocabulary does.
"""
import json
import math
import re
import shutil

import jax
import numpy as np
import pytest

from models import decoding
from models import reward as reward_lib
from runner import checkpoints
from runner import configs
from runner import partitioning
from runner import reward_normalization
from tests.helpers import cli

N = 3
INPUT_LENGTH, MAX_LENGTH, BATCH = 256, 16, 2
RECIPES = "gin/recipes/summarize_from_feedback"
TINY = "--gin_file=gin/models/t5_1_1/tiny.gin"
# Small enough to compile fast on two cores; the recipes' own are 512 and 49.
TRAINING = [f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {INPUT_LENGTH}, 'targets': 64}}", "--gin.BATCH_SIZE=4"]


def _command(script: str, argv) -> cli.CommandResult:
  """`python -m scripts.<script> ARGV`, run in this process as its `__main__` runs it."""
  import importlib  # pylint: disable=g-import-not-at-top
  return cli.run_script(importlib.import_module(f"scripts.{script}").main, argv, program=script)


def _succeeds(script: str, argv) -> str:
  result = _command(script, argv)
  assert result.code == 0, f"exit {result.code}\n{result.stderr[-3000:]}"
  return result.stdout


def _train(recipe: str, model_dir, *more) -> list[str]:
  return [TINY, "--gin_file=gin/runs/finetune.gin", f"--gin_file={RECIPES}/{recipe}",
          f"--gin.MODEL_DIR='{model_dir}'", *TRAINING, *more]


@pytest.fixture(scope="module")
def recipes(tmp_path_factory):
  """(directory holding sft/, rm/, rm_normalized/, {recipe: stdout}, best-of-N output lines)."""
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  directory = tmp_path_factory.mktemp("recipes")
  stdout = {"sft.gin": _succeeds("train", _train("sft.gin", directory / "sft", "--gin.TRAIN_STEPS=2"))}
  stdout["reward_model.gin"] = _succeeds("train", _train(
      "reward_model.gin", directory / "rm", "--gin.TRAIN_STEPS=3", f"--gin.INITIAL_CHECKPOINT_PATH='{directory}/sft'"))
  stdout["normalize_reward.gin"] = _succeeds("normalize_reward", [
      TINY, f"--gin_file={RECIPES}/normalize_reward.gin", f"--gin.REWARD_CHECKPOINT_PATH='{directory}/rm'",
      f"--gin.NORMALIZED_CHECKPOINT_PATH='{directory}/rm_normalized'", *TRAINING])
  output = directory / "best_of_n.jsonl"
  stdout["best_of_n.gin"] = _succeeds("generate", [
      TINY, "--gin_file=gin/runs/infer.gin", f"--gin_file={RECIPES}/best_of_n.gin",
      f"--gin.CHECKPOINT_PATH='{directory}/sft'", f"--gin.REWARD_CHECKPOINT_PATH='{directory}/rm/normalized'",
      f"--gin.INFER_OUTPUT_FILE='{output}'", f"--gin.NUM_SAMPLES={N}", f"--gin.BATCH_SIZE={BATCH}",
      f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {INPUT_LENGTH}, 'targets': {MAX_LENGTH}}}"])
  lines = [json.loads(line) for line in output.read_text().splitlines()]
  return directory, stdout, lines


def test_the_supervised_and_reward_recipes_train_on_every_quickstart_reference(recipes):
  directory, stdout, _ = recipes
  # 6 references in the comparisons' 'ref' summaries, 6 in the references file; appendix A keeps all.
  # (Read from the run's data_files.json: the console line is printed where the examples are first
  # built, which may be an earlier test of this process.)
  record = json.loads((directory / "sft" / "data_files.json").read_text())
  examples = record["tasks"]["summarize_feedback_sft"]["examples"]
  assert sum(examples.values()) == 12, examples
  assert "stopped at step 2" in stdout["sft.gin"] and "stopped at step 3" in stdout["reward_model.gin"]
  _, policy = checkpoints.load_params(str(directory / "sft"))
  _, reward_model = checkpoints.load_params(str(directory / "rm"))
  assert reward_lib.HEAD not in policy and reward_lib.HEAD in reward_model


def test_normalize_reward_gin_gives_the_offset_of_the_normalisation_at_the_end_of_training(recipes):
  directory, stdout, _ = recipes
  at_training = json.loads((directory / "rm" / "normalized" / reward_normalization.NORMALIZATION_FILE).read_text())
  by_recipe = json.loads((directory / "rm_normalized" / reward_normalization.NORMALIZATION_FILE).read_text())
  # The train split's 7 references (the news article among them, read in the transfer format).
  assert at_training["references"]["count"] == by_recipe["references"]["count"] == 7
  assert by_recipe["offset"] == pytest.approx(at_training["offset"], abs=1e-6)
  assert f"offset {by_recipe['offset']:+.6f} over 7 references" in stdout["normalize_reward.gin"]


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


def test_every_line_holds_n_samples_their_rewards_and_the_best(recipes):
  _, stdout, lines = recipes
  stdout = stdout["best_of_n.gin"]
  assert len(lines) == 3  # the posts of the quickstart's three test references
  kl = math.log(N) - (N - 1) / N
  assert decoding.best_of_n_kl(1) == 0.0  # one sample is the policy itself
  for line in lines:
    assert len(line["predictions"]) == len(line["rewards"]) == N
    assert line["best"] == int(np.argmax(line["rewards"]))
    assert line["kl"] == pytest.approx(kl, abs=1e-12)
    assert line["inputs"].startswith("SUBREDDIT: r/") and line["inputs"].endswith("\n\nTL;DR:")
  printed = re.search(r"best-of-3: KL ([0-9.]+) nats .*chosen samples ([-+0-9.]+), of all samples ([-+0-9.]+) "
                      r"\(3 inputs\)", stdout)
  assert printed, stdout[-2000:]
  assert float(printed.group(1)) == pytest.approx(kl, abs=1e-6)
  chosen = np.mean([line["rewards"][line["best"]] for line in lines])
  assert float(printed.group(2)) == pytest.approx(chosen, abs=1e-4)
  assert float(printed.group(3)) == pytest.approx(np.mean([line["rewards"] for line in lines]), abs=1e-4)
  assert chosen >= np.mean([line["rewards"] for line in lines])


def test_samples_and_rewards_match_an_independent_resampling_and_rescoring(recipes):
  directory, _, lines = recipes
  config, params = checkpoints.load_params(str(directory / "sft"))
  reward_config, reward_params = checkpoints.load_params(str(directory / "rm" / reward_normalization.NORMALIZED_SUBDIR))
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


def test_the_reward_model_was_normalised_at_the_end_of_training(recipes):
  model_dir = recipes[0] / "rm"
  record = json.loads((model_dir / "normalized" / reward_normalization.NORMALIZATION_FILE).read_text())
  assert record["references"]["task"] == "summarize_feedback_sft" and record["references"]["count"] == 7
  assert record["bias_after"] == pytest.approx(record["bias_before"] - record["offset"], abs=1e-6)
  _, trained = checkpoints.load_params(str(model_dir))
  _, normalized = checkpoints.load_params(str(model_dir / "normalized"))
  np.testing.assert_allclose(normalized[reward_lib.HEAD]["bias"], np.asarray(trained[reward_lib.HEAD]["bias"])
                             - record["offset"], atol=1e-6)
  np.testing.assert_array_equal(normalized[reward_lib.HEAD]["kernel"], trained[reward_lib.HEAD]["kernel"])


def test_a_reward_checkpoint_without_a_reward_head_is_refused(recipes, tmp_path):
  from runner import infer  # pylint: disable=g-import-not-at-top
  directory = recipes[0]
  with pytest.raises(ValueError, match="has no 'reward_head': train it with OBJECTIVE='pairwise'"):
    infer.infer(checkpoint_path=str(directory / "sft"), output_file=str(tmp_path / "x"),
                dataset=configs.DatasetConfig("summarize_feedback_sft",
                                              {"inputs": INPUT_LENGTH, "targets": MAX_LENGTH}, "test", 8),
                sampling=configs.SamplingConfig(reward_checkpoint_path=str(directory / "sft")))


def test_no_inputs_to_generate_for_exits_1_in_one_line_and_writes_no_file(recipes, tmp_path):
  directory = recipes[0]
  output = tmp_path / "best_of_n.jsonl"
  # A references file bound to 'train' alone, no comparisons: the test split is empty.
  result = _command("generate", [
      TINY, "--gin_file=gin/runs/infer.gin", f"--gin_file={RECIPES}/best_of_n.gin",
      f"--gin.CHECKPOINT_PATH='{directory}/sft'", f"--gin.REWARD_CHECKPOINT_PATH='{directory}/rm/normalized'",
      f"--gin.INFER_OUTPUT_FILE='{output}'",
      "--gin_bindings=t5_tasks.tasks.data_files.files = {'summarize_feedback': {}, "
      "'summarize_references': {'train': 't5_tasks/data/summarize_references.jsonl'}}"])
  assert result.code == 1 and not output.exists()
  assert result.stderr.strip().splitlines()[-1] == (
      "error: infer: nothing to generate for: task summarize_feedback_sft has no 'test' inputs")


def _copied_quickstart(tmp_path) -> str:
  """A binding of the quickstart files copied under tmp_path: a file set this process has not
  built (a task keeps its examples per file set, and this module built the quickstart's)."""
  files = {}
  for key, name in (("summarize_feedback", "summarize_comparisons.jsonl"),
                    ("summarize_references", "summarize_references.jsonl")):
    shutil.copy(f"t5_tasks/data/{name}", tmp_path / name)
    files[key] = {"all": str(tmp_path / name)}
  return f"--gin_bindings=t5_tasks.tasks.data_files.files = {files!r}"


@pytest.mark.parametrize("recipe", ["sft.gin", "reward_model.gin"])
def test_a_reference_filter_that_leaves_nothing_is_refused_before_the_first_step(recipes, recipe, tmp_path):
  model_dir = tmp_path / "run"
  result = _command("train", _train(
      recipe, model_dir, "--gin.TRAIN_STEPS=2", f"--gin.INITIAL_CHECKPOINT_PATH='{recipes[0]}/sft'",
      _copied_quickstart(tmp_path), "--gin_bindings=t5_tasks.families.reference_filter.min_summary_tokens = 40"))
  assert result.code == 1 and not model_dir.exists()  # before the run directory, let alone a step
  assert result.stderr.strip().splitlines()[-1] == (
      "error: summarize_feedback_sft: t5_tasks.families.reference_filter (512, 40, 48) leaves no reference: "
      "12 references (6 from comparisons), filtered out 12; summary under 40 tokens: 12")


def _ppo(model_dir, policy, reward_model, *more) -> list[str]:
  """ppo.gin's command line: two steps of 4 rollouts of MAX_LENGTH tokens."""
  return [TINY, "--gin_file=gin/runs/ppo.gin", f"--gin_file={RECIPES}/ppo.gin", f"--gin.MODEL_DIR='{model_dir}'",
          f"--gin.POLICY_CHECKPOINT_PATH='{policy}'", f"--gin.REWARD_CHECKPOINT_PATH='{reward_model}'",
          f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {INPUT_LENGTH}, 'targets': {MAX_LENGTH}}}", "--gin.BATCH_SIZE=4",
          "--gin.TRAIN_STEPS=2", *more]


def test_the_ppo_recipe_trains_the_supervised_policy_against_the_normalised_reward_model(recipes, tmp_path):
  """Appendix B.1's third stage on the quickstart: the policy starts from sft/, the value function
  from the normalised reward model; two steps of 4 rollouts, then the comparison with best-of-N on
  the three test posts."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from runner import ppo  # pylint: disable=g-import-not-at-top
  directory = recipes[0]
  model_dir = tmp_path / "ppo"
  stdout = _succeeds("ppo", _ppo(model_dir, f"{directory}/sft", f"{directory}/rm/normalized", "--gin.BEST_OF_N_MAX=4"))
  assert stdout.splitlines()[-1] == "stopped at step 2"
  for step in (1, 2):
    assert re.search(rf"^step {step}/2  reward [-+0-9.]+  KL [0-9.]+  beta 0.05  entropy [0-9.]+  value loss "
                     r"[0-9.]+  clip fraction [0-9.]+", stdout, re.MULTILINE), stdout[-2000:]
  record = json.loads((model_dir / ppo.COMPARISON_FILE).read_text())
  assert ppo.comparison_line(record) in stdout and (model_dir / "report.html").exists()
  assert record["prompts"] == 3 and record["temperature"] == 0.7 and 1 <= record["best_of_n"]["n"] <= 4
  saved = ocp.StandardCheckpointer().restore(str(model_dir / "checkpoints" / "2" / "params"))
  _, policy = checkpoints.load_params(str(directory / "sft"))
  _, reward_model = checkpoints.load_params(str(directory / "rm" / "normalized"))
  assert set(saved) == {"policy", "value"} and reward_lib.HEAD not in saved["policy"]
  assert saved["value"].keys() == reward_model.keys()  # B.1: the value function is the reward model's network
  moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(saved["policy"]), jax.tree.leaves(policy))]
  assert any(moved)
  config = (model_dir / "config.gin").read_text()
  assert "KL_COEFFICIENT = 0.05" in config and "LAMBDA = 0.95" in config and "PPO_EPOCHS = 4" in config


def test_the_ppo_recipe_runs_the_papers_million_episodes():
  # B.1: batch 512 for the 1.3B policy, "run for 1 million episodes".
  recipe = open(f"{RECIPES}/ppo.gin", encoding="utf-8").read()
  batch = int(re.search(r"^BATCH_SIZE = (\d+)", recipe, re.MULTILINE).group(1))
  steps = int(re.search(r"^TRAIN_STEPS = (\d+)", recipe, re.MULTILINE).group(1))
  assert batch == 512 and steps == 1_000_000 // batch


def test_ppo_refuses_a_reward_checkpoint_without_a_head_in_one_line(recipes, tmp_path):
  directory = recipes[0]
  model_dir = tmp_path / "ppo"
  result = _command("ppo", _ppo(model_dir, f"{directory}/sft", f"{directory}/sft"))
  assert result.code == 1 and not model_dir.exists()
  assert result.stderr.strip().splitlines() == [
      f"error: REWARD_CHECKPOINT_PATH {directory}/sft has no 'reward_head': train it with OBJECTIVE='pairwise' "
      "or 'listwise'"]
