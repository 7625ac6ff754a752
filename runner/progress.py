"""Progress lines of the long loops (training steps, scored items, generated inputs).

One line per report: what is done of the total, the rate and real tokens per second since the
previous report, and the time left at that rate. The first window holds the first call of each
jitted step, so its line says that its rate includes compiling. Only process 0 prints, so a pod
prints once.
"""
import math
import time

import jax


def format_duration(seconds: float) -> str:
  """`H:MM:SS`, with days in front when there are any (`4d 10:33:29`); `?` when unknown."""
  if not math.isfinite(seconds):
    return "?"
  minutes, secs = divmod(int(round(max(seconds, 0.0))), 60)
  hours, minutes = divmod(minutes, 60)
  days, hours = divmod(hours, 24)
  return (f"{days}d " if days else "") + f"{hours}:{minutes:02d}:{secs:02d}"


class Progress:
  """Counts work as it is done and reports rates over the window since the last report."""

  def __init__(self, label: str, total: int | None, unit: str, printer=print,
               flops_per_unit: float | None = None, peak_flops: float | None = None):
    """`flops_per_unit` and `peak_flops` (the devices' summed FLOP/s), when both are known, add
    model-FLOPs utilisation to each line."""
    self.label, self.total, self.unit, self._print = label, total, unit, printer
    self._flops_per_unit, self._peak_flops = flops_per_unit, peak_flops
    self.done = 0
    self._window_start = self._last_report = time.perf_counter()
    self._window_done = self._window_tokens = 0
    self._reports = 0

  def advance(self, count: int = 1, tokens: int = 0) -> None:
    self.done += count
    self._window_done += count
    self._window_tokens += tokens

  def seconds_since_report(self) -> float:
    return time.perf_counter() - self._last_report

  def report(self, details: str = "") -> dict[str, float]:
    """Prints one line and starts a new window; returns `{unit}_per_sec` and `tokens_per_sec` (and
    `mfu` where the peak is known)."""
    now = time.perf_counter()
    elapsed = max(now - self._window_start, 1e-9)
    rate, token_rate = self._window_done / elapsed, self._window_tokens / elapsed
    of_total = "" if self.total is None else f"/{self.total}"
    parts = [f"{self.label} {self.done}{of_total}"]
    if details:
      parts.append(details)
    parts.append(f"{rate:.2f} {self.unit}/s")
    if self._window_tokens:
      parts.append(f"{token_rate:.0f} tokens/s")
    rates = {f"{self.unit}_per_sec": rate, "tokens_per_sec": token_rate}
    if self._flops_per_unit and self._peak_flops:
      rates["mfu"] = rate * self._flops_per_unit / self._peak_flops
      parts.append(f"MFU {rates['mfu']:.1%}")
    if not self._reports:
      parts.append("(first window: includes compiling)")
    if self.total is not None:
      left = max(self.total - self.done, 0)
      parts.append(f"ETA {format_duration(left / rate if rate > 0 else (0.0 if not left else math.inf))}")
    if jax.process_index() == 0:
      self._print("  ".join(parts), flush=True)
    self._window_start = self._last_report = now
    self._window_done = self._window_tokens = 0
    self._reports += 1
    return rates
