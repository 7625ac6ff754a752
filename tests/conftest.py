"""Shared test fixtures: where the real data is, and skipping when it is absent; one JAX
compilation cache for the whole run.

The suite compiles the same tiny steps many times (each `train`, `evaluate` and script process
jits its own functions). JAX's persistent cache, one directory for every xdist worker and every
subprocess of a run, compiles each program once; what runs is the same executable either way.
"""
import os
import pathlib
import shutil
import tempfile

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
_CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def pytest_configure(config):
  """In the controlling process, before JAX is imported and before xdist starts its workers
  (which inherit the environment): a fresh cache directory for this run."""
  if hasattr(config, "workerinput") or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return
  config.jax_cache_dir = tempfile.mkdtemp(prefix="jax_compilation_cache_")
  os.environ.update(JAX_COMPILATION_CACHE_DIR=config.jax_cache_dir,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


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
