"""Benchmark records: one JSON object per measurement, with ratios against every other implementation, and a table."""
import json
import os
import tempfile

from scripts.bench_timing import Timing


def case_records(meta: dict, timings: dict[str, Timing], work: dict[str, dict], peaks: dict[str, float],
                 agreement: dict) -> list[dict]:
  """One record per implementation of one case.

  `work[impl]` holds `items` (what one run produces, in meta's unit), `flops` and `engine` ('jax' or
  'torch'); MFU is against the matmul rate `peaks[engine]` measured alongside.
  """
  throughput = {impl: work[impl]["items"] / timings[impl].median_s for impl in work}
  records = []
  for impl, spec in work.items():
    timing = timings[impl]
    peak = peaks[spec["engine"]]
    records.append(dict(
        meta, impl=impl, engine=spec["engine"], throughput=throughput[impl], median_s=timing.median_s,
        times_s=timing.times_s, first_call_s=timing.first_call_s, compile_s=timing.compile_s,
        flops=spec["flops"], peak_flops_per_s=peak, mfu=spec["flops"] / timing.median_s / peak,
        ratios={other: throughput[impl] / throughput[other] for other in work if other != impl},
        agreement=agreement))
  return records


def peak_records(meta: dict, timings: dict[str, Timing], flops: dict[str, int]) -> list[dict]:
  """Records of the matmul probes: their rate is each engine's ceiling in this run."""
  return [dict(meta, impl=name, engine=name.split("_")[0], throughput=flops[name] / timings[name].median_s,
               unit="FLOP/s", median_s=timings[name].median_s, times_s=timings[name].times_s)
          for name in flops]


def duration_records(meta: dict, timings: dict[str, Timing]) -> list[dict]:
  """Records of work timed as a whole (no FLOPs, no baseline to race): its median and every time."""
  return [dict(meta, impl=name, median_s=timing.median_s, times_s=timing.times_s) for name, timing in timings.items()]


def _format_agreement(agreement: dict) -> str:
  return ", ".join(f"{name} {value:.3g}" for name, value in agreement.items())


def table(records: list[dict]) -> str:
  """A human-readable table: one block per (suite, case), ratios against every other implementation."""
  lines = []
  cases = []
  for record in records:
    if record["impl"].endswith("_matmul") or "ratios" not in record:
      continue
    key = (record["suite"], record["case"])
    if key not in cases:
      cases.append(key)
  for suite, case in cases:
    rows = [r for r in records if (r["suite"], r["case"]) == (suite, case) and not r["impl"].endswith("_matmul")]
    first = rows[0]
    lines.append(f"\n[{suite} / {case}] {first['shape']}  load {first['load_start']:.2f}->{first['load_end']:.2f}")
    lines.append(f"  agreement: {_format_agreement(first['agreement'])}")
    lines.append(f"  {'implementation':<18}{first['unit']:>16}{'median s':>10}{'compile s':>11}{'MFU':>8}"
                 f"{'peak GF/s':>11}  ratios")
    for r in rows:
      ratios = "  ".join(f"x{value:.2f} vs {other}" for other, value in r["ratios"].items())
      lines.append(f"  {r['impl']:<18}{r['throughput']:>16.1f}{r['median_s']:>10.4f}{r['compile_s']:>11.2f}"
                   f"{r['mfu']:>8.1%}{r['peak_flops_per_s'] / 1e9:>11.1f}  {ratios}")
  durations = [r for r in records if "ratios" not in r and not r["impl"].endswith("_matmul")]
  if durations:
    lines.append("\n[durations]")
    lines += [f"  {r['suite']}/{r['impl']:<24}{r['median_s']:>8.2f} s median of {len(r['times_s'])}"
              for r in durations]
  return "\n".join(lines)


def write_json_lines(path, records: list[dict]):
  """Writes one JSON object per line, atomically (a temporary file in the same folder, then rename)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
  os.replace(f.name, path)
