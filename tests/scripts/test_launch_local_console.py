"""scripts.launch_local relays each process's own lines, prefixed with its index, and leaves out
gloo's connection lines (`[Gloo] Rank 0 is connected to 1 peer ranks. ...`, issue 34 item 10)."""
import signal
import subprocess
import sys

from tests.conftest import PROJECT_ROOT

# Joins the run (gloo collectives on CPU, as training does) and sums a value over both processes.
PROGRAM = ("from runner import partitioning; partitioning.initialize_distributed(); "
           "import jax.numpy as jnp; from jax.experimental import multihost_utils; "
           "print('sum', multihost_utils.process_allgather(jnp.ones(1)).sum())")


def test_two_processes_print_their_lines_and_no_gloo_lines():
  result = subprocess.run([sys.executable, "-m", "scripts.launch_local", "--num_processes=2",
                           "--devices_per_process=1", "--", "-c", PROGRAM],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = (result.stdout + result.stderr).splitlines()
  assert sorted(line for line in lines if " sum " in line) == ["[0] sum 2.0", "[1] sum 2.0"], lines
  assert not [line for line in lines if "Gloo" in line], lines  # (the collectives did connect: the sums)
  assert lines[-1] == "launch_local: all 2 processes finished", lines


def test_an_orderly_stop_on_sigterm_is_not_called_a_failure():
  """SIGTERM to the launcher reaches every process, which saves and exits 143 (as the scripts do):
  a preemption, said as one, with the exit code kept for the caller (issue 53)."""
  waiting = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); "
             "print('ready', flush=True); time.sleep(120)")
  launcher = subprocess.Popen([sys.executable, "-m", "scripts.launch_local", "--num_processes=2", "--", "-c", waiting],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  ready = 0
  for line in launcher.stdout:
    ready += line.endswith("] ready\n")
    if ready == 2:
      break
  launcher.send_signal(signal.SIGTERM)
  out, err = launcher.communicate(timeout=60)
  assert launcher.returncode == 143, err
  assert "failed" not in out + err, out + err
  assert out.splitlines()[-1] == ("launch_local: all 2 processes stopped on SIGTERM (exit 143) with their step "
                                  "saved; rerun the same command to resume"), out
