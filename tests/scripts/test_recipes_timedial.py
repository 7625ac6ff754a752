"""The TimeDial recipes (gin/recipes/timedial/) bind the paper's protocol and model: zero-shot
scoring with the full context, span-corruption targets and span-length normalisation (TimeDial
§4.1.3, §5) on the original T5 (T5 1.0), and fine-tuning on weakly supervised dialogs (§4.1.1,
§4.3, Table 4), which also runs on the quickstart dialogs with the tiny model."""
import json
import math
import re

import gin
import pytest

from models.config import T5Config
from runner import run_dir
from scripts import gin_cli
from scripts import train as train_script
from t5_tasks import preprocessors
from tests.conftest import PROJECT_ROOT
from tests.helpers.cli import run_script
from tests.scripts.test_recipes_turingadvice import cli_flags  # pylint: disable=unused-import
from tests.scripts.test_recipes_turingadvice import OFFLINE, macro, parse, run_training_until_start

ZERO_SHOT = "gin/recipes/timedial/zero_shot.gin"
FINETUNE = "gin/recipes/timedial/finetune.gin"
PAPER = (PROJECT_ROOT.parent / "shared" / "papers" / "timedial.txt")
# §4.3 ("by masking each temporal span in each dialog, we obtain 14.5k training instances"), when
# the paper's text is not at hand.
IN_DOMAIN_TRAIN = 14_500
EPOCHS = 10  # the recipe's choice (the paper's steps are in an appendix the text lacks)


def _model_file_config(path: str, bindings=()) -> T5Config:
  gin.clear_config()
  gin_cli.parse_gin([path], list(bindings), [str(gin_cli.PROJECT_ROOT)])
  return gin.get_configurable(T5Config)()


def _in_domain_train_instances() -> int:
  if not PAPER.exists():
    return IN_DOMAIN_TRAIN
  found = re.findall(r"we obtain (\d+(?:\.\d+)?)k training\s*instances", PAPER.read_text())
  assert found, "TimeDial §4.3's in-domain training count not found in the paper's text"
  return round(float(found[0]) * 1000)


def test_zero_shot_recipe_binds_the_papers_protocol_and_model():
  parse([ZERO_SHOT], [*OFFLINE, "--gin.CHECKPOINT_PATH='/ckpt'", "--gin.EVAL_OUTPUT_DIR='/out'",
                      "--strict_gin"])
  assert macro("MIXTURE_OR_TASK_NAME") == "timedial_cloze_full"
  assert macro("NORMALIZATION") == "token"
  assert preprocessors.timedial_target_format() == "span_corruption"
  assert macro("SPLIT") == "test"
  config = gin.get_configurable(T5Config)()
  # Table 5's T5 is the original: T5 1.0 large by default.
  assert config == _model_file_config("gin/models/t5_1_0/large.gin")
  assert config.mlp_activations == ("relu",) and config.logits_via_embedding and config.emb_dim == 1024


@pytest.mark.parametrize("model_file", ["gin/models/t5_1_0/base.gin", "gin/models/t5_1_1/large.gin",
                                        "gin/models/t5_1_1/tiny.gin"])
def test_a_model_file_after_the_zero_shot_recipe_replaces_its_model(model_file):
  """Table 5's base row, the T5.1.1 alternative, the tiny model: the header's way to change it."""
  parse([ZERO_SHOT, model_file], [*OFFLINE, "--gin.CHECKPOINT_PATH='/ckpt'",
                                  "--gin.EVAL_OUTPUT_DIR='/out'", "--strict_gin"])
  config = gin.get_configurable(T5Config)()
  assert macro("MIXTURE_OR_TASK_NAME") == "timedial_cloze_full"
  assert config == _model_file_config(model_file)


def test_finetune_recipe_binds_the_papers_training(monkeypatch, tmp_path):
  seen = run_training_until_start(monkeypatch, [FINETUNE], [*OFFLINE, f"--gin.MODEL_DIR='{tmp_path / 'run'}'"])
  config = seen["run_config"]
  # §4.1.1/§4.1.3: trained to generate the masked span of weakly supervised dialogs.
  assert config["MIXTURE_OR_TASK_NAME"] == "timedial_weak_supervision"
  assert config["OBJECTIVE"] == "cross_entropy"
  assert preprocessors.timedial_target_format() == "span_corruption"
  assert config["TASK_FEATURE_LENGTHS"] == {"inputs": 512, "targets": 32}
  # T5's fine-tuning settings: Adafactor at a constant 1e-3, batch 128.
  assert (config["OPTIMIZER"], config["LEARNING_RATE"], seen["batch_size"]) == ("adafactor", 0.001, 128)
  for step in (0, seen["train_steps"]):
    assert float(seen["schedule"](step)) == pytest.approx(0.001, rel=1e-6)
  assert seen["train_steps"] == math.ceil(EPOCHS * _in_domain_train_instances() / 128) == 1133
  assert (macro("EVAL_EVERY"), macro("EVAL_SPLIT"), macro("BEST_METRIC"), macro("BEST_MODE")) == (
      100, "validation", "timedial_weak_supervision/accuracy", "max")
  # The paper's model, from its pretrained t5x checkpoint, with T5's fine-tuning dropout.
  assert seen["initial_checkpoint_path"] == "gs://t5-data/pretrained_models/t5x/t5_large/checkpoint_1000700"
  assert seen["config"] == _model_file_config("gin/models/t5_1_0/large.gin")
  assert seen["config"].dropout_rate == 0.1


def test_finetune_recipe_trains_and_keeps_the_best_on_the_quickstart_dialogs(tmp_path):
  """The header's smoke run: the tiny model on the quickstart dialogs, 2 steps, evaluated on the
  dev split at step 2, the best checkpoint kept (a BEST_METRIC the evaluation does not report
  would stop the run before it starts)."""
  model_dir = tmp_path / "run"
  smoke = [f"--gin_file={FINETUNE}", "--gin_file=gin/models/t5_1_1/tiny.gin", *OFFLINE,
           "--gin.INITIAL_CHECKPOINT_PATH=None", "--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=4",
           "--gin.EVAL_EVERY=2", f"--gin.MODEL_DIR='{model_dir}'", "--strict_gin"]
  trained = run_script(train_script.main, smoke)
  assert trained.code == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
  lines = [json.loads(line) for line in (model_dir / run_dir.EVAL_METRICS).read_text().splitlines()]
  assert [line["step"] for line in lines] == [2]
  accuracy = lines[0]["metrics"]["timedial_weak_supervision/accuracy"]
  assert 0.0 <= accuracy <= 1.0
  assert (model_dir / run_dir.BEST).is_dir()
  recorded = json.loads((model_dir / run_dir.MODEL_CONFIG).read_text())
  assert recorded["emb_dim"] == 64 and recorded["dropout_rate"] == 0.0  # tiny.gin's, over large's
