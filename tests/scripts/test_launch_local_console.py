"""scripts.launch_local relays each process's own lines, prefixed with its index, and leaves out
gloo's connection lines (`[Gloo] Rank 0 is connected to 1 peer ranks. ...`, issue 34 item 10)."""
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
