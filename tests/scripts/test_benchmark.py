"""The benchmark end to end on the tiny config (no timed assertions), and its FLOP counts against the programs."""
import json
import math
import subprocess
import sys

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from models import network, scoring
from models.config import T5Config
from scripts import bench_flops, benchmark
from tests.conftest import PROJECT_ROOT

TINY = T5Config(vocab_size=96, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=48,
                num_encoder_layers=2, num_decoder_layers=3)
OURS = {"scoring": "score_candidates", "training": "train_step", "generation": "sample"}
BASELINES = {"scoring": {"score_pairs", "hf_t5"}, "training": {"hf_t5"}, "generation": {"hf_t5"}}


def _matmul_flops(jaxpr) -> int:
  """2 x (output size) x (contracted size) summed over every dot_general, sub-jaxprs included."""
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (lhs_contract, _), _ = eqn.params["dimension_numbers"]
      lhs_shape = eqn.invars[0].aval.shape
      total += 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs_shape[d] for d in lhs_contract)
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        if isinstance(sub, jax_core.ClosedJaxpr):
          total += _matmul_flops(sub.jaxpr)
        elif isinstance(sub, jax_core.Jaxpr):
          total += _matmul_flops(sub)
  return total


@pytest.fixture(scope="module")
def params():
  return network.init_params(TINY, jax.random.PRNGKey(0))


def test_forward_flops_count_every_matmul_of_the_network(params):
  batch, length, steps = 3, 10, 6
  forward = lambda p, x, y: network.Transformer(TINY).apply({"params": p}, x, y)
  jaxpr = jax.make_jaxpr(forward)(params, jnp.ones((batch, length), jnp.int32), jnp.ones((batch, steps), jnp.int32))
  assert bench_flops.forward_flops(TINY, batch, length, steps) == _matmul_flops(jaxpr.jaxpr)


def test_scoring_flops_count_every_matmul_of_both_scorers(params):
  batch, length, candidates, steps = 2, 12, 3, 5
  inputs = jnp.ones((batch, length), jnp.int32)
  cands = jnp.ones((batch, candidates, steps), jnp.int32)
  for scorer, counted in [(scoring.score_candidates, bench_flops.shared_scoring_flops),
                          (scoring.score_pairs, bench_flops.pair_scoring_flops)]:
    jaxpr = jax.make_jaxpr(lambda p, x, c, f=scorer: f(TINY, p, x, c))(params, inputs, cands)
    assert counted(TINY, batch, length, candidates, steps) == _matmul_flops(jaxpr.jaxpr)


def test_token_ids_end_with_eos_then_padding():
  ids = benchmark.token_ids(np.random.default_rng(0), (2, 3, 5), vocab=50, lengths=[5, 1, 3, 2, 4, 5])
  flat = ids.reshape(6, 5)
  for row, length in enumerate([5, 1, 3, 2, 4, 5]):
    assert flat[row, length - 1] == 1
    assert np.all(flat[row, length:] == 0)
    assert np.all(flat[row, :length - 1] >= 2)


def test_benchmark_end_to_end_on_tiny(tmp_path):
  path = tmp_path / "bench.jsonl"
  result = subprocess.run(
      [sys.executable, "-m", "scripts.benchmark", "--model=tiny", "--quick", f"--json={path}",
       "--suites=scoring,training,generation"],  # the import suite: the test below
      cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  records = [json.loads(line) for line in path.read_text().splitlines()]
  measured = [r for r in records if not r["impl"].endswith("_matmul")]
  assert {r["suite"] for r in measured} == set(OURS)
  for suite, ours in OURS.items():
    for case in {r["case"] for r in measured if r["suite"] == suite}:
      rows = {r["impl"]: r for r in measured if (r["suite"], r["case"]) == (suite, case)}
      assert set(rows) == {ours} | BASELINES[suite]
      assert rows[ours]["agreement"]
      for impl, row in rows.items():
        assert row["throughput"] > 0 and row["median_s"] > 0 and len(row["times_s"]) == 1
        assert row["mfu"] == pytest.approx(row["flops"] / row["median_s"] / row["peak_flops_per_s"])
        assert set(row["ratios"]) == set(rows) - {impl}
        for other, ratio in row["ratios"].items():
          assert ratio == pytest.approx(row["throughput"] / rows[other]["throughput"])
      peaks = [r for r in records if (r["suite"], r["case"]) == (suite, case) and r["impl"].endswith("_matmul")]
      assert {r["engine"] for r in peaks} == {"jax", "torch"}
  scoring_agreement = [r["agreement"] for r in measured if r["impl"] == "score_candidates"]
  assert all(value <= benchmark.SCORE_TOLERANCE for a in scoring_agreement for value in a.values())
  first, *others = benchmark.SCORING_CASES  # --quick: the first case only
  assert f"[scoring / {first.name}]" in result.stdout
  assert not any(f"[scoring / {case.name}]" in result.stdout for case in others)


def test_import_suite_times_each_program_in_a_fresh_process(monkeypatch):
  """The import suite's records, on programs cheaper than `import t5_tasks` (~10 s each here): a
  fresh interpreter per repetition, so the second program is measured as cold as the first."""
  programs = {"import_json": "import json", "import_sleep": "import time; time.sleep(0.3)"}
  monkeypatch.setattr(benchmark, "IMPORT_PROGRAMS", programs)
  bench = benchmark.Bench(config=None, params=None, hf_model=None, torch_device="cpu", reps=2, seed=0,
                          meta={"model": "none"})
  rows = {r["impl"]: r for r in benchmark.import_suite(bench)}
  assert set(rows) == set(programs)
  for row in rows.values():
    assert (row["suite"], row["case"], row["unit"]) == ("import", "cold_start", "s")
    assert len(row["times_s"]) == 2 and row["median_s"] == pytest.approx(float(np.median(row["times_s"])))
  assert min(rows["import_sleep"]["times_s"]) > 0.3 and min(rows["import_json"]["times_s"]) > 0
