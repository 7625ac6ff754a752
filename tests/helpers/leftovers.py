"""After the suite: the processes it started that are still running (each inherits the marker
tests/conftest.py puts in the environment, TEST_SESSION_VARIABLE), named with their command lines
and ended (`main`, which pytest_sessionfinish calls; also `python -m tests.helpers.leftovers MARKER`).
"""
import os
import signal
import sys
import time

TEST_SESSION_VARIABLE = "T5_SCORING_TEST_SESSION"
GRACE_S = 10.0  # a child whose parent just ended may still be on its way out


def leftovers(marker: str) -> dict[int, str]:
  """{pid: command line} of the running processes whose environment holds the marker."""
  wanted = f"{TEST_SESSION_VARIABLE}={marker}".encode()
  found = {}
  for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
      continue
    try:
      with open(f"/proc/{name}/environ", "rb") as environ, open(f"/proc/{name}/cmdline", "rb") as cmdline:
        if wanted in environ.read().split(b"\0"):
          found[int(name)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:  # ended meanwhile, or not ours to read
      continue
  return found


def main(marker: str) -> int:
  deadline = time.monotonic() + GRACE_S
  found = leftovers(marker)
  while found and time.monotonic() < deadline:
    time.sleep(0.5)
    found = leftovers(marker)
  for pid, command in sorted(found.items()):
    print(f"left running by the test suite: pid {pid}: {command[:200]}", file=sys.stderr)
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  return 1 if found else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
