"""One writer per run directory: a training holds a lease on its MODEL_DIR while it runs.

Two trainings into one MODEL_DIR would write their checkpoints in turn, each resuming from the
other's steps, and say nothing: on a pod, a preempted job relaunched while the old one still
runs. So a run first creates `MODEL_DIR/lease.json`, only if it is absent (a local hard link, or a
bucket's create-if-absent precondition: `storage.create_new`), naming its host and process; it
rewrites the lease's time every `RENEW_EVERY_S` seconds while it lives and deletes the lease
when it ends. A second run finds the lease and stops in one line naming the holder.

A lease whose holder is gone is taken over, with a line saying so: one not renewed for
`STALE_AFTER_S` seconds (a host lost with its process), or one whose holder was a process of
this host that no longer exists (a run killed and rerun at once). A run whose lease was taken
over (it stopped renewing, a paused process) finds so at its next renewal and stops before its
next checkpoint is written (`LeaseLostError`). A holder paused between reading and rewriting its
lease may write it once more over the new one: then the new holder finds that at its next
renewal and stops instead, so that one run still goes on.

On several hosts, process 0 holds the lease for the run and tells the others whether it has it.
"""
import dataclasses
import json
import os
import socket
import sys
import threading
import time
import uuid

import jax
import numpy as np
from jax.experimental import multihost_utils

from runner import run_dir
import storage

RENEW_EVERY_S = 20.0
STALE_AFTER_S = 90.0  # several missed renewals: a holder this late is gone, not slow


class RunDirectoryInUseError(RuntimeError):
  """Another run holds the lease of this MODEL_DIR."""


class LeaseLostError(RuntimeError):
  """This run's lease was taken over by another run; it stops before writing again."""


def _holder_text(record: dict, now: float) -> str:
  return (f"host {record.get('host')} process {record.get('pid')} (started {record.get('started')}, "
          f"renewed {max(0.0, now - record.get('renewed', 0.0)):.0f} s ago)")


def _alive_here(record: dict) -> bool:
  """Whether the lease's holder is a process of this host that still runs (True when another host's)."""
  if record.get("host") != socket.gethostname():
    return True
  pid = record.get("pid")
  if pid == os.getpid():
    return False  # this process, from a run that ended without releasing (an interrupted test)
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, TypeError, ValueError):
    return True
  return True


def _read(path: str) -> dict | None:
  """The lease's record; None when there is none; {} when it cannot be read as one (its writer died
  mid-write: a bucket never shows that, a local link never does)."""
  try:
    text = storage.read_text(path)
  except storage.StorageError as error:
    if isinstance(error.__cause__, FileNotFoundError):
      return None
    raise
  try:
    return json.loads(text)
  except ValueError:
    return {}


@dataclasses.dataclass
class Lease:
  """A held lease: `renew` rewrites its time, `check` raises when it was taken over, `release` ends it."""
  path: str
  record: dict
  renew_every_s: float = RENEW_EVERY_S
  lost_to: str | None = None
  _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
  _thread: threading.Thread | None = None

  def renew(self) -> None:
    found = _read(self.path)
    if found == {}:
      return  # being rewritten by hand: read it again at the next renewal
    if found is None or found.get("token") != self.record["token"]:
      self.lost_to = _holder_text(found, time.time()) if found else "no one (the lease was deleted)"
      self._stop.set()
      return
    self.record["renewed"] = time.time()
    storage.write_text(self.path, json.dumps(self.record) + "\n")

  def _renew_until_stopped(self) -> None:
    while not self._stop.wait(self.renew_every_s):
      try:
        self.renew()
      except OSError as error:  # a storage hiccup: the next renewal tries again, well before the lease is stale
        print(f"could not renew the lease {self.path}: {error}", file=sys.stderr, flush=True)

  def start(self) -> "Lease":
    self._thread = threading.Thread(target=self._renew_until_stopped, name="lease", daemon=True)
    self._thread.start()
    return self

  def check(self) -> None:
    if self.lost_to is not None:
      raise LeaseLostError(f"the lease of {storage.parent(self.path)} was taken over by {self.lost_to} while "
                           "this run had stopped renewing it; stopping without writing again")

  def release(self) -> None:
    """Deletes the lease (when still this run's). Never raises: it runs as a run ends, failed runs
    included, whose own error must be the one reported; a lease left behind is taken over later."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    try:
      if self.lost_to is None and (_read(self.path) or {}).get("token") == self.record["token"]:
        storage.remove(self.path)
    except OSError as error:
      print(f"the lease {self.path} stays: {error}; the next run takes it over once its holder is gone",
            file=sys.stderr, flush=True)


def _acquire_here(model_dir: str, stale_after_s: float, renew_every_s: float) -> Lease:
  path = run_dir.RunDir(model_dir).lease
  now = time.time()
  record = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)), "renewed": now,
            "command": " ".join(sys.argv)}
  for _ in range(3):  # a lease deleted between our attempt and our read: try again
    if storage.create_new(path, (json.dumps(record) + "\n").encode()):
      return Lease(path, record, renew_every_s).start()
    found = _read(path)
    if found is None:
      continue
    now = time.time()
    age = now - found.get("renewed", 0.0)
    if found and age <= stale_after_s and _alive_here(found):
      raise RunDirectoryInUseError(
          f"MODEL_DIR {model_dir} is in use by another training: {_holder_text(found, now)}; stop that "
          f"run or name another MODEL_DIR (a lease not renewed for {stale_after_s:.0f} s is taken over)")
    why = ("unreadable" if not found else "its process is gone" if age <= stale_after_s
           else f"not renewed for {age:.0f} s")
    print(f"taking over the lease of MODEL_DIR {model_dir} from "
          f"{_holder_text(found, now) if found else 'an unknown run'}: {why}", flush=True)
    storage.remove(path)
  raise RunDirectoryInUseError(f"MODEL_DIR {model_dir}: another run took its lease at the same moment")


def acquire(model_dir: str, *, stale_after_s: float = STALE_AFTER_S,
            renew_every_s: float = RENEW_EVERY_S) -> Lease | None:
  """This run's lease of `model_dir` (None on processes other than 0, which hold it for the run),
  or a RunDirectoryInUseError on every process when another run holds it."""
  if jax.process_count() == 1:
    return _acquire_here(model_dir, stale_after_s, renew_every_s)
  lease, refusal = None, None
  if jax.process_index() == 0:
    try:
      lease = _acquire_here(model_dir, stale_after_s, renew_every_s)
    except RunDirectoryInUseError as error:
      refusal = error
  held = multihost_utils.broadcast_one_to_all(np.int32(lease is not None))
  if refusal is not None:
    raise refusal
  if not held:
    raise RunDirectoryInUseError(f"MODEL_DIR {model_dir} is in use by another training (process 0 names it)")
  return lease


def check(lease: Lease | None) -> None:
  """Raises LeaseLostError on every process when process 0's lease was taken over (a collective on
  several hosts: call it where every process does, before a checkpoint)."""
  lost = lease is not None and lease.lost_to is not None
  if jax.process_count() > 1:
    lost = bool(multihost_utils.broadcast_one_to_all(np.int32(lost)))
  if lease is not None:
    lease.check()
  if lost:
    raise LeaseLostError("the run's lease was taken over by another run (process 0 names it); stopping "
                         "without writing again")
