"""scripts.gcs_emulator stopped the moment it has printed its lines: exit 0, no traceback, the
server gone (a test or a user may `kill` it as soon as it says where it serves)."""
import subprocess
import sys

from tests.helpers.processes import PROJECT_ROOT


def test_sigterm_right_after_the_two_lines_exits_0(tmp_path):
  for attempt in range(3):  # the window was a few statements wide: try it more than once
    process = subprocess.Popen([sys.executable, "-m", "scripts.gcs_emulator", f"--folder={tmp_path}", "--port=0"],
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [process.stdout.readline(), process.stdout.readline()]
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert lines[0].startswith("STORAGE_EMULATOR_HOST=http://127.0.0.1:"), (lines, err)
    assert lines[1].startswith(f"serving gs://runs from {tmp_path}"), (lines, err)
    assert process.returncode == 0 and "Traceback" not in err, (attempt, process.returncode, err[-2000:])
  assert (tmp_path / "objects" / "runs").is_dir()
