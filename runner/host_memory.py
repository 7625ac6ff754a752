"""Host memory for XLA on the CPU: each call's temporaries land on pages the last call already touched.

XLA's CPU runtime allocates a compiled call's temporaries afresh on every call (200 MB for the
small model's training step at 2 x (256 + 64) tokens), and YNNPACK's fused kernels allocate their
own intermediates on the worker threads (a 146 MB attention block when scoring 32 TimeDial
items). glibc serves a block that large with mmap and gives it back with munmap, so every call
faults in new zeroed pages: 50,000-100,000 page faults per small training step and 627,000 per
call scoring 32 TimeDial-sized items, 12-20% of the small model's time on 2 cores and half of the
tiny model's. Documented settings keep those pages (`man mallopt`):
- M_ARENA_MAX 1 puts the threads that start afterwards (XLA's workers) on the process's one
  heap: glibc maps a large block afresh wherever a thread has an arena of its own.
- M_MMAP_MAX 0 serves large blocks from that heap, and M_TRIM_THRESHOLD -1 keeps freed heap
  memory for the next call.
- XLA's calls run on the calling thread (`jax_cpu_enable_async_dispatch` off: a setting of the
  CPU client only, read when it starts).

The cost: the process keeps its peak host memory until it exits, so hosts with GPU or TPU
devices are left as they are.
"""
import ctypes
import glob
import sys

import jax

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
# Device files of accelerators JAX would use: NVIDIA GPUs, TPUs (v4: accel, v5e and later: vfio).
_ACCELERATOR_FILES = ("/dev/nvidia[0-9]*", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def glibc_mallopt():
  """glibc's mallopt, or None (not Linux, or not glibc: musl has no mallopt)."""
  if not sys.platform.startswith("linux"):
    return None
  try:
    return ctypes.CDLL("libc.so.6").mallopt
  except (OSError, AttributeError):
    return None


def has_accelerator_devices() -> bool:
  """Whether the host has GPU or TPU device files (checked without starting JAX's backends)."""
  return any(glob.glob(pattern) for pattern in _ACCELERATOR_FILES)


def reuse_freed_memory() -> bool:
  """Keeps freed heap memory when JAX computes on the CPU with glibc; returns whether it did.

  Call before anything touches a device: the arena and dispatch settings only hold for the
  threads and the CPU client that start afterwards.
  """
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  mallopt = glibc_mallopt()
  if mallopt is None or has_accelerator_devices():
    return False
  mallopt(_M_ARENA_MAX, 1)  # before the backend starts its worker threads
  if jax.default_backend() != "cpu":
    return False
  return mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, -1) == 1
