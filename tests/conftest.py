"""Shared test fixtures: where the real data is, and skipping when it is absent; one JAX
compilation cache for the whole run.

The suite compiles the same tiny steps many times (each `train`, `evaluate` and script process
jits its own functions). JAX's persistent cache, one directory for every xdist worker and every
subprocess of a run, compiles each program once; what runs is the same executable either way.
Compilation is still half of the in-process tests' time (about 1,000 programs), so XLA compiles
for speed of compilation (FAST_COMPILE, in XLA_FLAGS for every worker and subprocess): LLVM's
optimisations change how fast the tiny programs run, not what they compute (~20% less CPU). XLA's
older loop emitters, with LLVM's code generated on one thread, compile a tiny training step in
half the CPU time (3.6 -> 1.5 s; the step runs ~10% slower, with the same loss to 7 digits).
"""
import contextlib
import gc
import os
import pathlib
import shutil
import tempfile
import uuid

import pytest

import scripts  # pylint: disable=unused-import  # its collector thresholds, for the workers too
from tests.helpers import leftovers

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
_CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1")


def not_the_source(folder, names) -> set[str]:
  """`shutil.copytree`'s ignore for a copy of the project (the README's workspace, the task-family
  walk-through): outputs, caches, the venv and git stay behind. The bytecode comes along (`make test`
  writes it first; Python checks it against each source's time and size), so the copy's commands do
  not compile the project again where PYTHONDONTWRITEBYTECODE is set."""
  left_out = {".git", ".venv", "runs", "build", "tmp", "tpu_logs"} if folder == str(PROJECT_ROOT) else set()
  return {n for n in names if n in left_out or n.endswith(".egg-info") or n in (".pytest_cache", ".hypothesis")}


def xla_flags(devices: int | None = None) -> str:
  """XLA_FLAGS for a test's subprocess: the suite's FAST_COMPILE, and `devices` simulated CPU devices."""
  return FAST_COMPILE + (f" --xla_force_host_platform_device_count={devices}" if devices else "")


def pytest_configure(config):
  """In the controlling process, before JAX is imported and before xdist starts its workers
  (which inherit the environment): a fresh cache directory for this run, and FAST_COMPILE."""
  if FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()
  # Two workers and their subprocesses share 2 cores: a second torch (OpenMP) thread spin-waits
  # for the busy one (1,000 tiny torch Linear calls: 2.6 s on a loaded machine, 0.05 s with one
  # thread). The Hugging Face references compute the same with one.
  os.environ.setdefault("OMP_NUM_THREADS", "1")
  if not hasattr(config, "workerinput"):  # every worker and subprocess inherits this run's own marker
    os.environ[leftovers.TEST_SESSION_VARIABLE] = uuid.uuid4().hex
  if hasattr(config, "workerinput") or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return
  config.jax_cache_dir = tempfile.mkdtemp(prefix="jax_compilation_cache_")
  os.environ.update(JAX_COMPILATION_CACHE_DIR=config.jax_cache_dir,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


def pytest_collection_finish(session):
  """Each worker has imported every test module (TensorFlow, JAX, torch, transformers): what they
  made lives until the run ends, so no collection walks it again (scripts/__init__.py says why)."""
  del session
  gc.freeze()


# The modules that take longest (seconds of one fresh-clone `make test`, 2 cores), started first:
# xdist hands out whole modules (--dist loadfile), and one of these handed out last keeps one
# worker busy minutes after the other has finished (the Makefile turns off xdist's own order,
# most tests first, which put the multi-process modules last).
LONGEST_MODULES = (
    "tests/test_readme.py",  # 455
    "tests/runner/test_multi_process.py",  # 232
    "tests/runner/test_pod_bucket.py",  # 153
    "tests/runner/test_train_entry.py",  # 84
    "tests/scripts/test_sentencepiece_run.py",  # 77
    "tests/runner/test_bucket_runs.py",  # 80
    "tests/scripts/test_one_line_refusals.py",  # 65 (alone)
    "tests/scripts/test_benchmark.py",  # 54
    "tests/scripts/test_best_of_n.py",  # 48
    "tests/runner/test_multi_process_evaluation.py",  # 41
    "tests/runner/test_evaluate.py",  # 40
    "tests/scripts/test_launch_tpu_pod_rehearsal.py",  # 40
    "tests/runner/test_host_memory.py",  # 37
    "tests/t5_tasks/test_tfds_parity.py",  # 36
    "tests/scripts/test_help.py",  # 32 (alone)
    "tests/runner/test_learning.py",  # 31
)


def pytest_collection_modifyitems(config, items):
  del config
  def rank(item):
    module = item.nodeid.split("::")[0]
    return LONGEST_MODULES.index(module) if module in LONGEST_MODULES else len(LONGEST_MODULES)
  items.sort(key=rank)  # stable: the rest keep their order


def pytest_sessionfinish(session, exitstatus):
  """In the controlling process, once the workers have ended: a process the suite started that
  still runs (its environment holds this run's marker) is named, ended, and fails the run."""
  del exitstatus
  if hasattr(session.config, "workerinput"):
    return
  if leftovers.main(os.environ[leftovers.TEST_SESSION_VARIABLE]):
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
  if getattr(config, "jax_cache_dir", None):
    shutil.rmtree(config.jax_cache_dir, ignore_errors=True)
    for name in _CACHE_VARIABLES:
      os.environ.pop(name, None)


@pytest.fixture
def shared_data():
  """Path to ../shared/data; skips the test when it is absent (a user's fresh clone)."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"real data not found at {SHARED_DATA} (it lives beside the project, never in it)")
  return SHARED_DATA


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
  """A local Cloud Storage emulator (scripts/gcs_emulator.py) with a bucket `runs`, for the session."""
  from scripts import gcs_emulator as emulators  # pylint: disable=g-import-not-at-top
  emulator = emulators.start(tmp_path_factory.mktemp("gcs"))
  yield emulator
  emulator.stop()


@contextlib.contextmanager
def gs_traffic_to(emulator, monkeypatch):
  """This process's gs:// traffic routed to `emulator` (STORAGE_EMULATOR_HOST, as a subprocess
  given `emulator.env` routes its own) until the block ends and `monkeypatch` is undone."""
  import gcsfs  # pylint: disable=g-import-not-at-top
  import storage  # pylint: disable=g-import-not-at-top
  for variable in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"):
    monkeypatch.delenv(variable, raising=False)
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
  storage.route_gs_traffic()
  gcsfs.GCSFileSystem.clear_instance_cache()  # one made before the emulator would go to Google
  try:
    yield
  finally:
    gcsfs.GCSFileSystem.clear_instance_cache()


@pytest.fixture
def bucket(gcs_emulator, monkeypatch, request):
  """A fresh `gs://runs/<test>` prefix on the emulator, with this process's gs:// traffic routed there."""
  with gs_traffic_to(gcs_emulator, monkeypatch):
    yield f"gs://runs/{request.node.name.replace('[', '-').rstrip(']')}"
