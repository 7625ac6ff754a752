"""The TuringAdvice recipes (gin/recipes/turingadvice/) against the paper's numbers.

The paper's numbers are held here as constants, each with where it is written (Zellers et al.,
TuringAdvice, /work/shared/papers/turingadvice.txt; "line N" is that file's line). Each recipe is
parsed as a user's command line is (scripts/gin_cli.py's flags, `rewrite_gin_args` and `start`), in
this process; the commands then run through the scripts' own `main` and are stopped where the
work would begin (parameters initialised or restored, tokens sampled), so that what reaches the
trainer and the sampler (steps, batch, learning rate, checkpoint, lengths, top-p) is what is
checked. The full-size recipes run up to there with bytes in place of the SentencePiece file (the
one download they need); the tiny model with one step is the smoke run a user can do on a laptop.
"""
import json
import math

import gin
import jax
import pytest
from absl import flags

from models.config import T5Config
from runner import checkpoints
from runner import infer as infer_lib
from runner import train as train_lib
from runner import trainer
from scripts import generate as generate_script
from scripts import gin_cli
from scripts import train as train_script

RECIPES = "gin/recipes/turingadvice"

# App. B.2, line 271: "We finetuned T5 on RedditAdvice, using a context length of 1280 and a target
# length of 512."
PAPER_LENGTHS = {"inputs": 1280, "targets": 512}
# Line 359 (footnote 8, §3.2): "Our training set contains 600k pieces of advice".
PAPER_TRAIN_EXAMPLES = 600_000
# App. B.3, line 279: "We optimized our models using AdaFactor"; line 277: "using a crossentropy loss".
PAPER_OPTIMIZER, PAPER_LOSS = "adafactor", "cross_entropy"
# App. B.3, line 279: "for T5-3B, we finetuned for 10 epochs with a learning rate of 2e-3 and batch
# size 128; for T5-11B, we finetuned for 5 epochs with a learning rate of 1e-3 and batch size 128."
# §4, line 131: "T5-3B has 3 billion parameters, and T5-11B has 11 billion parameters": the original
# T5 (T5 1.0; its t5x checkpoint's directory), with T5.1.1 of about the same size the alternative.
PAPER_T5 = {
    "t5_3b": dict(epochs=10, learning_rate=2e-3, batch_size=128, parameters=3e9, t5_1_0_size="3b",
                  t5x_name="t5_3B", t5_1_1_size="xl"),
    "t5_11b": dict(epochs=5, learning_rate=1e-3, batch_size=128, parameters=11e9, t5_1_0_size="11b",
                   t5x_name="t5_11B", t5_1_1_size="xxl"),
}
# App. B.4, line 283: "We use a threshold of p=.95"; no temperature (sampling from the model's
# distribution) and no length of its own (the fine-tuning target length, 512).
PAPER_TOP_P, PAPER_TEMPERATURE = 0.95, 1.0
# §3.1.4, line 123: "generate one piece of advice per model".
PAPER_SAMPLES = 1
TASK = "turingadvice_generation"
# The paper's sizes are round ("3 billion"); T5-3B has 2.85B parameters, T5-11B 11.3B.
PARAMETER_TOLERANCE = 0.1
# Bytes instead of T5's SentencePiece file (a download): every other setting stays the recipe's.
OFFLINE = ("--gin.SENTENCEPIECE_MODEL_PATH=None",)


class _Reached(Exception):
  """Raised where the command's work would begin: everything before it has run."""


@pytest.fixture(scope="module", autouse=True)
def cli_flags():
  """The scripts' flags on absl's FLAGS, as their `__main__` defines them (once per process)."""
  if "gin_file" not in flags.FLAGS:
    gin_cli.define_flags()
  yield
  flags.FLAGS.unparse_flags()
  gin.clear_config()


def _remaining_argv(files, bindings) -> list[str]:
  """Parses the command line `files` + `bindings` into absl's FLAGS as the scripts' `app.run` does."""
  argv = ["script", *(f"--gin_file={f}" for f in files), *bindings]
  flags.FLAGS.unparse_flags()
  gin.clear_config()
  return flags.FLAGS(gin_cli.rewrite_gin_args(argv))


def parse(files, bindings=()) -> None:
  """The gin command line as a script parses it (scripts.train.start), with its checks."""
  gin_cli.start(_remaining_argv(files, bindings))


def macro(name: str):
  return gin.query_parameter(f"%{name}")


def _shape_count(model_config) -> int:
  from models import network  # pylint: disable=g-import-not-at-top
  shapes = jax.eval_shape(lambda: network.init_params(model_config, jax.random.PRNGKey(0)))
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes))


def parameter_count(model_config) -> int:
  """The network's parameters, from the shapes (nothing allocated) of the same network with one
  and two layers a stack: tracing all 24 costs seconds, and every layer of a stack is alike."""
  layers = model_config.num_encoder_layers
  assert model_config.num_decoder_layers == layers
  one, two = (_shape_count(model_config.replace(num_encoder_layers=n, num_decoder_layers=n)) for n in (1, 2))
  return one + (layers - 1) * (two - one)


def run_training_until_start(monkeypatch, files, bindings) -> dict:
  """scripts.train's main on this command line, stopped where parameters would be initialised:
  what reached preflight and `_initialise_or_restore` (the optimizer and initial checkpoint)."""
  seen = {}
  preflight = train_lib.check_settings

  def checked_preflight(**kwargs):
    seen.update(kwargs)
    preflight(**kwargs)

  def reached(manager, config, goal, optimizer, initial_checkpoint_path, *args):
    del manager, goal, args
    seen.update(config=config, optimizer=optimizer, initial_checkpoint_path=initial_checkpoint_path)
    raise _Reached
  monkeypatch.setattr(train_lib, "check_settings", checked_preflight)
  # The recipes start from Google's bucket (gs://t5-data), which cannot be reached here: the check
  # that the initial checkpoint exists is recorded, not made.
  monkeypatch.setattr(train_lib.checkpoints, "check_checkpoint", lambda path, what: seen.update(checked=(what, path)))
  monkeypatch.setattr(train_lib, "_initialise_or_restore", reached)
  # The memory plan is checked against this machine's memory, which a T5-11B recipe does not fit:
  # recorded, not enforced (tests/runner/test_memory_plan.py tests the plan).
  monkeypatch.setattr(train_lib.run_preflight, "check", lambda config, **plan: seen.update(memory_plan=plan))
  with pytest.raises(_Reached):
    train_script.main(_remaining_argv(files, bindings))
  seen["run_config"] = {name: macro(name) for name in
                        ("TASK_FEATURE_LENGTHS", "MIXTURE_OR_TASK_NAME", "OPTIMIZER", "OBJECTIVE",
                         "LEARNING_RATE")}
  seen["schedule"] = gin.get_configurable(trainer.make_schedule)()
  assert seen["memory_plan"]["batch_size"] == seen["batch_size"], seen["memory_plan"]
  if seen["initial_checkpoint_path"]:
    assert seen["checked"] == ("INITIAL_CHECKPOINT_PATH", seen["initial_checkpoint_path"]), seen.get("checked")
  return seen


@pytest.mark.parametrize("recipe", sorted(PAPER_T5))
def test_a_training_recipe_binds_the_papers_numbers(monkeypatch, tmp_path, recipe):
  paper = PAPER_T5[recipe]
  seen = run_training_until_start(monkeypatch, [f"{RECIPES}/{recipe}.gin"],
                                  [*OFFLINE, f"--gin.MODEL_DIR='{tmp_path / 'run'}'"])
  config = seen["run_config"]
  assert config["MIXTURE_OR_TASK_NAME"] == TASK
  assert config["TASK_FEATURE_LENGTHS"] == PAPER_LENGTHS
  assert (config["OPTIMIZER"], config["OBJECTIVE"]) == (PAPER_OPTIMIZER, PAPER_LOSS)
  assert seen["batch_size"] == paper["batch_size"]
  assert seen["train_steps"] == math.ceil(paper["epochs"] * PAPER_TRAIN_EXAMPLES / paper["batch_size"])
  # The learning rate the optimizer gets: the paper's, from the first step to the last.
  assert config["LEARNING_RATE"] == paper["learning_rate"]
  for step in (0, seen["train_steps"] // 2, seen["train_steps"]):
    assert float(seen["schedule"](step)) == pytest.approx(paper["learning_rate"], rel=1e-6)
  # Fine-tuned from the paper's pretrained model: the original T5 of that size.
  assert seen["initial_checkpoint_path"] == (
      f"gs://t5-data/pretrained_models/t5x/{paper['t5x_name']}/checkpoint_1000000")
  # The model is the size's own T5 1.0 file (parsed alone), near the paper's parameter count:
  # ReLU, the tied and rescaled output layer, and dropout as T5 was pretrained (App. B.3, line 279).
  gin.clear_config()
  gin_cli.parse_gin([f"gin/models/t5_1_0/{paper['t5_1_0_size']}.gin"], [], [str(gin_cli.PROJECT_ROOT)])
  assert seen["config"] == seen["model_config"] == gin.get_configurable(T5Config)()
  assert seen["config"].mlp_activations == ("relu",) and seen["config"].logits_via_embedding
  assert seen["config"].dropout_rate == 0.1
  assert parameter_count(seen["config"]) == pytest.approx(paper["parameters"], rel=PARAMETER_TOLERANCE)


@pytest.mark.parametrize("recipe", sorted(PAPER_T5))
def test_a_training_recipe_takes_t5_1_1_as_its_header_says(monkeypatch, tmp_path, recipe):
  """The named alternative: the T5.1.1 model file, dropout and checkpoint of the recipe's header,
  after the recipe; the paper's numbers stay."""
  paper = PAPER_T5[recipe]
  size = paper["t5_1_1_size"]
  checkpoint = f"gs://t5-data/pretrained_models/t5x/t5_1_1_{size}/checkpoint_1000000"
  seen = run_training_until_start(
      monkeypatch, [f"{RECIPES}/{recipe}.gin", f"gin/models/t5_1_1/{size}.gin"],
      [*OFFLINE, "--gin.DROPOUT_RATE=0.1", f"--gin.INITIAL_CHECKPOINT_PATH='{checkpoint}'", "--strict_gin",
       f"--gin.MODEL_DIR='{tmp_path / 'run'}'"])
  assert seen["initial_checkpoint_path"] == checkpoint
  assert (seen["batch_size"], seen["run_config"]["LEARNING_RATE"]) == (paper["batch_size"], paper["learning_rate"])
  gin.clear_config()
  gin_cli.parse_gin([f"gin/models/t5_1_1/{size}.gin"], ["DROPOUT_RATE = 0.1"], [str(gin_cli.PROJECT_ROOT)])
  assert seen["config"] == gin.get_configurable(T5Config)()
  assert seen["config"].mlp_activations == ("gelu", "linear") and not seen["config"].logits_via_embedding
  assert parameter_count(seen["config"]) == pytest.approx(paper["parameters"], rel=PARAMETER_TOLERANCE)


@pytest.mark.parametrize("recipe", sorted(PAPER_T5))
def test_a_training_recipe_runs_as_a_tiny_one_step_smoke_run(monkeypatch, tmp_path, recipe):
  """The recipe's smoke command (its header): the tiny model, bytes, random init, one step of 2
  rows. Every macro resolves, the command line's checks (--strict_gin: every override is read)
  and preflight pass, and the task has training examples; the paper's lengths stay."""
  seen = run_training_until_start(
      monkeypatch, [f"{RECIPES}/{recipe}.gin", "gin/models/t5_1_1/tiny.gin"],
      [*OFFLINE, "--gin.INITIAL_CHECKPOINT_PATH=None", "--gin.TRAIN_STEPS=1", "--gin.BATCH_SIZE=2",
       "--strict_gin", f"--gin.MODEL_DIR='{tmp_path / 'run'}'"])
  assert (seen["train_steps"], seen["batch_size"], seen["initial_checkpoint_path"]) == (1, 2, None)
  assert seen["config"].emb_dim == 64  # tiny.gin's, over the recipe's T5 1.0 size
  assert seen["run_config"]["TASK_FEATURE_LENGTHS"] == PAPER_LENGTHS


def test_the_generation_recipe_samples_as_the_paper_does(monkeypatch, tmp_path):
  """scripts.generate with the generation recipe on a file of situations (the tiny model standing
  in for a trained one), stopped where sampling begins: the sampler gets the paper's settings."""
  seen = {}

  def loaded(checkpoint_path, model_config, *args):
    del args
    seen.update(checkpoint_path=checkpoint_path)
    return (model_config, None), None

  def sampling(config, params, vocabulary, input_ids, rng, **kwargs):
    del config, params, vocabulary, rng
    seen.update(kwargs, input_length=input_ids.shape[1])
    raise _Reached
  monkeypatch.setattr(infer_lib, "_load", loaded)
  monkeypatch.setattr(infer_lib, "generate", sampling)
  monkeypatch.setattr(checkpoints, "check_checkpoint", lambda *args: None)  # no checkpoint: `_load` stands in
  situations = tmp_path / "situations.jsonl"
  situations.write_text(json.dumps({"title": "How do I ask for a raise?", "subreddit": "Advice",
                                    "selftext": "I have worked here three years.\n\nWhat should I say?"}) + "\n")
  argv = _remaining_argv(["gin/models/t5_1_1/tiny.gin", f"{RECIPES}/generate.gin"],
                         [*OFFLINE, "--strict_gin", f"--gin.CHECKPOINT_PATH='{tmp_path}'",
                          f"--gin.INFER_OUTPUT_FILE='{tmp_path / 'advice.jsonl'}'",
                          f"--gin.INPUT_FILE='{situations}'"])
  with pytest.raises(_Reached):
    generate_script.main(argv)
  assert macro("MIXTURE_OR_TASK_NAME") == TASK
  assert (seen["top_p"], seen["temperature"], seen["num_samples"]) == (PAPER_TOP_P, PAPER_TEMPERATURE,
                                                                       PAPER_SAMPLES)
  assert seen["reward_model"] is None  # no best-of-N reranking
  assert (seen["input_length"], seen["max_length"]) == (PAPER_LENGTHS["inputs"], PAPER_LENGTHS["targets"])


def test_the_recipes_use_t5s_sentencepiece_vocabulary():
  """Without the offline override, the recipes read T5's SentencePiece model (lengths are in its
  tokens); the gin command line accepts every recipe as a user passes it."""
  # With the paths a user must give (MODEL_DIR; CHECKPOINT_PATH and INFER_OUTPUT_FILE to generate).
  for files, paths in (([f"{RECIPES}/t5_3b.gin"], ["--gin.MODEL_DIR='/runs/a'"]),
                       ([f"{RECIPES}/t5_11b.gin"], ["--gin.MODEL_DIR='/runs/b'"]),
                       (["gin/models/t5_1_0/11b.gin", f"{RECIPES}/generate.gin"],
                        ["--gin.CHECKPOINT_PATH='/runs/b'", "--gin.INFER_OUTPUT_FILE='/runs/b/advice.jsonl'"])):
    parse(files, paths)
    assert macro("SENTENCEPIECE_MODEL_PATH") == "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"
    assert str(gin.query_parameter("t5_tasks.vocab.get_vocabulary.sentencepiece_model_path")) == \
        "%SENTENCEPIECE_MODEL_PATH"


def test_the_validation_perplexity_command_parses():
  """Model selection by validation perplexity (line 357): the evaluation command of task.gin."""
  parse(["gin/models/t5_1_0/3b.gin", "gin/runs/eval.gin", f"{RECIPES}/task.gin"],
        ["--gin.SPLIT='validation'", "--gin.CHECKPOINT_PATH='/runs/turingadvice-t5-3b'",
         "--gin.EVAL_OUTPUT_DIR='/runs/turingadvice-t5-3b/eval-validation'"])
  assert (macro("MIXTURE_OR_TASK_NAME"), macro("SPLIT"), macro("TASK_FEATURE_LENGTHS")) == (
      TASK, "validation", PAPER_LENGTHS)
