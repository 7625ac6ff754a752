"""TimeDial's real test items (../shared/data/timedial/test_first400.json) end to end: read as
released, scored by a model through the task in T5's span-corruption format, and by the overlap
baseline through the same metric path."""
import json

import gin
import jax
import numpy as np
import pytest
from absl import flags

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import evaluate
from runner import outputs
from scripts import run_baseline
from t5_tasks import vocab
from t5_tasks.sources import timedial

CONFIG = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=1)
# Bytes: 512 hold the masked turn and its neighbours (turns farther away are dropped to fit);
# 64 hold the longest option (55 bytes) between its sentinels, and EOS.
LENGTHS = {"inputs": 512, "targets": 64}
TASK = "timedial_cloze_full"


@pytest.fixture
def real_timedial(shared_data):
  gin.clear_config()
  path = shared_data / "timedial" / "test_first400.json"
  gin.bind_parameter("t5_tasks.tasks.data_files.files", {"timedial": {"test": str(path)}})
  yield path
  gin.clear_config()


def test_real_items_scored_by_a_model_and_by_the_baseline_with_the_same_metrics(real_timedial, tmp_path,
                                                                                capsys):
  items, report = timedial.read_timedial(real_timedial)
  rules = timedial.count_per_rule(items)
  print(report.summary(), rules)
  assert len(items) == report.read == 400 and report.skipped == 0
  raw = json.loads(real_timedial.read_text())
  assert sum(r["options"] for r in rules.values()) == 2 * len(raw)  # two incorrect options each

  checkpoint = tmp_path / "ckpt"
  checkpoints.save_params(str(checkpoint / "params"), init_params(CONFIG, jax.random.PRNGKey(0)))
  checkpoints.write_model_config(str(checkpoint), CONFIG)
  model_metrics = evaluate.evaluate(dataset=configs.DatasetConfig(TASK, LENGTHS, "test", 40),
                                    checkpoint_path=str(checkpoint), output_dir=str(tmp_path / "model"))
  console = capsys.readouterr().out
  assert (f"{real_timedial}: 400 TimeDial items; incorrect options by rule: "
          + ", ".join(f"{rule} {n['options']} ({n['items']} items)" for rule, n in rules.items())) in console
  # The rules counted apart from the reader, from the raw JSON.
  assert {rule: n["options"] for rule, n in rules.items()} == {
      rule: sum(item[f"incorrect{k}_rule"] == rule for item in raw for k in (1, 2)) for rule in rules}
  assert "400 records read, 0 skipped, 401 options stripped of surrounding spaces, 400 turns given a " \
         "space after the speaker tag, 23 empty trailing turns dropped" in console
  records = outputs.read_predictions(str(tmp_path / "model" / outputs.PREDICTIONS_FILE))
  assert [r["id"] for r in records] == [str(item["id"]) for item in raw]
  # Only the span is scored: each candidate's scored tokens are its option's bytes, stripped, with
  # neither sentinel nor EOS; and every input kept the masked span's sentinel.
  sentinel = vocab.get_vocabulary().vocab_size - 1
  for record, item in zip(records, raw):
    options = [item[k].strip() for k in ("correct1", "correct2", "incorrect1", "incorrect2")]
    assert record["tokens"] == [len(o.encode()) for o in options], record["id"]
    assert record["candidates_pretokenized"] == [f"<extra_id_0>{o}<extra_id_1>" for o in options]
    assert record["gold"] == [1, 1, 0, 0]
    assert "<extra_id_0>" in record["inputs_pretokenized"]
    assert len(vocab.ConfiguredVocabulary().encode(record["inputs_pretokenized"])) < LENGTHS["inputs"]
  assert sentinel == 358

  fv = flags.FlagValues()
  run_baseline.define_flags(fv)
  fv(["run_baseline", "--baseline=timedial_overlap", f"--eval_file={real_timedial}",
      f"--out={tmp_path / 'baseline'}"])
  run_baseline.run(fv)
  baseline_metrics = outputs.read_metrics(str(tmp_path / "baseline"))
  names = set(model_metrics[TASK])
  assert names == set(baseline_metrics[TASK])
  assert {"two_best_accuracy", "accuracy", "error_rate/Rule 1", "error_rate/Rule 2",
          "error_rate/Rule 3"} <= names
  baseline_records = outputs.read_predictions(str(tmp_path / "baseline" / outputs.PREDICTIONS_FILE))
  scores = np.asarray([r["scores"] for r in baseline_records])
  # 2-best accuracy by hand: both correct options strictly above both incorrect ones, ties at
  # random (the expected credit of breaking them uniformly).
  def credit(row):
    order = sorted(range(4), key=lambda k: -row[k])
    kth = row[order[1]]
    above = [k for k in range(4) if row[k] > kth]
    tied = [k for k in range(4) if row[k] == kth]
    if any(k >= 2 for k in above):
      return 0.0
    need = 2 - len(above)
    good = sum(k < 2 for k in tied)
    return float(np.prod([(good - i) / (len(tied) - i) for i in range(need)]))
  expected = np.mean([credit(list(row)) for row in scores])
  assert baseline_metrics[TASK]["two_best_accuracy"]["value"] == pytest.approx(expected)
  html = (tmp_path / "model" / "report.html").read_text()
  assert f"{TASK}: error_rate by group" in html and "two_best_accuracy" in html
  print({name: (model_metrics[TASK][name]["value"], baseline_metrics[TASK][name]["value"])
         for name in sorted(names)})
