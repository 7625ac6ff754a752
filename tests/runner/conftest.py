"""Running JAX code in a fresh interpreter: with 8 simulated CPU devices, or to kill it mid-run.

The device count of a process is fixed when JAX starts, so multi-device checks run in
subprocesses; they share the run's persistent compilation cache (tests/conftest.py).
"""
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import PROJECT_ROOT, xla_flags


@pytest.fixture(scope="session")
def compilation_cache(tmp_path_factory):
  """The run's JAX compilation cache (tests/conftest.py), for the subprocesses' environment."""
  return os.environ.get("JAX_COMPILATION_CACHE_DIR") or tmp_path_factory.mktemp("jax_compilation_cache")


def python_runner(cache_dir, cwd):
  """run(code, devices=1, expect_returncode=0) -> stdout of `code` run in a fresh interpreter in `cwd`."""
  def run(code, devices=1, expect_returncode=0):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), JAX_PLATFORMS="cpu",
               XLA_FLAGS=xla_flags(devices),
               JAX_COMPILATION_CACHE_DIR=str(cache_dir),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == expect_returncode, result.stderr[-4000:]
    return result.stdout
  return run


@pytest.fixture
def run_python(compilation_cache, tmp_path):
  return python_runner(compilation_cache, tmp_path)
