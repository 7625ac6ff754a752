"""scripts.analyze end to end: console tables, analysis.json and the HTML report."""
import json
import os
import pathlib
import re
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np
import pytest

from runner import outputs
from scripts import analyze
from scripts import interpreter

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
  assert "Improvement (Fig. 5)" in console and "Preference rate by domain" in console
  # Each table says what its figures are over: this file's 100 situations, not the paper's round of 200.
  over = "over 100 situations, not the whole round (the paper's figures: all 200)"
  titles = [line for line in console.splitlines() if over in line]
  assert len(titles) == 5 and analysis["population"]["n_situations"] == 100
  fig7 = console[console.index("Fig. 7 beside the paper"):]
  t5 = next(line for line in fig7.splitlines() if line.startswith("T5-11B") and "never helpful" in line)
  assert "(93 lost of 100 situations)" in t5 and "26% (§5.1), 31% (Fig. 7 caption), over 200 situations" in t5


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


def test_asq_predictions_with_no_annotated_item_are_said_in_one_line(capsys, tmp_path):
  predictions = tmp_path / "other" / "predictions.jsonl"
  predictions.parent.mkdir()
  predictions.write_text(json.dumps({"task": "asq", "id": "not-annotated", "scores": [1.0, 0.0],
                                     "prediction": 0, "gold": [1, 0]}) + "\n")
  analysis, console = _analyze(capsys, tmp_path / "out", "asq", f"--annotation_dir={DATA}",
                               f"--predictions={predictions}")
  assert "other" not in analysis["by_pair_type"] and analysis["system_accuracy"]["other"]["value"] == 1.0
  warnings = [line for line in console.splitlines() if line.startswith("WARNING:")]
  assert warnings == ["WARNING: other: none of its 1 items is annotated in these rounds (the annotated items "
                      "are ASQ's asq_annotation.json), so it has no accuracy-by-pair-type row"]


def test_asq_table4_on_the_real_annotations(capsys, tmp_path, shared_data):
  """The printed Table 4: a row per pair type, humans from the first round (the paper's C+C 0.84,
  C+{C,I} 0.89; % in data 32 and 46: tests/t5_tasks/test_analysis_asq.py checks them against the
  paper's text), a column for each system."""
  analysis, console = _analyze(capsys, tmp_path, "asq", f"--annotation_dir={shared_data / 'asq'}")
  assert analysis["by_pair_type"]["humans"]["all"]["n"] == 200
  assert re.search(r"^C\+C +0\.844 \[[0-9.]+, [0-9.]+\] n=64 +32\.0% *$", console, re.M), console
  assert re.search(r"^C\+\{C,I\} +0\.890 \[[0-9.]+, [0-9.]+\] n=91 +45\.5% *$", console, re.M), console
  assert "Accuracy by pair type (Table 4; humans: the first round)" in console

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
  with pytest.raises(ValueError, match="--length_controlled: length control: policy 'nope' is in no "
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


# Three seeds' metrics.json: accuracy (and Spearman of the ranked AG and DIA) per criterion; the
# third run did not evaluate DII, and read its HSO through the `_tfds` twin.
HEAP_RUNS = [
    {"heap_ah": (0.60,), "heap_ag": (0.70, 0.30), "heap_dia": (0.55, 0.20), "heap_dii": (0.65,),
     "heap_hso": (0.50,)},
    {"heap_ah": (0.64,), "heap_ag": (0.78, 0.25), "heap_dia": (0.61, 0.10), "heap_dii": (0.59,),
     "heap_hso": (0.58,)},
    {"heap_ah": (0.71,), "heap_ag": (0.74, 0.35), "heap_dia": (0.52, 0.15), "heap_hso_tfds": (0.62,)},
]
# Table 3's clusters of these criteria, from the paper (cluster 1 "context", 2 "no_context", 3
# "hate_speech", §6's "tellmewhy" and "defeasible_inference"); "all" is Table 2's Average.
PAPER_CLUSTERS = {"context": ("ah", "dia", "dii"), "no_context": ("ag", "hso"), "hate_speech": ("hso",),
                  "tellmewhy": ("ag",), "defeasible_inference": ("dia", "dii"),
                  "all": ("ah", "ag", "dia", "dii", "hso")}


def _criterion(run: dict, abbreviation: str):
  return run.get(f"heap_{abbreviation}") or run.get(f"heap_{abbreviation}_tfds")


def test_heap_runs_mean_and_std_over_seeds(capsys, tmp_path):
  """In this process: the README's `scripts.analyze heap_runs` command runs as a subprocess in
  tests/test_readme.py; this checks its numbers."""
  dirs = []
  for seed, run in enumerate(HEAP_RUNS):
    metrics = {"asq_intent_cloze": {"accuracy": outputs.interval(0.9, 0.8, 1.0)}}
    for task, values in run.items():
      metrics[task] = {"pairwise_accuracy": outputs.interval(values[0], values[0] - 0.1, values[0] + 0.1)}
      if len(values) > 1:
        metrics[task]["spearman"] = outputs.interval(values[1], values[1] - 0.2, values[1] + 0.2)
    dirs.append(tmp_path / f"seed{seed}")
    dirs[-1].mkdir()
    outputs.write_metrics(str(dirs[-1]), metrics, provenance={"seed": seed})
  output = tmp_path / "table" / "heap_runs.json"
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--eval_dirs={','.join(map(str, dirs))}", f"--output={output}"])
  analyze.run("heap_runs", fv)
  stdout = capsys.readouterr().out
  assert f"(per-protocol tables: {interpreter.python()} -m scripts.heap)" in stdout, stdout  # the running Python
  table = json.loads(output.read_text())
  assert table["runs"] == [str(d) for d in dirs]
  for abbreviation, key in (("ah", "AH"), ("ag", "AG"), ("dia", "DIA"), ("dii", "DII"), ("hso", "HSO")):
    values = [_criterion(run, abbreviation) for run in HEAP_RUNS if _criterion(run, abbreviation)]
    accuracy = table["criteria"][key]["pairwise_accuracy"]
    assert accuracy["n"] == len(values)
    assert accuracy["mean"] == pytest.approx(np.mean([v[0] for v in values]))
    assert accuracy["std"] == pytest.approx(np.std([v[0] for v in values], ddof=1))
    assert ("spearman" in table["criteria"][key]) == (len(values[0]) > 1)
    if len(values[0]) > 1:
      assert table["criteria"][key]["spearman"]["mean"] == pytest.approx(np.mean([v[1] for v in values]))
      assert table["criteria"][key]["spearman"]["std"] == pytest.approx(np.std([v[1] for v in values], ddof=1))
  assert sorted(table["criteria"]) == ["AG", "AH", "DIA", "DII", "HSO"]
  for cluster, members in PAPER_CLUSTERS.items():
    per_run = [np.mean([_criterion(run, a)[0] for a in members if _criterion(run, a)]) for run in HEAP_RUNS]
    entry = table["clusters"][cluster]["pairwise_accuracy"]
    assert entry["mean"] == pytest.approx(np.mean(per_run)), cluster
    assert entry["std"] == pytest.approx(np.std(per_run, ddof=1)), cluster
  assert "story_rewriting" not in table["clusters"]  # none of its criteria was evaluated
  assert table["clusters"]["context"]["criteria"] == [2, 3]  # the third run lacks DII
  assert table["criteria"]["DII"]["runs"] == 2 and table["criteria"]["HSO"]["runs"] == 3
  ag = table["criteria"]["AG"]["pairwise_accuracy"]
  assert f"{100 * ag['mean']:.2f} ± {100 * ag['std']:.2f}" in stdout
  assert "HEAP per criterion over 3 runs (Table 2)" in stdout and "Table 3" in stdout


def test_heap_counts_every_criterion_with_a_file(capsys, tmp_path, shared_data):
  """`scripts.analyze heap` on the real data: the counts are HEAP's rule recomputed from the raw
  files (tests/t5_tasks/test_sources_heap.py), split 80/10/10; the six sources with no file here
  are named as brought by the user."""
  from tests.t5_tasks import test_sources_heap as recount  # pylint: disable=g-import-not-at-top
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--data_dir={shared_data}", f"--output={tmp_path / 'counts.json'}"])
  counts = analyze.run("heap", fv)
  console = capsys.readouterr().out
  assert json.loads((tmp_path / "counts.json").read_text()) == counts
  chasm = sorted((shared_data / "heap" / "chasm").glob("*.json"))
  for task in ("CNI", "CNO", "CNSt", "HSO"):
    assert counts[task]["comparisons"] == recount._chasm_expected(chasm, task)
  tellmewhy = recount._tellmewhy_expected(shared_data / "heap" / "tellmewhy" / "test_caters_subset.csv")
  assert [counts[t]["comparisons"] for t in ("AV", "AG", "QA")] == [tellmewhy[t] for t in ("AV", "AG", "QA")]
  missing = [a for a, e in counts.items() if not e["files"]]
  assert missing == ["HS", "BCN", "CCN", "CNG", "CNSp", "CNSu"]
  for abbreviation, e in counts.items():
    if e["files"]:
      held_out = max(1, round(0.1 * e["comparisons"]))
      assert (e["validation"], e["test"], e["train"]) == (held_out, held_out, e["comparisons"] - 2 * held_out)
      assert re.search(rf"^{abbreviation} +.+? {e['comparisons']} +{e['train']} ", console, re.M), abbreviation
  assert console.count("bring your own file") == 6
  assert f"16 of 22 criteria have a file here; {sum(e['comparisons'] or 0 for e in counts.values())}" in console


def test_asq_analysis_and_heap_counts_read_and_write_a_bucket(capsys, tmp_path, bucket):
  """--annotation_dir, --predictions, --data_dir, --out and --output in a bucket: the same results
  as from and to local folders, written there."""
  import storage  # pylint: disable=g-import-not-at-top
  raw = json.load(open(DATA / "asq_test.json"))
  lines = "".join(json.dumps({"task": "asq", "id": r["id"], "scores": [1.0, 0.0], "prediction": 0,
                              "gold": [1, 0] if r["label"] == 0 else [0, 1]}) + "\n" for r in raw)
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "predictions.jsonl").write_text(lines)
  storage.write_text(f"{bucket}/model/predictions.jsonl", lines)
  for name in ("asq_human_annotation_first.json", "asq_human_annotation_second.json", "asq_test.json"):
    storage.write_bytes(f"{bucket}/asq/{name}", (DATA / name).read_bytes())
  local, _ = _analyze(capsys, tmp_path / "out", "asq", f"--annotation_dir={DATA}",
                      f"--predictions={tmp_path / 'model' / 'predictions.jsonl'}")
  fv = flags.FlagValues()
  analyze.define_flags(fv)
  fv(["analyze", f"--annotation_dir={bucket}/asq", f"--predictions={bucket}/model/predictions.jsonl",
      f"--out={bucket}/out"])
  found = analyze.run("asq", fv)
  assert found == local and "model" in found["system_accuracy"]  # named by the predictions' folder
  assert json.loads(storage.read_text(f"{bucket}/out/analysis.json")) == found
  assert storage.exists(f"{bucket}/out/report.html")

  layout = {"tellmewhy/tellmewhy_test_caters_sample.csv": "tellmewhy_test_caters_sample.csv",
            "chasm/heap_chasm.json": "heap_chasm.json", "heap_hellaswag.jsonl": "heap_hellaswag.jsonl"}
  for target, name in layout.items():
    storage.write_bytes(f"{bucket}/heap/{target}", (DATA / name).read_bytes())
    storage.write_bytes(str(tmp_path / "heap" / target), (DATA / name).read_bytes())
  counts = {}
  for where in (str(tmp_path), bucket):
    fv = flags.FlagValues()
    analyze.define_flags(fv)
    fv(["analyze", f"--data_dir={where}/heap", f"--output={where}/counts/heap.json"])
    counts[where] = analyze.run("heap", fv)
    assert json.loads(storage.read_text(f"{where}/counts/heap.json")) == counts[where]
  console = capsys.readouterr().out
  def relative(found, root):
    return {a: {**e, "files": [f[len(root) + 1:] for f in e["files"]]} for a, e in found.items()}
  assert relative(counts[bucket], f"{bucket}/heap") == relative(counts[str(tmp_path)], f"{tmp_path}/heap")
  assert counts[bucket]["CNO"]["comparisons"]
  assert counts[bucket]["HS"]["files"] == [f"{bucket}/heap/heap_hellaswag.jsonl"]
  assert f"{bucket}/heap (split" in console and " chasm, chasm/heap_chasm.json" in console
