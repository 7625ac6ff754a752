"""The benchmark end to end on the tiny config (no timed assertions), and its FLOP counts against the programs."""
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from models import network, scoring
from models.config import T5Config
from models import flops as bench_flops
from scripts import benchmark
from scripts.bench import report as bench_report
from scripts.bench.timing import Timing
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
  """Shapes only: tracing needs no values (and initialising would compile)."""
  return jax.eval_shape(lambda: network.init_params(TINY, jax.random.PRNGKey(0)))


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


def _blocks(stdout: str) -> dict[str, list[str]]:
  """The printed table's lines by block header ("scoring / timedial", "durations")."""
  blocks, current = {}, None
  for line in stdout.splitlines():
    header = re.match(r"\[([^\]]+)\]", line)
    if header:
      current = blocks.setdefault(header.group(1), [])
    if current is not None:
      current.append(line)
  return blocks


def _check_spread(stats: dict, values: list[float]):
  assert stats["reps"] == pytest.approx(values)
  assert stats["median"] == pytest.approx(statistics.median(values))
  assert (stats["min"], stats["max"]) == pytest.approx((min(values), max(values)))
  assert stats["spread"] == pytest.approx((max(values) - min(values)) / statistics.median(values))


def _printed(lines: list[str], what: str) -> tuple[float, float, float]:
  """(median, min, max) printed for `what` (a ratio "A vs B" or a matmul probe) in one block."""
  [line] = [l for l in lines if re.match(rf"  (ratio {what}:|ceiling {what} )", l)]
  median, low, high = re.search(r"([\d.e+-]+) \[([\d.e+-]+)-([\d.e+-]+)\] spread", line).groups()
  return float(median), float(low), float(high)


def _warned(lines: list[str], where: str) -> set[str]:
  return {re.match(rf"WARNING \[{re.escape(where)}\] (.+): per-repetition spread", l).group(1)
          for l in lines if l.startswith("WARNING")}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
  """(stdout, JSON records) of `--quick` on tiny as a user runs it, the profile suite included: one
  process, so the profile's train steps are the training suite's, compiled once.

  A fresh process (its console is the claim), held to one core as on a one-core machine: the
  benchmark gives torch and XLA a thread per core it may use, and on the suite's busy two cores a
  tiny torch op with two threads waits for the descheduled one (a Linear ~50x slower, and the
  waiting burns CPU), which was 30 of the run's 80 s of CPU. The numbers of --quick mean nothing."""
  path = tmp_path_factory.mktemp("bench") / "bench.jsonl"
  every_core = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(every_core)})  # this thread's, which the child inherits
  try:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.benchmark", "--model=tiny", "--quick", f"--json={path}",
         "--suites=scoring,training,generation,profile"],  # the import and evaluation suites: below
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, check=False)
  finally:
    os.sched_setaffinity(0, every_core)
  assert result.returncode == 0, result.stderr[-3000:]
  # The console is the benchmark's own lines: no absl INFO lines (JAX probing for a TPU) and no
  # progress bar from Hugging Face saving the twin.
  assert not re.search(r"^I\d{4} ", result.stderr, re.MULTILINE), result.stderr[-3000:]
  assert "Writing model shards" not in result.stderr, result.stderr[-3000:]
  return result.stdout, [json.loads(line) for line in path.read_text().splitlines()]


def test_benchmark_end_to_end_on_tiny(quick_run):
  """Every suite's contenders, and the printed medians, ranges, loads and WARNING lines are the
  JSON's (computed again here from the per-repetition times)."""
  stdout, records = quick_run
  records = [r for r in records if r["suite"] != "profile"]
  blocks = {where: lines for where, lines in _blocks(stdout).items() if not where.startswith("profile")}
  measured = [r for r in records if not r["impl"].endswith("_matmul")]
  assert {r["suite"] for r in measured} == set(OURS)
  assert set(blocks) == {f"{r['suite']} / {r['case']}" for r in measured}
  for suite, ours in OURS.items():
    for case in {r["case"] for r in measured if r["suite"] == suite}:
      where = f"{suite} / {case}"
      lines = blocks[where]
      rows = {r["impl"]: r for r in measured if (r["suite"], r["case"]) == (suite, case)}
      assert list(rows)[0] == ours and set(rows) == {ours} | BASELINES[suite]
      assert rows[ours]["agreement"]
      assert f"load {rows[ours]['load_start']:.2f}->{rows[ours]['load_end']:.2f}" in lines[0]
      should_warn = set()
      for impl, row in rows.items():
        assert row["throughput"] > 0 and row["median_s"] > 0 and len(row["times_s"]) == benchmark.QUICK_REPS
        assert row["mfu"] == pytest.approx(row["flops"] / row["median_s"] / row["peak_flops_per_s"])
        assert row["mfu_flag"] == (bench_report.MFU_ABOVE_CEILING if row["mfu"] > 1 else None)
        assert set(row["ratios"]) == set(rows) - {impl}
        items = row["throughput"] * row["median_s"]
        for other, stats in row["ratios"].items():
          other_items = rows[other]["throughput"] * rows[other]["median_s"]
          _check_spread(stats, [(items / t) / (other_items / u) for t, u in zip(row["times_s"], rows[other]["times_s"])])
          if list(rows).index(other) > list(rows).index(impl):  # each pair printed once, in run order
            assert _printed(lines, f"{impl} vs {other}") == pytest.approx(
                (stats["median"], stats["min"], stats["max"]), rel=1e-3)
            if stats["spread"] > 0.2:
              should_warn.add(f"{impl} vs {other}")
      peaks = [r for r in records if (r["suite"], r["case"]) == (suite, case) and r["impl"].endswith("_matmul")]
      assert {r["engine"] for r in peaks} == {"jax", "torch"}
      for peak in peaks:
        _check_spread(peak["flops_per_s"], [peak["throughput"] * peak["median_s"] / t for t in peak["times_s"]])
        assert _printed(lines, peak["impl"]) == pytest.approx(
            tuple(peak["flops_per_s"][k] / 1e9 for k in ("median", "min", "max")), abs=0.051)
        engine_rows = [r for r in rows.values() if r["engine"] == peak["engine"]]
        assert all(r["peak_flops_per_s"] == pytest.approx(peak["throughput"]) for r in engine_rows)
        if peak["flops_per_s"]["spread"] > 0.2:
          should_warn.add(peak["impl"])
      assert _warned(lines, where) == should_warn, "\n".join(lines)
  scoring_agreement = [r["agreement"] for r in measured if r["impl"] == "score_candidates"]
  assert all(value <= benchmark.SCORE_TOLERANCE for a in scoring_agreement for value in a.values())
  assert "[scoring / timedial]" in stdout  # --quick: one scoring case, of tiny shapes
  assert measured[0]["shape"]["context"] == benchmark.QUICK_SHAPES["scoring_cases"][0].context


def test_table_warns_exactly_where_the_spread_exceeds_a_fifth():
  """Hand-made timings: B's per-repetition speed against A is 2, 2, 2 (no spread), C's 1, 2, 3."""
  timings = {"a": Timing(1.0, [1.0, 1.0, 1.0]), "b": Timing(1.0, [0.5, 0.5, 0.5]), "c": Timing(1.0, [1.0, 0.5, 1 / 3])}
  work = {name: dict(items=1, engine="jax", flops=10) for name in timings}
  meta = dict(suite="s", case="k", shape={}, unit="items/s", load_start=0.5, load_end=0.7)
  records = bench_report.case_records(meta, timings, work, {"jax": 100.0}, {"diff": 0.0})
  records += bench_report.peak_records(meta, {"jax_matmul": Timing(1.0, [0.1, 0.11, 0.1])}, {"jax_matmul": 1e9})
  ratios = records[0]["ratios"]
  assert ratios["b"]["reps"] == pytest.approx([0.5] * 3) and ratios["b"]["spread"] == pytest.approx(0)
  assert ratios["c"]["reps"] == pytest.approx([1, 0.5, 1 / 3]) and ratios["c"]["spread"] == pytest.approx(4 / 3)
  lines = _blocks(bench_report.table(records))["s / k"]
  assert _printed(lines, "b vs c") == pytest.approx((1.0, 2 / 3, 2.0), rel=1e-3)
  assert _warned(lines, "s / k") == {"a vs c", "b vs c"}


def test_an_mfu_over_100_percent_is_flagged_beside_it_and_in_the_json():
  """The work outran the ceiling measured beside it (`make bench ... --quick` printed 120.0% unflagged):
  the figure is printed with the flag, and the record says it; 100% and below are not flagged."""
  assert bench_report.mfu_flag(1.2) == bench_report.MFU_ABOVE_CEILING == (
      "ceiling measured low: an MFU over 100% cannot be read")
  assert bench_report.mfu_flag(1.0) is None and bench_report.mfu_flag(0.3) is None
  timings = {"fast": Timing(1.0, [1.0, 1.0, 1.0]), "slow": Timing(1.0, [1.0, 1.0, 1.0])}
  work = {"fast": dict(items=1, engine="jax", flops=120e9), "slow": dict(items=1, engine="jax", flops=30e9)}
  meta = dict(suite="s", case="k", shape={}, unit="items/s", load_start=0.5, load_end=0.7)
  records = bench_report.case_records(meta, timings, work, {"jax": 100e9}, {"diff": 0.0})
  assert [(r["mfu"], r["mfu_flag"]) for r in records] == [
      (pytest.approx(1.2), bench_report.MFU_ABOVE_CEILING), (pytest.approx(0.3), None)]
  assert json.loads(json.dumps(records[0]))["mfu_flag"] == bench_report.MFU_ABOVE_CEILING
  lines = _blocks(bench_report.table(records))["s / k"]
  rows = {line.split()[0]: line for line in lines if line.startswith(("  fast", "  slow"))}
  assert rows["fast"].endswith(f"120.0%{100.0:>11.1f}  <- {bench_report.MFU_ABOVE_CEILING}"), rows["fast"]
  assert rows["slow"].endswith(f"30.0%{100.0:>11.1f}"), rows["slow"]


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
    _check_spread(row["seconds"], row["times_s"])
    assert row["load_start"] >= 0 and row["load_end"] >= 0
  assert min(rows["import_sleep"]["times_s"]) > 0.3 and min(rows["import_json"]["times_s"]) > 0


def test_profile_suite_prints_the_phases_of_its_json(quick_run):
  """The profile suite: every phase (measured, derived) and speedup is in the JSON and printed
  with the same numbers; derived phases are their differences repetition by repetition."""
  stdout, records = quick_run
  records = [r for r in records if r["suite"] == "profile"]
  blocks = {where: lines for where, lines in _blocks(stdout).items() if where.startswith("profile")}
  assert set(blocks) == {"profile / training", "profile / generation"}
  for case, needed in [("training", {"jax/forward", "jax/backward", "jax/optimizer", "jax/z_loss_share",
                                     "jax/train_step", "hf/forward", "hf/backward", "hf/optimizer"}),
                       ("generation", {"jax/encode", "jax/decode_step", "jax/generate", "hf/generate"})]:
    lines = blocks[f"profile / {case}"]
    rows = {r["impl"]: r for r in records if r["case"] == case}
    assert needed <= set(rows)
    times = {name: r["times_s"] for name, r in rows.items() if "times_s" in r}
    for name, row in rows.items():
      if "phase_ms" in row:
        assert len(row["times_s"]) == benchmark.QUICK_REPS
        stats = row["phase_ms"]
        assert stats["median"] == pytest.approx(1e3 * statistics.median(row["times_s"]))
        [line] = [l for l in lines if l.startswith(f"  {name} ")]
        printed = re.search(r"(\S+) \[(\S+), (\S+)\]", line[len(name) + 2:]).groups()
        assert [float(p) for p in printed] == pytest.approx([stats["median"], stats["min"], stats["max"]], abs=0.006)
      if row.get("derived"):
        plus, minus, divisor = row["of"]
        minus = [minus] if isinstance(minus, str) else minus
        assert row["times_s"] == pytest.approx(
            [(p - sum(times[m][i] for m in minus)) / divisor for i, p in enumerate(times[plus])])
      if "phase_ms" in row and not row["derived"] and name.startswith("jax/"):
        assert row["xla_flops"] > 0 and row["hlo_ops"]
      if "speedup" in row:
        ours, theirs = name.split(" vs ")
        assert row["speedup"]["reps"] == pytest.approx([b / a for a, b in zip(times[ours], times[theirs])])
        assert f"speedup {name}: x{row['speedup']['median']:.3f}" in "\n".join(lines)


def test_evaluation_suite_on_a_few_real_items(shared_data, monkeypatch):
  """The evaluation suite on 6 real TimeDial items (QUICK made smaller still, the ASQ case left out,
  one repetition without warm-up: each evaluation builds its seqio pipeline, seconds here):
  bucketed and in-order evaluations and the kernel raced, the item-count case, and the printed
  ratios, items/s and padding shares are the records' (computed again from their times)."""
  from scripts.bench import evaluation as bench_evaluation  # pylint: disable=import-outside-toplevel
  from scripts.bench import timing as bench_timing  # pylint: disable=import-outside-toplevel
  del shared_data  # the suite finds ../shared/data itself; the fixture skips without it
  monkeypatch.setattr(bench_evaluation, "QUICK", dict(items=6, batch_size=4, item_counts=(4, 8),
                                                      lengths={"inputs": 64, "targets": 16}))
  monkeypatch.setattr(bench_evaluation, "REAL_FILES", {"timedial": bench_evaluation.REAL_FILES["timedial"]})
  monkeypatch.setattr(bench_timing, "interleaved", functools.partial(bench_timing.interleaved, warmup=0))
  config = T5Config(vocab_size=384, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                    num_encoder_layers=1, num_decoder_layers=1)  # bytes: ids up to 358
  bench = benchmark.Bench(config=config, params=network.init_params(config, jax.random.PRNGKey(0)), hf_model=None,
                          torch_device="cpu", reps=1, seed=0, meta={"model": "test"}, matmul_size=64)
  records = json.loads(json.dumps(bench_evaluation.evaluation_suite(bench, quick=True)))  # as the JSON holds them
  blocks = _blocks(bench_report.table(records))
  measured = [r for r in records if not r["impl"].endswith("_matmul")]
  assert {(r["case"], r["impl"]) for r in measured} == {
      ("timedial", impl) for impl in ("bucketed", "in_order", "kernel")} | {
      ("timedial_items", "items_4"), ("timedial_items", "items_8")}
  for case in ("timedial",):
    rows = {r["impl"]: r for r in measured if r["case"] == case}
    shape = rows["kernel"]["shape"]
    assert rows["bucketed"]["agreement"]["max_abs_diff_bucketed_vs_in_order"] <= 1e-4
    assert rows["kernel"]["real_tokens"] == 4 * (round(shape["mean_context"])
                                                 + shape["candidates"] * round(shape["mean_candidate"]))
    for impl, row in rows.items():
      assert row["unit"] == "real tokens/s" and row["throughput"] == pytest.approx(row["real_tokens"] / row["median_s"])
      assert row["items_per_s"] == pytest.approx(row["items"] / row["median_s"])
      for other, stats in row["ratios"].items():
        _check_spread(stats, [(row["real_tokens"] / t) / (rows[other]["real_tokens"] / u)
                              for t, u in zip(row["times_s"], rows[other]["times_s"])])
    for impl in ("bucketed", "in_order"):
      row = rows[impl]
      assert row["items"] == shape["items"] == 6 and row["real_tokens"] == rows["bucketed"]["real_tokens"]
      assert shape["file_items"] == 400  # the whole file's, beside the items evaluated
      assert row["padding_share"] == pytest.approx(1 - row["real_tokens"] / row["positions"])
      assert shape[f"padding_{impl}"] == pytest.approx(row["padding_share"], abs=1e-4)
    assert _printed(blocks[f"evaluation / {case}"], "bucketed vs kernel") == pytest.approx(
        tuple(rows["bucketed"]["ratios"]["kernel"][k] for k in ("median", "min", "max")), rel=1e-3)
  rows = {r["impl"]: r for r in measured if r["case"] == "timedial_items"}
  for count in (4, 8):
    row = rows[f"items_{count}"]
    assert row["items"] == count and row["throughput"] == pytest.approx(count / row["median_s"])
    assert row["peak_rss_growth_mb"] >= 0 and row["shape"]["peak_rss_growth_mb"][f"items_{count}"] >= 0
