"""Benchmark records: one JSON object per measurement, with ratios against every other implementation, and a table.

Every ratio comes from the interleaved repetitions one by one (repetition i of A against repetition
i of B, which ran back to back), so its median and min-max say how far the machine let it drift.
"""
import json
import os
import statistics
import tempfile

from scripts.bench.timing import Timing

SPREAD_WARNING = 0.2  # (max - min) / median of the per-repetition values above which a number is not to be read
MFU_ABOVE_CEILING = "ceiling measured low: an MFU over 100% cannot be read"


def spread(values: list[float]) -> dict:
  """Median, min, max and (max - min) / median of per-repetition values, and the values themselves."""
  median = statistics.median(values)
  return dict(median=median, min=min(values), max=max(values), spread=(max(values) - min(values)) / median,
              reps=list(values))


def mfu_flag(mfu: float) -> str | None:
  """What to say beside an MFU over 100%: the work outran the matmul ceiling measured in the same
  run, so the probe caught the machine slow (a shared machine's load) and the figure means nothing."""
  return MFU_ABOVE_CEILING if mfu > 1 else None


def case_records(meta: dict, timings: dict[str, Timing], work: dict[str, dict], peaks: dict[str, float],
                 agreement: dict) -> list[dict]:
  """One record per implementation of one case.

  `work[impl]` holds `items` (what one run produces, in meta's unit), `flops` and `engine` ('jax' or
  'torch'); MFU is against the matmul rate `peaks[engine]` measured alongside (`mfu_flag` says
  where it cannot be read).
  """
  throughput = {impl: work[impl]["items"] / timings[impl].median_s for impl in work}
  rates = {impl: [work[impl]["items"] / t for t in timings[impl].times_s] for impl in work}
  records = []
  for impl, spec in work.items():
    timing = timings[impl]
    peak = peaks[spec["engine"]]
    mfu = spec["flops"] / timing.median_s / peak
    records.append(dict(
        meta, impl=impl, engine=spec["engine"], throughput=throughput[impl], median_s=timing.median_s,
        times_s=timing.times_s, first_call_s=timing.first_call_s, compile_s=timing.compile_s,
        flops=spec["flops"], peak_flops_per_s=peak, mfu=mfu, mfu_flag=mfu_flag(mfu),
        ratios={other: spread([a / b for a, b in zip(rates[impl], rates[other])]) for other in work if other != impl},
        agreement=agreement))
  return records


def peak_records(meta: dict, timings: dict[str, Timing], flops: dict[str, int]) -> list[dict]:
  """Records of the matmul probes: their rate is each engine's ceiling in this run."""
  return [dict(meta, impl=name, engine=name.split("_")[0], throughput=flops[name] / timings[name].median_s,
               unit="FLOP/s", median_s=timings[name].median_s, times_s=timings[name].times_s,
               flops_per_s=spread([flops[name] / t for t in timings[name].times_s]))
          for name in flops]


def duration_records(meta: dict, timings: dict[str, Timing]) -> list[dict]:
  """Records of work timed as a whole (no FLOPs, no baseline to race): its median and every time."""
  return [dict(meta, impl=name, median_s=timing.median_s, times_s=timing.times_s, seconds=spread(timing.times_s))
          for name, timing in timings.items()]


def _format_agreement(agreement: dict) -> str:
  return ", ".join(f"{name} {value:.3g}" for name, value in agreement.items())


def _range(stats: dict, scale: float = 1.0, fmt: str = ".4g") -> str:
  return (f"{stats['median'] / scale:{fmt}} [{stats['min'] / scale:{fmt}}-{stats['max'] / scale:{fmt}}]"
          f" spread {stats['spread']:.0%}")


def _warning(where: str, what: str, stats: dict) -> list[str]:
  if stats["spread"] <= SPREAD_WARNING:
    return []
  return [f"WARNING [{where}] {what}: per-repetition spread {stats['spread']:.0%} > {SPREAD_WARNING:.0%}; "
          f"the machine drifted more than this number can resolve"]


def table(records: list[dict]) -> str:
  """A human-readable table: one block per (suite, case) with each implementation's median, the
  matmul ceilings, and every ratio as median [min-max] of its per-repetition values, with a WARNING
  line under any value whose spread exceeds SPREAD_WARNING."""
  lines = []
  cases = []
  for record in records:
    if "ratios" in record and (record["suite"], record["case"]) not in cases:
      cases.append((record["suite"], record["case"]))
  for suite, case in cases:
    where = f"{suite} / {case}"
    in_case = [r for r in records if (r["suite"], r["case"]) == (suite, case)]
    rows = [r for r in in_case if "ratios" in r]
    first = rows[0]
    lines.append(f"\n[{where}] {first['shape']}  load {first['load_start']:.2f}->{first['load_end']:.2f}"
                 f"  {len(first['times_s'])} repetitions")
    lines.append(f"  agreement: {_format_agreement(first['agreement'])}")
    lines.append(f"  {'implementation':<18}{first['unit']:>16}{'median s':>10}{'compile s':>11}{'MFU':>8}"
                 f"{'peak GF/s':>11}")
    for r in rows:
      lines.append(f"  {r['impl']:<18}{r['throughput']:>16.1f}{r['median_s']:>10.4f}{r['compile_s']:>11.2f}"
                   f"{r['mfu']:>8.1%}{r['peak_flops_per_s'] / 1e9:>11.1f}"
                   + (f"  <- {r['mfu_flag']}" if r['mfu_flag'] else ""))
    for r in in_case:
      if "flops_per_s" in r:
        lines.append(f"  ceiling {r['impl']:<14} GFLOP/s {_range(r['flops_per_s'], 1e9, '.1f')}")
        lines += _warning(where, r["impl"], r["flops_per_s"])
    for i, r in enumerate(rows):
      for other in [o["impl"] for o in rows[i + 1:]]:
        lines.append(f"  ratio {r['impl']} vs {other}: x{_range(r['ratios'][other])}")
        lines += _warning(where, f"{r['impl']} vs {other}", r["ratios"][other])
  durations = [r for r in records if "seconds" in r]
  if durations:
    lines.append(f"\n[durations]  load {durations[0]['load_start']:.2f}->{durations[0]['load_end']:.2f}")
    for r in durations:
      lines.append(f"  {r['suite']}/{r['impl']:<24} s {_range(r['seconds'], fmt='.2f')}")
      lines += _warning(f"{r['suite']} / {r['case']}", r["impl"], r["seconds"])
  return "\n".join(lines)


def write_json_lines(path, records: list[dict]):
  """Writes one JSON object per line, atomically (a temporary file in the same folder, then rename)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")
  os.replace(f.name, path)
