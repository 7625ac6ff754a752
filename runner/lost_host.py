"""One line, not a crash dump, when a multi-host run loses a host.

When a process of a run dies (preempted, killed, its host gone), the coordination service stops
every other process: each one's C++ runtime logs the service's error and aborts with a stack
trace (20 lines or more, on every surviving host). `install` puts a small filter between this
process and its stderr that passes everything through, except that report: when the runtime says
it is terminating because of it, the filter prints one line naming the lost process instead.

The filter is a separate process reading a pipe, so it still has the report after the runtime
aborts this one; it ignores SIGINT and SIGTERM (the run decides when to stop) and exits when the
pipe closes. Run as a script, this file is that filter.
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

# Seconds without a heartbeat after which the coordination service declares a process lost and
# stops every other one (runner/partitioning.initialize_distributed passes it; the variable overrides
# it). Heartbeats come from a thread of their own (a long compile or step does not delay them), so
# 20 s (jax's own default: 100) stops a pod's survivors of a lost host within 30 s.
HEARTBEAT_TIMEOUT_ENV = "JAX_HEARTBEAT_TIMEOUT_SECONDS"
DEFAULT_HEARTBEAT_TIMEOUT_S = 20

# The first line of a log record of jax's distributed runtime (absl: severity, date, time, thread,
# file:line]); the lines that follow it up to the next record belong to it.
_RUNTIME_RECORD = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ (coordination_service(_agent)?\.cc|"
                             rb"preemption_sync_manager\.cc|client\.h):\d+\]")
_ANY_RECORD = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]")
_FATAL = b"Terminating process because the JAX distributed service detected fatal errors"
_STACK = (b"*** Check failure stack trace", b"    @ ")
_HELD_SECONDS = 5.0  # a runtime record not followed by the fatal one within this is passed on as it was
_UNHEALTHY = re.compile(r"stopped sending heartbeats\):\s*([\d,\s]+?)\s*(?:The tasks|$)")
_LEADER_LOST = "Failed to send RPC to coordination service"


def lost_process_line(report: str, process: str, heartbeat_s: str) -> str:
  """The one line that stands for the runtime's report of a fatal error of the run."""
  stops = f"process {process} stops too" if process else "this process stops too"
  rerun = "rerun the command on every host: it resumes from the last checkpoint"
  unhealthy = _UNHEALTHY.search(report)
  if unhealthy:
    lost = ", ".join(part for part in re.split(r"[,\s]+", unhealthy.group(1)) if part)
    return (f"lost host: process {lost} of the run stopped sending heartbeats (none for {heartbeat_s} s: "
            f"preempted, killed or unreachable); {stops}; {rerun}")
  if _LEADER_LOST in report:
    return (f"lost host: the run's coordinator (process 0) does not answer (preempted, killed or "
            f"unreachable); {stops}; {rerun}")
  status = report.split("absl::Status:", 1)[-1].strip().splitlines()
  return f"lost host: the run's coordination service stopped it ({status[0] if status else 'no reason given'}); {stops}"


def install(process: str = "", heartbeat_s: str = "") -> None:
  """Routes this process's stderr (fd 2, C++ logs included) through the filter."""
  sys.stderr.flush()
  read_end, write_end = os.pipe()
  subprocess.Popen([sys.executable, "-S", __file__, process, heartbeat_s], stdin=read_end, close_fds=True)
  os.close(read_end)
  os.dup2(write_end, 2)
  os.close(write_end)


def _filter(source, sink, process: str, heartbeat_s: str) -> None:
  held, fatal, deadline = [], False, None
  pending = b""
  while True:
    timeout = None if deadline is None or fatal else max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([source], [], [], timeout)
    if not ready:  # a runtime warning that no fatal error followed: it was only a warning
      sink.write(b"".join(held))
      sink.flush()
      held, deadline = [], None
      continue
    chunk = os.read(source, 1 << 16)
    if not chunk:
      break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in (line + b"\n" for line in lines):
      if fatal:
        held.append(line)
      elif _RUNTIME_RECORD.match(line) or (held and not _ANY_RECORD.match(line) and not line.startswith(_STACK[0])):
        held.append(line)
        deadline = deadline or time.monotonic() + _HELD_SECONDS
        fatal = _FATAL in line
      else:
        sink.write(b"".join(held) + line)
        held, deadline = [], None
    if not fatal and not held:
      sink.flush()
  if fatal:
    report = b"".join(held).decode("utf-8", "replace")
    sink.write((lost_process_line(report, process, heartbeat_s) + "\n").encode())
  else:
    sink.write(b"".join(held) + pending)
  sink.flush()


if __name__ == "__main__":
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  _filter(sys.stdin.fileno(), sys.stderr.buffer, *(sys.argv[1:3] + ["", ""])[:2])
