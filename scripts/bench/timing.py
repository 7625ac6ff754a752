"""Fair timing on a noisy machine: interleaved repetitions, medians, and the matmul ceiling.

Every runner is a no-argument callable that returns only when its work is finished (it blocks
on the device). Runners of one comparison take turns (A B A B ...) so that load from other
processes falls on all of them alike.
"""
import dataclasses
import os
import statistics
import time
from typing import Callable


@dataclasses.dataclass
class Timing:
  first_call_s: float  # compilation (or framework warm-up) plus one run
  times_s: list[float]
  first_result: object = None

  @property
  def median_s(self) -> float:
    return statistics.median(self.times_s)

  @property
  def compile_s(self) -> float:
    """What the first call cost beyond a steady-state run."""
    return max(self.first_call_s - self.median_s, 0.0)


def _timed(run: Callable[[], object]) -> tuple[float, object]:
  start = time.perf_counter()
  result = run()
  return time.perf_counter() - start, result


def interleaved(runners: dict[str, Callable[[], object]], reps: int, warmup: int = 1,
                check: Callable[[dict[str, object]], None] | None = None) -> dict[str, Timing]:
  """Times each runner `reps` times after its first call and `warmup` untimed calls, in turns.

  `check` sees every runner's first result before any timed repetition (and may raise).
  """
  if reps < 1:
    raise ValueError(f"reps must be at least 1, got {reps}")
  first = {name: _timed(run) for name, run in runners.items()}
  if check is not None:
    check({name: result for name, (_, result) in first.items()})
  for _ in range(warmup):
    for run in runners.values():
      run()
  times = {name: [] for name in runners}
  for _ in range(reps):
    for name, run in runners.items():
      times[name].append(_timed(run)[0])
  return {name: Timing(first[name][0], times[name], first[name][1]) for name in runners}


def load_average() -> float:
  """The 1-minute load average: how many processes competed for the cores while we measured."""
  return os.getloadavg()[0]


def compute_threads() -> int:
  """The cores this process may run on: XLA's CPU thread pool takes that many, and torch is given the same."""
  return len(os.sched_getaffinity(0))


def jax_matmul_runner(size: int, dtype: str):
  """(runner, flops) of one jitted [size, size] x [size, size] product on JAX's default device."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  keys = jax.random.split(jax.random.PRNGKey(0))
  a, b = (jax.random.normal(key, (size, size), jnp.dtype(dtype)) for key in keys)
  product = jax.jit(jnp.matmul)
  return (lambda: product(a, b).block_until_ready()), 2 * size ** 3


def torch_matmul_runner(size: int, dtype: str, device: str):
  """(runner, flops) of one [size, size] x [size, size] torch product."""
  import torch  # pylint: disable=import-outside-toplevel

  generator = torch.Generator().manual_seed(0)
  a, b = (torch.randn(size, size, generator=generator).to(device=device, dtype=getattr(torch, dtype))
          for _ in range(2))

  def run():
    torch.matmul(a, b)
    if device != "cpu":
      torch.cuda.synchronize()
  return run, 2 * size ** 3
