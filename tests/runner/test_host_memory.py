"""runner.host_memory: a compiled call's temporaries stop being faulted in afresh on every call.

Each case runs in its own process: the settings must be made before JAX's CPU client starts.
Page faults are counted by the kernel (getrusage), not timed.
"""
import json
import statistics
import subprocess
import sys

import pytest

from runner import host_memory
from tests.conftest import PROJECT_ROOT

# A call with 64 MB of temporaries (three 16 MB products alive at once), run 12 times; it prints
# the temporaries in 4 KiB pages and the page faults of each call after the first 3 (the heap
# settles over the first calls).
CALLS = """
import json, resource, sys
import jax, jax.numpy as jnp
from runner import host_memory
applied = host_memory.reuse_freed_memory() if sys.argv[1] == "reuse" else None

def products(x, w):
  a = jnp.sin(x) @ w
  b = jnp.cos(a) @ w
  c = jnp.tanh(b) @ w
  return (a * b).sum() + (b * c).sum() + (a * c).sum()

x, w = jnp.ones((16384, 256)), jnp.ones((256, 256)) / 256
compiled = jax.jit(products).lower(x, w).compile()
faults = []
for _ in range(12):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  compiled(x, w).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(dict(applied=applied, temporary_pages=compiled.memory_analysis().temp_size_in_bytes / 4096,
                      faults=faults[3:])))
"""


def _run(mode: str, program: str = CALLS) -> dict:
  result = subprocess.run([sys.executable, "-c", program, mode], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT), "JAX_PLATFORMS": "cpu"},
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(host_memory.glibc_mallopt() is None, reason="the settings are glibc's")
def test_a_calls_temporaries_reuse_the_pages_of_the_call_before():
  plain, reused = _run("plain"), _run("reuse")
  assert plain["temporary_pages"] >= 16_000  # 64 MB: above glibc's largest mmap threshold (32 MB)
  # Without the settings every call maps its temporaries anew and faults each page in; with them
  # a call faults in next to nothing (the median: now and then one call faults its temporaries in).
  assert min(plain["faults"]) > 0.9 * plain["temporary_pages"], plain
  assert reused["applied"] is True
  assert statistics.median(reused["faults"]) < 0.01 * reused["temporary_pages"], reused


# The tiny model scoring 32 items of 436 + 4 x 14 tokens: YNNPACK's fused kernels allocate their
# intermediates on XLA's worker threads. After the imports `scripts.evaluate` makes (TensorFlow,
# seqio), before the backend starts or after it; it prints the page faults of each call after the
# first 3. The config is gin/models/t5_1_1/tiny.gin's, read as scripts.benchmark's `model_config`
# reads it without importing the benchmark (torch and transformers, ~4 s of CPU, and no part of
# scripts.evaluate); the parameters are numpy's random numbers in the network's shapes (Flax's
# init, op by op, cost ~3 s more; the temporaries depend on shapes, not values).
SCORING = """
import json, resource, sys
import gin, jax, numpy as np
import t5_tasks
from models import network
from runner import data, host_memory, partitioning, scorers
if sys.argv[1] == "backend_first":
  jax.devices()
host_memory.reuse_freed_memory()
gin.parse_config_file("gin/models/t5_1_1/tiny.gin")
config = gin.query_parameter("%MODEL_CONFIG").scoped_configurable_fn()
gin.clear_config()
rng = np.random.default_rng(0)
shapes = jax.eval_shape(lambda: network.init_params(config, jax.random.PRNGKey(0)))
params = jax.device_put(jax.tree.map(lambda s: (0.05 * rng.standard_normal(s.shape)).astype(s.dtype), shapes))
mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
score_fn = scorers.make_score_fn(config, "likelihood", "token", partitioning.Partitioner.for_mesh(mesh))
candidates = rng.integers(3, 259, (32, 4, 14)).astype(np.int32)
mask = np.ones(candidates.shape, bool)
arrays = partitioning.global_batch({"input_ids": rng.integers(3, 259, (32, 436)).astype(np.int32),
                                    **data.pack_candidates(candidates, mask)}, mesh)
lengths = {"tokens": mask.sum(-1), "scored_chars": mask.sum(-1), "scored_bytes": mask.sum(-1)}
faults = []
for _ in range(10):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  score_fn(params, arrays, lengths)
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(dict(faults=faults[3:])))
"""


@pytest.mark.skipif(host_memory.glibc_mallopt() is None, reason="the settings are glibc's")
def test_the_worker_threads_blocks_are_reused_when_it_runs_before_the_backend_starts():
  if host_memory.has_accelerator_devices():
    pytest.skip("a host with GPU or TPU devices keeps glibc's arenas")
  late, first = _run("backend_first", SCORING), _run("settings_first", SCORING)
  # Started before the settings, the worker threads have arenas of their own and map their large
  # blocks afresh: ~135,000 pages a call on an idle machine. Which arena a thread takes also depends
  # on how the threads meet, so on a loaded machine some calls fault nothing ([0, 40604, 40602, 0, 0,
  # 0, 0] once, in a full suite run beside other work): the control needs one call that faults.
  assert max(late["faults"]) > 10_000, late
  assert statistics.median(first["faults"]) < 0.01 * max(late["faults"]), first
