"""The HEAP recipes (gin/recipes/heap/) bind the paper's protocols and Table 4's numbers.

Each training recipe is parsed and run as a user's command line is (scripts.train's `main`, as in
test_recipes_turingadvice), on the tiny model, and stopped where parameters would be initialised:
what reaches the trainer (mixture, objective, batch, accumulation, learning rate over the run)
is checked against `heap.TABLE_4`, which tests/t5_tasks/test_sources_heap.py checks against the
paper's own Table 4. docs/heap.md runs the cross-cluster recipe and its evaluation end to end.
"""
import re

import gin
import pytest
from absl import flags

from scripts import gin_cli
from scripts import recorded_inputs
from t5_tasks import families
from t5_tasks import heap
from tests.conftest import PROJECT_ROOT
from tests.scripts.test_recipes_turingadvice import OFFLINE
from tests.scripts.test_recipes_turingadvice import _remaining_argv
from tests.scripts.test_recipes_turingadvice import cli_flags  # pylint: disable=unused-import
from tests.scripts.test_recipes_turingadvice import run_training_until_start
from tests.t5_tasks.test_tasks import write_heap_fixtures

RECIPES = "gin/recipes/heap"
MICROBATCH = 8  # reward_model.gin: rows per microbatch; Table 4's accumulation multiplies it
# recipe -> (the mixture it trains on, the Table 4 row it binds)
PROTOCOLS = {
    "single_task": ("heap_ag", heap.TABLE_4["single_task"]["AG"]),
    "multitask": ("heap_multitask", heap.TABLE_4["multitask"]),
    "cross_task": ("heap_cross_task_av", heap.TABLE_4["cross_task"]["AV"]),
    # Table 4 has no cross-cluster rows: the target's cross-task row.
    "cross_cluster": ("heap_cross_cluster_hate_speech_cng", heap.TABLE_4["cross_task"]["CNG"]),
}


@pytest.mark.parametrize("recipe", sorted(PROTOCOLS))
def test_a_protocol_recipe_binds_table_4(monkeypatch, tmp_path, recipe):
  mixture, row = PROTOCOLS[recipe]
  files = write_heap_fixtures(tmp_path)  # the sources with no quickstart file (multi-task reads all)
  steps = 50
  seen = run_training_until_start(
      monkeypatch, ["gin/models/t5_1_1/tiny.gin", "gin/runs/finetune.gin", f"{RECIPES}/{recipe}.gin"],
      [f"--gin.TRAIN_STEPS={steps}", f"--gin.MODEL_DIR='{tmp_path / 'run'}'", "--strict_gin",
       f"--gin.t5_tasks.tasks.data_files.files={files!r}", *OFFLINE])
  config = seen["run_config"]
  assert config["MIXTURE_OR_TASK_NAME"] == mixture
  assert config["OBJECTIVE"] == "pairwise"  # §4.1: log(1 + exp(r_bad - r_good))
  assert (seen["accumulation_steps"], seen["batch_size"]) == (
      row.gradient_accumulation, MICROBATCH * row.gradient_accumulation)
  assert config["LEARNING_RATE"] == row.learning_rate
  # Linear decay from Table 4's rate to 0 at the last step, no warm-up.
  assert [float(seen["schedule"](s)) for s in (0, steps // 2, steps)] == pytest.approx(
      [row.learning_rate, row.learning_rate / 2, 0.0], rel=1e-6, abs=1e-12)  # float32
  assert families.heap_split() == ("paper", 0)  # §3's random 80/10/10
  assert families.heap_instruction()[0] == "paper"  # Table 5's phrasing
  assert seen["initial_checkpoint_path"] is None and seen["config"].emb_dim == 64
  gin.clear_config()


T5_SENTENCEPIECE = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"


@pytest.mark.parametrize("recipe", sorted(PROTOCOLS) + ["evaluate"])
def test_every_recipe_reads_t5s_sentencepiece_vocabulary(recipe):
  """A pretrained T5 fine-tuned or scored on byte ids reads noise: each recipe binds T5's model."""
  run = "gin/runs/eval.gin" if recipe == "evaluate" else "gin/runs/finetune.gin"
  _remaining_argv(["gin/models/t5_1_1/tiny.gin", run, f"{RECIPES}/{recipe}.gin"], [])
  gin_cli.parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  assert recorded_inputs.macro_value("SENTENCEPIECE_MODEL_PATH") == T5_SENTENCEPIECE
  bound = gin.query_parameter(recorded_inputs.VOCABULARY_PARAMETER)
  assert bound.selector == "SENTENCEPIECE_MODEL_PATH" or bound.scoped_configurable_fn() == T5_SENTENCEPIECE
  gin.clear_config()


HEAP_GIN_FILES = sorted(PROJECT_ROOT.glob("gin/recipes/heap/*.gin")) + sorted(PROJECT_ROOT.glob("gin/mixtures/heap_*.gin"))


@pytest.mark.parametrize("path", HEAP_GIN_FILES, ids=lambda p: p.name)
def test_a_heap_gin_file_names_files_that_exist_and_the_papers_authors(path):
  text = path.read_text()
  named = set(re.findall(r"gin/[\w/]+\.gin", text))
  assert [name for name in named if not (PROJECT_ROOT / name).is_file()] == []
  paper = PROJECT_ROOT.parent / "shared" / "papers" / "heap.txt"
  if paper.is_file() and ("et al." in text or " & " in text):
    authors = paper.read_text(encoding="utf-8").splitlines()[2]  # "Shuhaib Mehri¹ and Vered Shwartz^{1,2} ..."
    cited = re.search(r"\(([A-Z][\w-]+)(?: & ([A-Z][\w-]+))?(?: et al\.)?", text)
    assert cited and all(name in authors for name in cited.groups() if name), (cited and cited.group(0), authors)


def test_the_evaluation_recipe_tests_one_criterion_alone():
  """§4.2: each model is tested on "the test set composed of only t's instances"."""
  text = (PROJECT_ROOT / RECIPES / "evaluate.gin").read_text()
  name = re.search(r"^MIXTURE_OR_TASK_NAME = '(\w+)'", text, re.M).group(1)
  assert name == "heap_cng" == heap.task_name(re.search(r"heap_cross_cluster_hate_speech_(\w+)'",
                                                        (PROJECT_ROOT / RECIPES / "cross_cluster.gin").read_text()).group(1))
