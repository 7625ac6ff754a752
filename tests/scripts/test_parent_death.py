"""Processes the project starts end with their parent, even one stopped by SIGKILL (which runs no
cleanup): the emulator's server and scripts.launch_local's processes (scripts/parent_death.py)."""
import os
import signal
import subprocess
import sys
import time

from tests.conftest import PROJECT_ROOT

# A parent that starts the emulator, prints its server's pid and waits to be killed.
EMULATOR_PARENT = """
import sys, time
from scripts import gcs_emulator
emulator = gcs_emulator.start(sys.argv[1])
print(emulator.process.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int, within_s: float = 20.0) -> bool:
  deadline = time.monotonic() + within_s
  while time.monotonic() < deadline:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True
    try:  # a child of this process that ended waits to be reaped
      if os.waitpid(pid, os.WNOHANG)[0] == pid:
        return True
    except ChildProcessError:
      pass
    time.sleep(0.1)
  return False


def test_the_emulators_server_ends_when_its_parent_is_killed(tmp_path):
  parent = subprocess.Popen([sys.executable, "-c", EMULATOR_PARENT, str(tmp_path)], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, text=True)
  server = int(parent.stdout.readline())
  try:
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=30)
    assert _gone(server), f"fake-gcs-server {server} outlived its parent"
  finally:
    if not _gone(server, 0.1):
      os.kill(server, signal.SIGKILL)


def test_launch_locals_processes_end_when_it_is_killed():
  launcher = subprocess.Popen([sys.executable, "-m", "scripts.launch_local", "--num_processes=2", "--",
                               "-c", "import time; time.sleep(600)"], cwd=PROJECT_ROOT,
                              stdout=subprocess.PIPE, text=True)
  children = []
  try:
    for line in launcher.stdout:
      if line.startswith("launch_local: process "):
        children.append(int(line.rsplit(" ", 1)[1]))
      if len(children) == 2:
        break
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    assert all(_gone(child) for child in children), f"{children} outlived launch_local"
  finally:
    for child in children:
      if not _gone(child, 0.1):
        os.kill(child, signal.SIGKILL)
