"""`import t5_tasks` registers every task and mixture, silently.

How long the import takes (nearly all of it TensorFlow's import, through seqio) is measured by
`scripts/benchmark.py --suites=import`, not asserted here.
"""
import json
import subprocess
import sys

_PROGRAM = """
import json
import sys
import t5_tasks
import seqio
# What Keras would load for features unused here, and scipy.stats (imported where a metric needs it).
unused = ("sklearn", "matplotlib", "scipy.stats")
loaded_by_the_import = sorted(name for name in sys.modules if name.startswith(unused))
from t5_tasks.baselines import tfidf_advice  # scikit-learn, after the import kept it from Keras
from runner import report  # matplotlib's pyplot, likewise
from t5_tasks import metrics
print(json.dumps({"tasks": sorted(seqio.TaskRegistry.names()),
                  "mixtures": sorted(seqio.MixtureRegistry.names()),
                  "unused_loaded_by_the_import": loaded_by_the_import,
                  "sklearn_afterwards": type(tfidf_advice.neighbors.NearestNeighbors()).__module__,
                  "pyplot_afterwards": report.plt.figure().__module__,
                  "spearman_afterwards": metrics.spearman([1, 2, 3, 4], [1, 3, 2, 4], num_bootstrap=10).value}))
"""


def test_import_registers_everything_silently():
  done = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=120,
                        check=True)
  lines = done.stdout.splitlines()
  assert len(lines) == 1, f"import printed to stdout: {done.stdout!r}"
  assert done.stderr == "", f"import printed to stderr: {done.stderr!r}"
  result = json.loads(lines[0])
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  expected_tasks = {"turingadvice_generation", "timedial_cloze_full", "timedial_cloze_local",
                    "timedial_cloze_target", "timedial_weak_supervision", "asq_intent_cloze",
                    "summarize_feedback_preference", "summarize_feedback_sft"} | {
                        heap.task_name(c) for c in heap.HEAP_CRITERIA}
  files_only = {"timedial_weak_supervision", "summarize_feedback_sft"}  # no TFDS builder
  tfds_variants = {f"{t}_tfds" for t in expected_tasks - files_only}
  assert set(result["tasks"]) == expected_tasks | tfds_variants
  expected_mixtures = {"generation_and_cloze", "quickstart", "heap_multitask"} | {
      f"heap_cross_task_{c.lower()}" for c in heap.HEAP_CRITERIA} | {
          f"heap_cluster_{k}" for k in heap.CLUSTERS} | {
              f"heap_cross_cluster_{k}_{c.lower()}" for k, members in heap.CLUSTERS.items() for c in members}
  assert set(result["mixtures"]) == expected_mixtures
  # Keras's scikit-learn wrappers and image plots are not loaded (t5_tasks/__init__.py), nor scipy.stats
  # (t5_tasks/metrics.py); each works when imported afterwards.
  assert result["unused_loaded_by_the_import"] == []
  assert result["sklearn_afterwards"] == "sklearn.neighbors._unsupervised"
  assert result["pyplot_afterwards"] == "matplotlib.figure"
  assert abs(result["spearman_afterwards"] - 0.8) < 1e-12  # 1 - 6 * 2 / (4 * 15): two adjacent ranks swapped
