"""The project's command-line scripts run as real subprocesses: their environment, signalling one
once it has started its work, and starting the server on a free port."""
import os
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import PROJECT_ROOT


def script_env(compilation_cache) -> dict:
  """The environment of a script run on the CPU, compiling into the tests' shared cache."""
  return dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), JAX_PLATFORMS="cpu",
              JAX_COMPILATION_CACHE_DIR=str(compilation_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


def signal_at_line(command, prefix: str, signal_number, env, timeout: float = 300):
  """Runs `command` in the project root and sends it `signal_number` when it prints a line that
  starts with `prefix` (its work has started). Returns (exit code, stdout, stderr); stdout holds
  every line, those before the signal included. Fails when it ends without printing that line."""
  with tempfile.TemporaryFile("w+") as stderr_file:  # a file: a chatty stderr cannot fill a pipe
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=stderr_file, text=True)
    lines, signalled = [], False
    try:
      for line in process.stdout:
        lines.append(line)
        if line.startswith(prefix):
          process.send_signal(signal_number)
          signalled = True
          break
      rest, _ = process.communicate(timeout=timeout)
    finally:
      process.kill()
      process.wait()
    stderr_file.seek(0)
    stderr = stderr_file.read()
  stdout = "".join(lines) + (rest or "")
  assert signalled, f"no line starting with {prefix!r}; exit {process.returncode}\n{stdout[-2000:]}\n{stderr[-3000:]}"
  return process.returncode, stdout, stderr


def start_server(log, *flags, env=None) -> tuple[subprocess.Popen, int]:
  """Starts `python -m scripts.serve FLAGS --port=0` (its log to the file `log`); the port it prints."""
  process = subprocess.Popen([sys.executable, "-m", "scripts.serve", *flags, "--port=0"], cwd=PROJECT_ROOT,
                             stdout=subprocess.PIPE, stderr=log, text=True, env=env)
  line = process.stdout.readline()
  if not line.startswith("serving POST http://127.0.0.1:"):
    process.terminate()
    process.wait(timeout=30)
    log.seek(0)
    pytest.fail(f"serve exited with {process.returncode} before serving: {line!r}\n{log.read()[-3000:]}")
  return process, int(line.rsplit(":", 1)[1].split("/")[0])
