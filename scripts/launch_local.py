r"""Runs one command as N processes of a multi-host JAX run on this machine: a pod on a laptop.

  python -m scripts.launch_local --num_processes=2 --devices_per_process=2 -- \
      -m scripts.train --gin_file=gin/runs/finetune.gin --gin_file=gin/quickstart.gin \
      --gin.MODEL_DIR="'runs/pod'"

Everything after `--` is the Python command line each process runs (`python -m scripts.train ...`,
`python -m scripts.evaluate ...`). Each process gets the variables that join a run anywhere
(JAX_COORDINATOR_ADDRESS on a free local port, JAX_NUM_PROCESSES, JAX_PROCESS_ID; see
runner/partitioning.initialize_distributed) and, with --devices_per_process, that many simulated
CPU devices. On CPU the processes' collectives go over gloo, as a pod's go over its interconnect:
the program is the one a TPU pod slice runs.

Each line a process prints is prefixed with its index (`[1] step 20/100 ...`); gloo's connection
lines (`[Gloo] Rank 0 is connected to ...`) are left out. SIGTERM or SIGINT
(Ctrl-C) to the launcher sends SIGTERM to every process: they save the same step and exit. When a process fails,
the others get --grace_seconds to stop by themselves (jax's coordination service stops them once
it misses the lost one's heartbeats), then are killed. The exit code is 0 when all succeed, else
the first failure's (128 + N for a process killed by signal N).

With --process_dirs, each process runs in a folder of its own, as a pod's hosts do: a rehearsal of a
bucket run (every path gs://) shows that no host needs a file another host wrote to its disk.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from absl import app
from absl import flags

from runner import lost_host
from scripts import console
from scripts import parent_death

_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 2, "Processes to start.", lower_bound=1)
_DEVICES = flags.DEFINE_integer("devices_per_process", None,
                                "Simulated CPU devices per process (XLA's host platform device count); "
                                "unset: the platform's own devices.", lower_bound=1)
_GRACE = flags.DEFINE_float("grace_seconds", 60.0, "After a process fails, how long the others may take to "
                            "stop by themselves before they are killed.")
_PROCESS_DIRS = flags.DEFINE_string(
    "process_dirs", None, "Rehearses a pod's hosts, which share nothing but a bucket: process i runs in "
    "PROCESS_DIRS/host_i, with its own temporary folder there, so that a path any process needs from "
    "another must be in the bucket (gs://..., STORAGE_EMULATOR_HOST for a local emulator).")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_seconds", None, "Seconds of silence after which jax's coordination service declares a "
    f"process lost and stops the others (unset: the run's default, {lost_host.DEFAULT_HEARTBEAT_TIMEOUT_S}).")


def free_port() -> int:
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]


def process_env(index: int, count: int, port: int, devices: int | None, heartbeat: int | None,
                host_dir: str | None = None) -> dict:
  """The environment of process `index`: the run's coordinator and its place in the run (and, with
  `host_dir`, its own temporary folder there)."""
  env = dict(os.environ, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(count),
             JAX_PROCESS_ID=str(index), PYTHONUNBUFFERED="1")
  if host_dir is not None:
    env["TMPDIR"] = os.path.join(host_dir, "tmp")
  if devices:
    flags_without_count = [flag for flag in env.get("XLA_FLAGS", "").split()
                           if not flag.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags_without_count + [f"--xla_force_host_platform_device_count={devices}"])
  if heartbeat:
    env[lost_host.HEARTBEAT_TIMEOUT_ENV] = str(heartbeat)
  return env


# gloo's line per process and collective context ("[Gloo] Rank 0 is connected to 1 peer ranks. ..."):
# with 2 processes, 8 of them before the run prints anything of its own.
GLOO_LINE = "[Gloo] "


def _relay(stream, prefix: str, out, lock: threading.Lock) -> None:
  """Copies a process's lines to `out`, each prefixed, less gloo's connection lines."""
  for line in stream:
    if line.startswith(GLOO_LINE):
      continue
    with lock:
      out.write(prefix + line)
      out.flush()


def exit_code(returncode: int) -> int:
  """A child's return code as a shell reports it: 128 + N when signal N killed it."""
  return 128 - returncode if returncode < 0 else returncode


def host_dirs(process_dirs: str | None, count: int) -> list[str | None]:
  """Each process's working folder (made, with its tmp/): PROCESS_DIRS/host_<i>, or None (the launcher's)."""
  if process_dirs is None:
    return [None] * count
  folders = [os.path.abspath(os.path.join(process_dirs, f"host_{index}")) for index in range(count)]
  for folder in folders:
    os.makedirs(os.path.join(folder, "tmp"), exist_ok=True)
  return folders


def launch(command: list[str], count: int, devices: int | None = None, grace: float = 60.0,
           heartbeat: int | None = None, process_dirs: str | None = None) -> int:
  """Starts `python COMMAND` `count` times as one run; returns the launcher's exit code."""
  port = free_port()
  folders = host_dirs(process_dirs, count)
  lock = threading.Lock()
  processes, relays = [], []
  for index in range(count):
    process = subprocess.Popen([sys.executable, *command], cwd=folders[index],
                               env=process_env(index, count, port, devices, heartbeat, folders[index]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=parent_death.ends_with_this_process())
    processes.append(process)
    for stream, out in ((process.stdout, sys.stdout), (process.stderr, sys.stderr)):
      relay = threading.Thread(target=_relay, args=(stream, f"[{index}] ", out, lock), daemon=True)
      relay.start()
      relays.append(relay)
    print(f"launch_local: process {index} of {count} is pid {process.pid}", flush=True)

  def forward(signum, frame):
    del frame
    # SIGTERM, whichever arrived: with several processes, jax's preemption sync point catches it
    # (every process saves the same step); Python would turn a SIGINT into KeyboardInterrupt.
    print(f"launch_local: {signal.Signals(signum).name} received; SIGTERM sent to every process", flush=True)
    for process in processes:
      if process.poll() is None:
        process.send_signal(signal.SIGTERM)

  for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, forward)
  failure, deadline = None, None
  while None in [process.poll() for process in processes]:  # a list: every process polled
    if failure is None:
      for index, process in enumerate(processes):
        if process.returncode and not _stopped_on_signal(process.returncode):  # None: running; 0: success
          failure = (index, process.returncode)
          deadline = time.monotonic() + grace
          print(f"launch_local: process {index} failed with exit code {exit_code(process.returncode)}; "
                f"the others have {grace:g} s to stop", file=sys.stderr, flush=True)
          break
    elif time.monotonic() > deadline:
      for index, process in enumerate(processes):
        if process.poll() is None:
          print(f"launch_local: killing process {index}, still running {grace:g} s after process "
                f"{failure[0]} failed", file=sys.stderr, flush=True)
          process.kill()
    time.sleep(0.2)
  for relay in relays:
    relay.join()
  codes = [exit_code(process.returncode) for process in processes]
  if failure is None and any(codes):
    failure = next((index, process.returncode) for index, process in enumerate(processes) if process.returncode)
  if failure is None:
    print(f"launch_local: all {count} processes finished", flush=True)
    return 0
  if all(_stopped_on_signal(process.returncode) for process in processes):
    # SIGTERM (a preemption, the launcher's own forward) or SIGINT: each process saved its step.
    name = signal.Signals(codes[failure[0]] - 128).name
    print(f"launch_local: all {count} processes stopped on {name} (exit {codes[failure[0]]}) with their "
          "step saved; rerun the same command to resume", flush=True)
  return codes[failure[0]]


def _stopped_on_signal(returncode: int) -> bool:
  """A process that stopped in order on SIGTERM or SIGINT, not a failure: it exited 143 or 130 itself
  (the scripts do, after saving), where one the signal killed outright returns -15 or -2."""
  return returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT)


def main(argv):
  command = argv[1:]
  if command and command[0] == "--":
    command = command[1:]
  if not command:
    raise app.UsageError("give the command each process runs after --, e.g. -- -m scripts.train --gin_file=...")
  sys.exit(launch(command, _NUM_PROCESSES.value, _DEVICES.value, _GRACE.value, _HEARTBEAT.value,
                  _PROCESS_DIRS.value))


if __name__ == "__main__":
  console.run(main)
