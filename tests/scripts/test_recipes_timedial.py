"""The TimeDial recipe (gin/recipes/timedial/zero_shot.gin) binds the paper's protocol: the task
with the full context, span-corruption targets, span-length normalisation (TimeDial §4.1.3, §5)."""
import gin

from t5_tasks import preprocessors
from tests.scripts.test_recipes_turingadvice import cli_flags, parse  # pylint: disable=unused-import

RECIPE = "gin/recipes/timedial/zero_shot.gin"


def test_zero_shot_recipe_binds_the_papers_protocol():
  parse(["gin/models/t5_1_1/tiny.gin", RECIPE],
        ["--gin.SENTENCEPIECE_MODEL_PATH=None", "--gin.CHECKPOINT_PATH='/ckpt'",
         "--gin.EVAL_OUTPUT_DIR='/out'", "--strict_gin"])
  assert gin.query_parameter("%MIXTURE_OR_TASK_NAME") == "timedial_cloze_full"
  assert gin.query_parameter("%NORMALIZATION") == "token"
  assert preprocessors.timedial_target_format() == "span_corruption"
  assert gin.query_parameter("%SPLIT") == "test"
