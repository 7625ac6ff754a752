"""Mixtures: membership, capped size rates, gin files, and datasets from the quickstart data."""
import importlib.util
import pathlib

import gin
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  (registers the tasks and mixtures)
from t5_tasks import mixtures
from t5_tasks import tasks
from t5_tasks import heap

GIN_DIR = pathlib.Path(__file__).resolve().parents[2] / "gin" / "mixtures"
_spec = importlib.util.spec_from_file_location("t5_tasks_test_tasks",
                                               pathlib.Path(__file__).with_name("test_tasks.py"))
test_tasks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(test_tasks)


@pytest.fixture
def heap_files(tmp_path):
  files = test_tasks.write_heap_fixtures(tmp_path)
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.tasks.data_files.files", files)
  yield files
  gin.clear_config()


def _members(name):
  return {t.name for t in seqio.get_mixture_or_task(name).tasks}


def test_mixture_membership():
  every = {heap.task_name(c) for c in heap.HEAP_CRITERIA}
  assert len(every) == 22 and _members("heap_multitask") == every  # HEAP only: no summarize
  for criterion in heap.HEAP_CRITERIA:
    assert _members(f"heap_cross_task_{criterion.lower()}") == every - {heap.task_name(criterion)}
  for cluster, members in heap.CLUSTERS.items():  # Table 3's C^{/t}: the target's own cluster
    names = {heap.task_name(c) for c in members}
    assert _members(f"heap_cluster_{cluster}") == names
    for c in members:
      assert _members(f"heap_cross_cluster_{cluster}_{c.lower()}") == names - {heap.task_name(c)}
  assert _members("heap_cross_cluster_hate_speech_cng") == {
      "heap_bcn", "heap_ccn", "heap_cnsp", "heap_cnsu", "heap_cni", "heap_cno", "heap_cnst", "heap_hso"}
  heap_mixtures = [m for m in seqio.MixtureRegistry.names() if m.startswith("heap_")]
  assert all(_members(m) <= every for m in heap_mixtures)
  assert _members("generation_and_cloze") == {
      "turingadvice_generation", "timedial_cloze_full", "timedial_cloze_local",
      "timedial_cloze_target", "timedial_weak_supervision", "asq_intent_cloze"}
  families = {"turingadvice_generation", "timedial_weak_supervision", "asq_intent_cloze",
              "summarize_feedback_preference"}
  assert families <= _members("quickstart")


def test_rates_are_sizes_with_a_gin_cap():
  task = seqio.get_mixture_or_task("asq_intent_cloze")
  size = len(test_tasks.task_examples("asq_intent_cloze", "train"))
  assert mixtures.size_rate(task) == size
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.mixtures.size_rate.cap", size - 3)
  try:
    mixture = seqio.get_mixture_or_task("generation_and_cloze")
    assert mixture.get_rate(task) == size - 3
  finally:
    gin.clear_config()
  timedial = seqio.get_mixture_or_task("timedial_cloze_full")  # a test set only
  test_size = len(test_tasks.task_examples("timedial_cloze_full", "test"))
  assert mixtures.size_rate(timedial) == test_size


# Building a mixture's dataset builds each of its tasks' (about 1 s each); every task's own dataset
# is checked in test_tasks.py, so a mixture of each kind is built here: HEAP's (one cluster, on
# quickstart files), the generation-first one and the demo's.
@pytest.mark.parametrize("name", ["generation_and_cloze", "heap_cluster_hate_speech", "quickstart"])
def test_mixtures_yield_examples(name, heap_files):
  del heap_files
  ds = seqio.get_mixture_or_task(name).get_dataset(test_tasks.LENGTHS, split="train",
                                                   shuffle=False, num_epochs=1)
  examples = list(ds.take(8).as_numpy_iterator())
  assert examples
  for ex in examples:
    assert set(ex) == {"inputs", "targets", "candidates", "candidate_labels"}
    assert ex["inputs"][-1] == test_tasks.EOS and ex["targets"][-1] == test_tasks.EOS
    assert ex["candidate_labels"].max() == 1


@gin.configurable
def _consume(name=gin.REQUIRED):
  return name


@pytest.mark.parametrize("path", sorted(GIN_DIR.glob("*.gin")), ids=lambda p: p.name)
def test_gin_files_name_a_registered_mixture(path):
  text = path.read_text()
  assert text.startswith("# How to mix tasks"), "every mixture gin file documents itself"
  gin.clear_config()
  try:
    gin.parse_config(text)
    gin.parse_config("_consume.name = %MIXTURE_OR_TASK_NAME")
    name = _consume()
    assert name in seqio.MixtureRegistry.names()
    assert str(gin.query_parameter("t5_tasks.mixtures.size_rate.cap")) == "%MIXTURE_RATE_CAP"
    assert gin.query_parameter("MIXTURE_RATE_CAP/macro.value") > 0
  finally:
    gin.clear_config()


def test_register_mixture_rejects_unknown_tasks():
  with pytest.raises(ValueError, match=r"unknown tasks \['no_such_task'\]"):
    mixtures.register_mixture("bad_mix", ["asq_intent_cloze", "no_such_task"])
  with pytest.raises(ValueError, match="already a task"):
    mixtures.register_mixture("asq_intent_cloze", ["asq_intent_cloze"])
  assert tasks.PREFERENCE_TASKS[0] in seqio.TaskRegistry.names()
