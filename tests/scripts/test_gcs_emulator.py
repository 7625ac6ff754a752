"""scripts.gcs_emulator: on a free port of its own unless told one (a port in use is refused in one
line), printing the line to export; stopped at any moment of its start or the moment it has printed
its lines (a test or a user may `kill` it as soon as it says where it serves): exit 0, no traceback,
its server gone."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from scripts import gcs_emulator
from tests.helpers.processes import PROJECT_ROOT

EXPORT_LINE = re.compile(r"export STORAGE_EMULATOR_HOST=(http://127\.0\.0\.1:(\d+))\n")


def _emulator(folder, *flags) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-m", "scripts.gcs_emulator", f"--folder={folder}", *flags],
                          cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _servers(folder) -> list[int]:
  """The running fake-gcs-server processes that keep their objects in `folder`."""
  wanted = f"\0-filesystem-root\0{folder}/objects\0".encode()
  found = []
  for name in os.listdir("/proc"):
    try:
      with open(f"/proc/{name}/cmdline", "rb") as cmdline, open(f"/proc/{name}/stat", "rb") as stat:
        if wanted in cmdline.read() and stat.read().rsplit(b")", 1)[1].split()[0] != b"Z":
          found.append(int(name))
    except (OSError, ValueError, IndexError):  # not a process, or it ended meanwhile
      continue
  return found


def _no_server_left(folder, within_s: float = 10.0) -> list[int]:
  """[] once no server of `folder` runs (a parent-death signal takes a moment), else the pids left."""
  deadline = time.monotonic() + within_s
  while (left := _servers(folder)) and time.monotonic() < deadline:
    time.sleep(0.05)
  for pid in left:  # named by the assertion; not left to outlive the test
    os.kill(pid, signal.SIGKILL)
  return left


def _buckets(url: str) -> list[str]:
  with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=30) as response:
    return [bucket["name"] for bucket in json.load(response).get("items", [])]


def test_sigterm_right_after_the_two_lines_exits_0_and_ends_the_server(tmp_path):
  for attempt in range(3):  # the window was a few statements wide: try it more than once
    folder = tmp_path / str(attempt)
    process = _emulator(folder)
    lines = [process.stdout.readline(), process.stdout.readline()]
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert EXPORT_LINE.fullmatch(lines[0]), (lines, err)
    assert lines[1].startswith(f"serving gs://runs from {folder}"), (lines, err)
    assert process.returncode == 0 and "Traceback" not in err, (attempt, process.returncode, err[-2000:])
    assert not _no_server_left(folder), f"attempt {attempt}: fake-gcs-server outlived scripts.gcs_emulator"
    assert (folder / "objects" / "runs").is_dir()


def test_ten_sigterms_while_it_starts_leave_no_server(tmp_path):
  """SIGTERM once its server has been started, at ten moments from then to its lines (the server
  still starting, answering, the bucket being made, the lines being printed)."""
  for attempt in range(10):
    folder = tmp_path / str(attempt)
    process = _emulator(folder)
    try:
      deadline = time.monotonic() + 60
      while not _servers(folder) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
      time.sleep(0.03 * attempt)
      process.terminate()
      out, err = process.communicate(timeout=30)
    finally:
      process.kill()
    assert process.returncode == 0 and "Traceback" not in err, (attempt, process.returncode, out, err[-2000:])
    assert not _no_server_left(folder), f"attempt {attempt}: fake-gcs-server outlived scripts.gcs_emulator"


def test_two_emulators_started_at_once_serve_on_their_own_ports_their_own_buckets(tmp_path):
  processes = {bucket: _emulator(tmp_path / bucket, f"--bucket={bucket}") for bucket in ("alpha", "beta")}
  try:
    urls = {}
    for bucket, process in processes.items():
      line = process.stdout.readline()
      assert (match := EXPORT_LINE.fullmatch(line)), (line, process.stderr.read() if process.poll() else "")
      urls[bucket] = match.group(1)
    assert urls["alpha"] != urls["beta"], urls
    assert _buckets(urls["alpha"]) == ["alpha"] and _buckets(urls["beta"]) == ["beta"]
    with pytest.raises(urllib.error.HTTPError, match="404"):
      urllib.request.urlopen(f"{urls['alpha']}/storage/v1/b/beta/o", timeout=30)
  finally:
    for process in processes.values():
      process.terminate()
      process.communicate(timeout=30)
  assert [process.returncode for process in processes.values()] == [0, 0]
  assert not _no_server_left(tmp_path / "alpha") and not _no_server_left(tmp_path / "beta")


def test_a_port_in_use_is_refused_in_one_line_naming_it(tmp_path):
  """Another emulator serves the port: the command says so in one line (exit 1) and makes nothing in
  that emulator's bucket; start() refuses it too, and so does the server's start where the port was
  taken after the check (another emulator answering there is not taken for ours)."""
  other = gcs_emulator.start(tmp_path / "other", ["runs"])
  try:
    port = int(other.url.rsplit(":", 1)[1])
    result = subprocess.run([sys.executable, "-m", "scripts.gcs_emulator", f"--folder={tmp_path / 'mine'}",
                             f"--port={port}", "--bucket=mine"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and result.stdout == "", (result.returncode, result.stdout, result.stderr)
    assert result.stderr == (f"error: port {port} on 127.0.0.1 is already in use (another emulator's?); "
                             "leave out --port to take a free one\n")
    with pytest.raises(gcs_emulator.PortInUse, match=f"port {port} "):
      gcs_emulator.start(tmp_path / "mine", port=port)
    (tmp_path / "late" / "objects").mkdir(parents=True)
    with pytest.raises(gcs_emulator.PortInUse, match=f"port {port} "):
      gcs_emulator._serve(str(tmp_path / "late"), port)  # pylint: disable=protected-access
    assert _buckets(other.url) == ["runs"]
  finally:
    other.stop()
  assert not _no_server_left(tmp_path / "mine") and not _no_server_left(tmp_path / "late")
