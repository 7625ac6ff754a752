"""Child processes that end with the process that started them, whatever ends it.

A parent stopped by SIGKILL (an out-of-memory kill, a test runner's timeout, a preempted VM's
agent) runs no cleanup, so a server or a run it started would live on. Linux's parent-death signal
(prctl PR_SET_PDEATHSIG) has the kernel send the child a signal when its parent goes; elsewhere the
parent's own cleanup is all there is. Linux's "parent" is the thread that started the child: start
it from the main thread (or one that lives as long as the child should), or it ends with that thread.
"""
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def ends_with_this_process(signal_number: int = signal.SIGTERM):
  """A `preexec_fn` for subprocess.Popen: the child gets `signal_number` when this process ends
  (one that ended before the child could ask is caught too)."""
  parent = os.getpid()

  def in_the_child() -> None:
    if not sys.platform.startswith("linux"):
      return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal_number)
    if os.getppid() != parent:  # the parent is already gone: the kernel will not signal
      os.kill(os.getpid(), signal_number)

  return in_the_child
