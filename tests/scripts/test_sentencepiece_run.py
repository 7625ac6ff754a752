"""A real user's path, rehearsed offline: a SentencePiece vocabulary (trained here from the quickstart
text by the `sentencepiece` package) and TuringAdvice's lengths (1,280 / 512, App. B.2) travel with
the run. Trained once with the vocabulary bound, the run is evaluated, served, exported and
re-imported without naming either again; binding bytes to it is refused in one line; the
export's tokenizer gives the task's own ids.
"""
import http.client
import json
import pathlib
import subprocess
import sys

import pytest
import seqio
import sentencepiece

from runner import model_inputs
from tests.conftest import PROJECT_ROOT
from tests.helpers.processes import start_server

LENGTHS = {"inputs": 1280, "targets": 512}  # TuringAdvice's (gin/recipes/turingadvice/task.gin)
TASK = "turingadvice_generation"
VOCABULARY = "t5_tasks.vocab.get_vocabulary.sentencepiece_model_path"
SENTENCE = "My roommate never cleans the kitchen, what should I do?"


def _run(*args, timeout=600) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                        timeout=timeout)


def _ok(result) -> str:
  assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
  return result.stdout


def _train_sentencepiece(folder: pathlib.Path) -> str:
  """A 200-piece model of the quickstart files' text, with T5's ids for padding, EOS and unknown."""
  corpus = folder / "corpus.txt"
  corpus.write_text("\n".join(path.read_text(encoding="utf-8") for path in (PROJECT_ROOT / "t5_tasks" / "data").glob("*.json*")),
                    encoding="utf-8")
  sentencepiece.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=str(folder / "quickstart"), vocab_size=200, pad_id=0, eos_id=1, unk_id=2,
      bos_id=-1, minloglevel=2)
  return str(folder / "quickstart.model")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """(model path, MODEL_DIR) of 2 steps on the advice task at 1,280 / 512 with the SentencePiece model."""
  folder = tmp_path_factory.mktemp("sentencepiece")
  model = _train_sentencepiece(folder)
  model_dir = folder / "run"
  _ok(_run("scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
           f"--gin.MODEL_DIR='{model_dir}'", "--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=2",
           f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'", f"--gin.TASK_FEATURE_LENGTHS={LENGTHS!r}",
           f"--gin.{VOCABULARY}='{model}'"))
  return model, model_dir


def _evaluate(model_dir, output_dir, *bindings):
  """scripts.evaluate as gin/runs/eval.gin leaves it: no lengths, no vocabulary bound."""
  return _run("scripts.evaluate", "--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/runs/eval.gin",
              "--gin_file=gin/mixtures/quickstart.gin", f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'",
              f"--gin.CHECKPOINT_PATH='{model_dir}'", f"--gin.EVAL_OUTPUT_DIR='{output_dir}'", *bindings)


def test_the_run_records_its_vocabulary_by_content_and_carries_a_copy(run):
  model, model_dir = run
  recorded = model_inputs.read(str(model_dir / "checkpoints" / "2"))  # a step finds its run's record
  sha256 = model_inputs.sentencepiece_vocabulary(model, 100)["sha256"]
  assert recorded["vocabulary"]["sha256"] == sha256 and recorded["vocabulary"]["size"] == 300
  assert recorded["vocabulary"]["source"] == model and recorded["task_feature_lengths"] == LENGTHS
  assert (model_dir / "sentencepiece.model").read_bytes() == pathlib.Path(model).read_bytes()


def test_evaluation_takes_the_runs_vocabulary_and_lengths_and_says_so(run, tmp_path):
  model, model_dir = run
  stdout = _ok(_evaluate(model_dir, tmp_path / "eval"))
  sha = model_inputs.sentencepiece_vocabulary(model, 100)["sha256"][:12]
  assert f"vocabulary: SentencePiece sha256 {sha} (300 ids, from {model}), as CHECKPOINT_PATH {model_dir} " \
         f"recorded ({model_dir}/model_inputs.json)" in stdout, stdout[:3000]
  assert f"feature lengths: {LENGTHS}, as CHECKPOINT_PATH {model_dir} recorded" in stdout, stdout[:3000]
  provenance = json.loads((tmp_path / "eval" / "metrics.json").read_text())["provenance"]
  assert provenance["vocabulary"]["class"] == "SentencePieceVocabulary"
  assert provenance["vocabulary"]["model_sha256"].startswith(sha)
  assert provenance["task_feature_lengths"] == LENGTHS
  config_gin = " ".join((tmp_path / "eval" / "config.gin").read_text().replace("\\\n", " ").split())
  assert f"get_vocabulary.sentencepiece_model_path = '{model_dir}/sentencepiece.model'" in config_gin, config_gin


def test_binding_bytes_to_the_run_is_refused_in_one_line(run, tmp_path):
  _, model_dir = run
  evaluation = _evaluate(model_dir, tmp_path / "eval", f"--gin.{VOCABULARY}=None")
  training = _run("scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
                  f"--gin.MODEL_DIR='{model_dir}'", "--gin.TRAIN_STEPS=4", f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'",
                  f"--gin.TASK_FEATURE_LENGTHS={LENGTHS!r}", f"--gin.{VOCABULARY}=None")
  fine_tuning = _run("scripts.train", "--gin_file=gin/runs/finetune.gin", "--gin_file=gin/quickstart.gin",
                     f"--gin.MODEL_DIR='{tmp_path / 'fine_tuned'}'", "--gin.TRAIN_STEPS=2",
                     f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'", f"--gin.INITIAL_CHECKPOINT_PATH='{model_dir}'",
                     f"--gin.{VOCABULARY}=None")
  for result, what in ((evaluation, "CHECKPOINT_PATH"), (training, "MODEL_DIR"),
                       (fine_tuning, "INITIAL_CHECKPOINT_PATH")):
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(f"error: the tasks' vocabulary, bytes (359 ids), is not the one {what} {model_dir} "
                                "was trained with, SentencePiece sha256 "), errors[0]
  assert not (tmp_path / "eval" / "predictions.jsonl").exists()
  assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == ["2"]  # nothing trained
  assert not (tmp_path / "fine_tuned" / "model_inputs.json").exists()  # nor any record written


def test_serving_the_checkpoint_generates_at_the_runs_lengths_with_its_vocabulary(run, tmp_path):
  model, model_dir = run
  with open(tmp_path / "serve.log", "w+", encoding="utf-8") as log:
    server, port = start_server(log, f"--checkpoint={model_dir}")
    try:
      settings = server.stdout.readline()
      connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
      situation = {"title": "Roommate", "selftext": SENTENCE, "subreddit": "Advice"}
      connection.request("POST", "/api/askbatch", body=json.dumps({"instances": [situation]}))
      response = connection.getresponse()
      status, answer = response.status, json.loads(response.read())
    finally:
      server.terminate()
      server.wait(timeout=60)
  sha = model_inputs.sentencepiece_vocabulary(model, 100)["sha256"][:12]
  assert settings.startswith(f"checkpoint {model_dir}: vocabulary SentencePiece sha256 {sha} (300 ids"), settings
  assert "1280 input tokens, samples of at most 512 tokens (recorded in " in settings, settings
  assert status == 200 and len(answer["gens"]) == 1, answer


def test_the_export_carries_the_tokenizer_and_the_import_keeps_the_vocabulary(run, tmp_path):
  transformers = pytest.importorskip("transformers")
  model, model_dir = run
  _ok(_run("scripts.convert_checkpoint", f"--checkpoint={model_dir}", f"--to_hf={tmp_path / 'hf'}"))
  tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
  vocabulary = seqio.SentencePieceVocabulary(model, extra_ids=100)
  assert tokenizer(SENTENCE)["input_ids"] == list(vocabulary.encode(SENTENCE)) + [vocabulary.eos_id]
  assert tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_99>"]) == [299, 200]
  assert len(tokenizer) == vocabulary.vocab_size == 300
  stdout = _ok(_run("scripts.convert_checkpoint", f"--hf_dir={tmp_path / 'hf'}", f"--out={tmp_path / 'imported'}"))
  sha = model_inputs.sentencepiece_vocabulary(model, 100)["sha256"]
  assert f"vocabulary: SentencePiece sha256 {sha[:12]} (300 ids" in stdout, stdout
  imported = model_inputs.read(str(tmp_path / "imported"))
  assert imported["vocabulary"]["sha256"] == sha and imported["task_feature_lengths"] == LENGTHS
  assert (tmp_path / "imported" / "sentencepiece.model").read_bytes() == pathlib.Path(model).read_bytes()
