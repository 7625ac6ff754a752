"""Progress lines: durations with days, rates over the window since the last report, ETA."""
import re
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


def test_model_flops_utilisation_is_printed_only_where_the_peak_is_known():
  lines = []
  counter = progress.Progress("step", 100, "steps", printer=lambda line, flush: lines.append(line),
                              flops_per_unit=2e12, peak_flops=1e15)
  counter.advance(10, tokens=5000)
  time.sleep(0.2)
  rates = counter.report("loss 1.0")
  assert rates["mfu"] == pytest.approx(rates["steps_per_sec"] * 2e12 / 1e15)
  assert lines[0].split("  ")[4] == f"MFU {rates['mfu']:.1%}"
  unknown = progress.Progress("step", 100, "steps", printer=lambda line, flush: lines.append(line),
                              flops_per_unit=2e12, peak_flops=None)  # a CPU
  unknown.advance(10, tokens=5000)
  assert "mfu" not in unknown.report() and "MFU" not in lines[1]


def test_peak_flops_by_device_kind():
  from models import flops  # pylint: disable=g-import-not-at-top
  # JAX's device_kind strings; the peaks are the vendors' dense bf16 data-sheet figures.
  assert flops.peak_flops_per_second(["NVIDIA H100 80GB HBM3"] * 8) == 8 * 989e12
  assert flops.peak_flops_per_second(["NVIDIA H100 PCIe"]) == 756e12
  assert flops.peak_flops_per_second(["TPU v5 lite"] * 4) == 4 * 197e12
  assert flops.peak_flops_per_second(["TPU v5"]) == 459e12
  assert flops.peak_flops_per_second(["TPU v4", "TPU v4"]) == 2 * 275e12
  assert flops.peak_flops_per_second(["NVIDIA A100-SXM4-80GB"]) == 312e12
  assert flops.peak_flops_per_second(["cpu"]) is None
  assert flops.peak_flops_per_second(["NVIDIA H200", "cpu"]) is None


def test_training_prints_mfu_for_a_device_of_known_peak_and_none_on_a_cpu(tmp_path, monkeypatch, capsys):
  import optax  # pylint: disable=g-import-not-at-top
  from models import flops  # pylint: disable=g-import-not-at-top
  from runner import configs, partitioning, train  # pylint: disable=g-import-not-at-top
  from tests.runner.test_train_entry import TINY, numbered_batches  # pylint: disable=g-import-not-at-top

  def step_lines(name):
    train.train(model_config=TINY,
                train_dataset=train.BatchSource(numbered_batches, 4, {"inputs": 10, "targets": 6}),
                training=configs.TrainingConfig(2, optimizer=optax.sgd(0.0), log_every=1),
                checkpoint=configs.CheckpointConfig(), partitioner=partitioning.Partitioner(),
                model_dir=str(tmp_path / name))
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]

  assert len(step_lines("cpu")) == 2 and not any("MFU" in line for line in step_lines("cpu_again"))
  monkeypatch.setattr(flops, "PEAK_BF16_FLOPS", (("cpu", 1e9),))  # a fake peak for the CPU's device kind
  for line in step_lines("known_peak"):
    rate = float(re.search(r"([0-9.]+) steps/s", line).group(1))
    mfu = float(re.search(r"MFU ([0-9.]+)%", line).group(1)) / 100
    # numbered_batches' padded shapes: 4 rows of 10 input and 6 target tokens (models/flops.py's count).
    assert mfu == pytest.approx(rate * flops.training_flops(TINY, 4, 10, 6) / 1e9, rel=0.01, abs=1e-3)
