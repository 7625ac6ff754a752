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


def _lcs(a, b):
  table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
  for i, x in enumerate(a):
    for j, y in enumerate(b):
      table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
  return table[-1][-1]


def _copying(post: str, summary: str) -> float:
  """Appendix G.5: LCS of the word bigrams of summary and post, over the summary's bigrams."""
  bigrams = lambda text: list(zip(re.findall(r"\w+", text.lower()), re.findall(r"\w+", text.lower())[1:]))
  return _lcs(bigrams(post), bigrams(summary)) / len(bigrams(summary)) if bigrams(summary) else 0.0


def _credit(chosen: float, other: float) -> float:
  return 0.5 if chosen == other else float(chosen > other)


def test_agreement_on_quickstart_comparisons(capsys, tmp_path):
  comparisons = [json.loads(line) for line in open(DATA / "summarize_comparisons.jsonl")]
  analysis, console = _analyze(capsys, tmp_path, "agreement",
                               f"--comparisons={DATA / 'summarize_comparisons.jsonl'}",
                               "--comparison_format=summarize_feedback")
  assert analysis["n_comparisons"] == len(comparisons)
  length, copying = [], []
  for c in comparisons:
    chosen, other = c["summaries"][c["choice"]]["text"], c["summaries"][1 - c["choice"]]["text"]
    length.append(_credit(len(re.findall(r"\w+", chosen)), len(re.findall(r"\w+", other))))
    post = f"{c['info']['title']}\n{c['info']['post']}"
    copying.append(_credit(_copying(post, chosen), _copying(post, other)))
  rates = analysis["agreement"]["with_humans"]
  assert rates["length"]["value"] == pytest.approx(sum(length) / len(length))
  assert rates["copying"]["value"] == pytest.approx(sum(copying) / len(copying))
  # Labelers: comparisons (post, pair of summaries in either order) labelled by two workers.
  labels = {}
  for c in comparisons:
    texts = [s["text"] for s in c["summaries"]]
    labels.setdefault((c["info"]["id"], frozenset(texts)), []).append((c["worker"], texts[c["choice"]]))
  assert all(len(group) <= 2 for group in labels.values())  # so each has one pair of labels at most
  agree = [float(a[1] == b[1]) for a, b in (g for g in labels.values() if len(g) == 2) if a[0] != b[0]]
  labelers = analysis["labeler_agreement"]["rate"]
  assert labelers["value"] == pytest.approx(sum(agree) / len(agree)) and labelers["n"] == len(agree) > 0
  # ROUGE judges the comparisons whose post has a reference summary that is neither of the two.
  references = {c["info"]["id"]: s["text"] for c in comparisons for s in c["summaries"] if s["policy"] == "ref"}
  shows_reference = sum(c["info"]["id"] in references and any(s["policy"] == "ref" for s in c["summaries"])
                        for c in comparisons)
  no_reference = sum(c["info"]["id"] not in references for c in comparisons)
  assert (analysis["rouge"]["n_without_reference"], analysis["rouge"]["n_reference_is_a_candidate"]) == (
      no_reference, shows_reference)
  assert rates["ROUGE"]["n"] == len(comparisons) - no_reference - shows_reference > 0
  assert f"left out: {no_reference} whose post has no reference summary" in console
  for row in ("Agreement with humans", "copying", "ROUGE", "labelers (another worker, same comparison)",
              f"{labelers['value']:.3f} ± {labelers['se']:.3f}", "Human preference for A over B"):
    assert row in console
  controlled = {(c["a"], c["b"]): c for c in analysis["length_controlled"]["pairs"]}
  policies = {s["policy"] for c in comparisons for s in c["summaries"]}
  assert set(controlled) == {(p, "ref") for p in policies - {"ref"}}  # each policy against the reference
  e = controlled[("sup4_ppo_rm3_kl10", "ref")]["length_controlled"]
  assert f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]" in console


def test_length_control_of_an_unknown_policy_is_refused(tmp_path):
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--comparisons={DATA / 'summarize_comparisons.jsonl'}", "--length_controlled=nope,ref",
      f"--out={tmp_path}"])
  with pytest.raises(app.UsageError, match="--length_controlled: length control: policy 'nope' is in no "
                                           "comparison; policies: pretrain_1b, pretrain_6b, ref"):
    analyze.run("agreement", fv)


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
