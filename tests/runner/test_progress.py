"""Progress lines: durations with days, rates over the window since the last report, ETA."""
import time

import pytest

from runner import progress


def test_durations_keep_their_days():
  assert progress.format_duration(106 * 3600 + 33 * 60 + 29) == "4d 10:33:29"
  assert progress.format_duration(59.6) == "0:01:00"
  assert progress.format_duration(float("inf")) == "?"


def test_a_report_prints_done_rate_tokens_and_eta_of_its_window_and_the_first_says_it_compiled():
  lines = []
  counter = progress.Progress("step", 100, "steps", printer=lambda line, flush: lines.append(line))
  counter.advance(10, tokens=5000)
  time.sleep(0.2)
  rates = counter.report("loss 1.2345")
  steps_per_sec = 10 / 0.2
  assert 0.5 * steps_per_sec < rates["steps_per_sec"] <= steps_per_sec
  assert rates["tokens_per_sec"] == pytest.approx(rates["steps_per_sec"] * 500)
  label, details, rate, tokens, compiling, eta = lines[0].split("  ")
  assert (label, details) == ("step 10/100", "loss 1.2345")
  assert rate == f"{rates['steps_per_sec']:.2f} steps/s" and tokens.endswith(" tokens/s")
  assert compiling == "(first window: includes compiling)"
  seconds = 90 / rates["steps_per_sec"]
  assert eta == f"ETA {progress.format_duration(seconds)}"
  # The next window starts empty: its rate counts only what came after the report.
  counter.advance(0)
  assert counter.report()["steps_per_sec"] == 0 and lines[1].endswith("ETA ?")
  assert "compiling" not in lines[1]
