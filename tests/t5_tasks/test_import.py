"""`import t5_tasks` registers every task and mixture, silently, in under 5 seconds."""
import json
import subprocess
import sys

_PROGRAM = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
if sys.argv[1] == "seqio_first":
  import seqio
  wall, cpu = time.perf_counter(), time.process_time()
import t5_tasks
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
import seqio
print(json.dumps({"wall": wall, "cpu": cpu, "tasks": sorted(seqio.TaskRegistry.names()),
                  "mixtures": sorted(seqio.MixtureRegistry.names())}))
"""


def _import_in_subprocess(order="t5_tasks_alone"):
  done = subprocess.run([sys.executable, "-c", _PROGRAM, order], capture_output=True, text=True,
                        timeout=120, check=True)
  lines = done.stdout.splitlines()
  assert len(lines) == 1, f"import printed to stdout: {done.stdout!r}"
  if order == "t5_tasks_alone":  # else seqio's own import logs TensorFlow's start-up lines
    assert done.stderr == "", f"import printed to stderr: {done.stderr!r}"
  return json.loads(lines[0])


def test_import_registers_everything_silently_and_fast():
  # Nearly all of it is TensorFlow's import (through seqio), whose wall time doubles when
  # other processes share the cores: the import's CPU time is the measure, best of three.
  runs = [_import_in_subprocess()]
  while runs[-1]["cpu"] >= 5 and len(runs) < 3:
    runs.append(_import_in_subprocess())
  result = min(runs, key=lambda r: r["cpu"])
  assert result["cpu"] < 5, [(r["wall"], r["cpu"]) for r in runs]
  from t5_tasks.sources import heap  # pylint: disable=g-import-not-at-top
  expected_tasks = {"turingadvice_generation", "timedial_cloze_full", "timedial_cloze_local",
                    "timedial_cloze_target", "timedial_weak_supervision", "asq_intent_cloze",
                    "summarize_feedback_preference"} | {f"heap_{c}" for c in heap.HEAP_CRITERIA}
  tfds_variants = {f"{t}_tfds" for t in expected_tasks - {"timedial_weak_supervision"}}
  assert set(result["tasks"]) == expected_tasks | tfds_variants
  expected_mixtures = {"generation_and_cloze", "heap_multitask", "quickstart",
                       "heap_cluster_context", "heap_cluster_no_context",
                       "heap_leave_out_cluster_context", "heap_leave_out_cluster_no_context"} | {
                           f"heap_leave_out_{c}" for c in heap.HEAP_CRITERIA}
  assert set(result["mixtures"]) == expected_mixtures


def test_own_import_work_is_small_once_seqio_is_loaded():
  own = _import_in_subprocess("seqio_first")
  assert own["wall"] < 0.5, own["wall"]
