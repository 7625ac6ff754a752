"""A lost host is one line on every survivor, not the runtime's report and stack trace (issue 35:
fail fast across hosts, in one line naming the lost process)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from runner import lost_host
from scripts import launch_local
from tests.conftest import PROJECT_ROOT

# What jax's runtime printed on process 0 when process 1 was SIGKILLed (jax 0.8, heartbeat 5 s).
UNHEALTHY_REPORT = """\
E1126 04:01:22.325633   18036 coordination_service.cc:1549] [11608895334592169143] Use error polling to propagate the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='']
E1126 04:01:22.326155   18047 coordination_service_agent.cc:289] Polled an error from coordination service (this can be an error from this or another task).
F1126 04:01:22.326301   18047 client.h:80] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):
1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.

RPC: /xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']
*** Check failure stack trace: ***
    @     0x7f0e20040634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
    @     0x7f0e1c1040ee  xla::CoordinationServiceAgent::SetError()
    @     0x7f0e27c461f5  (unknown)
"""
WARNING = ("W1126 04:01:41.414235   18531 preemption_sync_manager.cc:147] Failed to retrieve preemption notice "
           "from coordination service: UNAVAILABLE: Socket closed\nAdditional GRPC error information\n")


def _through_filter(text: str, *arguments, pause_after: str | None = None) -> str:
  """What reaches stderr when `text` goes through the filter (a pause of longer than it holds a
  runtime warning after `pause_after`)."""
  process = subprocess.Popen([sys.executable, "-S", lost_host.__file__, *arguments], stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE)
  first, _, rest = text.partition(pause_after) if pause_after else (text, "", "")
  process.stdin.write((first + (pause_after or "")).encode())
  process.stdin.flush()
  if pause_after:
    time.sleep(lost_host._HELD_SECONDS + 1)  # pylint: disable=protected-access
  _, err = process.communicate(rest.encode(), timeout=30)
  return err.decode()


def test_the_runtime_report_of_a_lost_process_becomes_one_line_naming_it():
  printed = _through_filter("step 14/20 loss 2.31\n" + UNHEALTHY_REPORT, "0", "5")
  assert printed == ("step 14/20 loss 2.31\nlost host: process 1 of the run stopped sending heartbeats (none for "
                     "5 s: preempted, killed or unreachable); process 0 stops too; rerun the command on every "
                     "host: it resumes from the last checkpoint\n"), printed


def test_everything_else_passes_through_unchanged_and_in_order():
  text = "first\n" + WARNING + "after the warning\n*** Check failure stack trace: ***\n    @ 0x1 f()\nlast, no newline"
  assert _through_filter(text) == text
  # A runtime warning held for a fatal error that does not come is let through once it has waited.
  assert _through_filter(text, pause_after=WARNING) == text


def test_a_survivor_of_the_lost_coordinator_prints_one_line_and_stops(tmp_path):
  """Two real processes joined by jax.distributed; process 0 (which hosts the coordination service)
  is killed: process 1 stops by itself, its stderr one line."""
  script = tmp_path / "join.py"
  script.write_text(textwrap.dedent("""\
      import os, signal, time
      from runner import partitioning
      partitioning.initialize_distributed(True)
      import jax
      print("joined", flush=True)
      if jax.process_index() == 0:
        time.sleep(2)
        os.kill(os.getpid(), signal.SIGKILL)
      time.sleep(60)
      print("still running", flush=True)
      """))
  env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), JAX_PLATFORMS="cpu", JAX_NUM_PROCESSES="2",
             JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{launch_local.free_port()}", JAX_HEARTBEAT_TIMEOUT_SECONDS="5")
  processes = [subprocess.Popen([sys.executable, str(script)], env=dict(env, JAX_PROCESS_ID=str(index)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for index in (0, 1)]
  started = time.monotonic()
  results = [process.communicate(timeout=120) for process in processes]
  assert processes[0].returncode == -signal.SIGKILL
  assert processes[1].returncode == -signal.SIGABRT and time.monotonic() - started < 40
  out, err = results[1]
  assert out == "joined\n", out
  assert err == ("lost host: the run's coordinator (process 0) does not answer (preempted, killed or unreachable); "
                 "process 1 stops too; rerun the command on every host: it resumes from the last checkpoint\n"), err
