"""scripts.analyze end to end: console tables, analysis.json and the HTML report."""
import json
import os
import pathlib
import re
import subprocess
import sys

from absl import app
from absl import flags
import pytest

from scripts import analyze

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "t5_tasks" / "data"


def _analyze(capsys, out: pathlib.Path, command: str, *args) -> tuple[dict, str]:
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", *args, f"--out={out}"])
  analyze.run(command, fv)
  page = (out / "report.html").read_text()
  pngs = sorted(p.name for p in out.glob("*.png"))
  assert pngs and all(f"src='{name}'" in page for name in pngs)
  return json.loads((out / "analysis.json").read_text()), capsys.readouterr().out


def test_turingadvice_on_the_real_file(capsys, tmp_path, shared_data):
  path = shared_data / "turingadvice" / "feb-14-2020_first100.jsonl"
  analysis, console = _analyze(capsys, tmp_path, "turingadvice", f"--eval_file={path}")
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  wins = sum(r["turk_ratings"]["T5-11B"]["is_preferred"] for r in rows)
  assert analysis["preference_rates"]["T5-11B"]["value"] == pytest.approx(wins / len(rows))
  rate = analysis["preference_rates"]["T5-11B"]
  assert "T5-11B" in console and f"{rate['value']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}]" in console
  assert "Paired t-tests" in console and "Preference rate by domain" in console


def test_asq_with_system_predictions_on_quickstart(capsys, tmp_path):
  raw = json.load(open(DATA / "asq_test.json"))
  predictions = tmp_path / "model" / "predictions.jsonl"
  predictions.parent.mkdir()
  # A system that always picks the first question: right exactly where the label is 0.
  predictions.write_text("".join(
      json.dumps({"task": "asq", "id": r["id"], "scores": [1.0, 0.0], "prediction": 0,
                  "gold": [1, 0] if r["label"] == 0 else [0, 1]}) + "\n" for r in raw))
  analysis, console = _analyze(capsys, tmp_path / "out", "asq", f"--annotation_dir={DATA}",
                               f"--predictions=first={predictions}")
  assert analysis["system_accuracy"]["first"]["value"] == pytest.approx(
      sum(r["label"] == 0 for r in raw) / len(raw))
  annotations = json.load(open(DATA / "asq_human_annotation_first.json"))
  correct = sum(a["true_label"] == a["annotated_label"] for a in annotations)
  assert analysis["human_accuracy"]["first"]["value"] == pytest.approx(correct / len(annotations))
  assert "Cohen's kappa" in console and "first" in analysis["by_pair_type"]


def test_agreement_on_quickstart_comparisons(capsys, tmp_path):
  comparisons = [json.loads(line) for line in open(DATA / "summarize_comparisons.jsonl")]
  analysis, console = _analyze(capsys, tmp_path, "agreement",
                               f"--comparisons={DATA / 'summarize_comparisons.jsonl'}",
                               "--comparison_format=summarize_feedback")
  assert analysis["n_comparisons"] == len(comparisons)
  credit = []
  for c in comparisons:
    lengths = [len(re.findall(r"\w+", s["text"])) for s in c["summaries"]]
    chosen, other = lengths[c["choice"]], lengths[1 - c["choice"]]
    credit.append(0.5 if chosen == other else float(chosen > other))
  assert analysis["agreement"]["with_humans"]["length"]["value"] == pytest.approx(sum(credit) / len(credit))
  assert "Agreement with humans" in console


def test_command_line_runs_the_asq_analysis(tmp_path):
  result = subprocess.run([sys.executable, "-m", "scripts.analyze", "asq", f"--annotation_dir={DATA}",
                           f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"})
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Human accuracy" in result.stdout and (tmp_path / "analysis.json").exists()
  # On a machine without CUDA or a TPU, no library's device probing reaches the console (TensorFlow's
  # `failed call to cuInit`, as absl C++ log lines `E0000 ...`), with the user's environment as is.
  assert "cuInit" not in result.stderr and not re.search(r"^[EW]\d{4} ", result.stderr, re.MULTILINE), \
      result.stderr[-3000:]


def test_unknown_analysis_is_refused(tmp_path):
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--out={tmp_path}"])
  with pytest.raises(app.UsageError, match="give one analysis: turingadvice, asq, agreement"):
    analyze.run("nonsense", fv)
