"""Inference with a random tiny model: one JSON line per input, decoded samples, the serving callable."""
import json

import gin
import jax
import numpy as np
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models import decoding
from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import infer
from scripts import generate as generate_script
from scripts import gin_cli
from t5_tasks import tasks
from t5_tasks.sources import reddit_advice
from tests.conftest import PROJECT_ROOT

CONFIG = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=1)
LENGTHS = {"inputs": 128, "targets": 12}
BATCH = 4
VOCAB = seqio.ByteVocabulary()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  directory = tmp_path_factory.mktemp("ckpt")
  params = init_params(CONFIG, jax.random.PRNGKey(0))
  checkpoints.save_params(str(directory / "params"), params)
  checkpoints.write_model_config(str(directory), CONFIG)
  return str(directory), params


def _lines(path):
  return [json.loads(line) for line in open(path, encoding="utf-8")]


def _file_dataset():
  """Generation for a situations file: no task, infer's default split."""
  return configs.DatasetConfig(None, LENGTHS, "test", BATCH)


def _situations():
  return [{"id": f"s{i}", "title": f"Question {i}?", "selftext": "Some context. " * i,
           "subreddit": "Advice"} for i in range(5)]


def test_task_inference_writes_one_line_per_situation(model, tmp_path):
  path, _ = model
  out = infer.infer(checkpoint_path=path, output_file=str(tmp_path / "gen.jsonl"),
                    dataset=configs.DatasetConfig("turingadvice_generation", LENGTHS, "test", BATCH))
  lines = _lines(out)
  situations, _ = reddit_advice.read_reddit_advice(tasks.data_files("reddit_advice")["all"])
  test = [s for s in situations if s.split == "test" and s.good_comments]
  assert len(lines) == len(test)  # examples of one situation (one per reference) are merged
  assert sorted(len(line["references"]) for line in lines) == sorted(len(s.good_comments) for s in test)
  for line, situation in zip(lines, test):
    assert line["id"].startswith(situation.id)
    assert f"Title: {situation.title}" in line["inputs"]
    assert len(line["predictions"]) == 1 and isinstance(line["predictions"][0], str)


def test_file_inference_decodes_the_sampled_tokens(model, tmp_path):
  path, params = model
  source = tmp_path / "situations.jsonl"
  source.write_text("".join(json.dumps(s) + "\n" for s in _situations()))
  format_inputs = lambda s: f"{s['title']}\n{s['selftext']}"
  out = infer.infer(checkpoint_path=path, output_file=str(tmp_path / "gen.jsonl"), dataset=_file_dataset(),
                    sampling=configs.SamplingConfig(num_samples=2, seed=7),
                    situations=infer.Situations(str(source), format_inputs, VOCAB))
  lines = _lines(out)
  assert [line["id"] for line in lines] == [s["id"] for s in _situations()]
  # The first batch again, by hand: bytes + 3 with EOS (1), sampled with fold_in(seed, 0).
  texts = [format_inputs(s) for s in _situations()[:BATCH]]
  ids = np.zeros((BATCH, LENGTHS["inputs"]), np.int32)
  for row, text in enumerate(texts):
    tokens = [b + 3 for b in text.encode("utf-8")] + [1]
    ids[row, :len(tokens)] = tokens
  tokens = np.asarray(decoding.sample(CONFIG, params, ids, jax.random.fold_in(jax.random.PRNGKey(7), 0),
                                      max_length=LENGTHS["targets"], num_samples=2, top_p=0.95))
  for row in range(BATCH):
    assert lines[row]["inputs"] == texts[row]
    expected = []
    for sample in tokens[row]:
      kept = []
      for t in sample:
        if t in (0, 1):
          break
        kept.append(int(t))
      expected.append(VOCAB.decode(kept))
    assert lines[row]["predictions"] == expected


def test_a_short_last_batch_is_sampled_at_its_own_rows(model, tmp_path, monkeypatch):
  path, params = model
  rows, sample = [], decoding.sample

  def counting_sample(config, params, ids, *args, **kwargs):
    rows.append(ids.shape[0])
    return sample(config, params, ids, *args, **kwargs)

  monkeypatch.setattr(decoding, "sample", counting_sample)
  source = tmp_path / "situations.jsonl"
  source.write_text("".join(json.dumps(s) + "\n" for s in _situations()))  # 5: a batch of 4, then 1
  format_inputs = lambda s: s["title"]
  out = infer.infer(checkpoint_path=path, output_file=str(tmp_path / "gen.jsonl"), dataset=_file_dataset(),
                    sampling=configs.SamplingConfig(num_samples=3, seed=7),
                    situations=infer.Situations(str(source), format_inputs, VOCAB))
  assert rows == [BATCH, 1]
  # Its texts are those it had among 3 rows of padding (the last batch's shape until now): a
  # row's random draws do not depend on the rows after it.
  ids = infer.encode_inputs(VOCAB, [format_inputs(_situations()[BATCH])], LENGTHS["inputs"])
  padded = np.asarray(sample(CONFIG, params, np.pad(ids, [(0, BATCH - 1), (0, 0)]),
                             jax.random.fold_in(jax.random.PRNGKey(7), 1), max_length=LENGTHS["targets"],
                             num_samples=3, top_p=0.95))
  assert _lines(out)[BATCH]["predictions"] == [infer.decode_tokens(VOCAB, tokens) for tokens in padded[0]]


def test_generator_for_serving_returns_one_text_per_situation(model):
  path, params = model
  generator = infer.load_generator(path, format_inputs=lambda s: s["title"], vocabulary=VOCAB,
                                   input_length=LENGTHS["inputs"], max_length=LENGTHS["targets"],
                                   batch_size=BATCH, sampling=configs.SamplingConfig(top_p=0.0))
  texts = generator(_situations())
  assert len(texts) == 5 and generator([]) == []
  ids = infer.encode_inputs(VOCAB, [s["title"] for s in _situations()[:BATCH]], LENGTHS["inputs"])
  greedy = np.asarray(decoding.sample(CONFIG, params, ids, jax.random.PRNGKey(0),
                                      max_length=LENGTHS["targets"], greedy=True))
  # top_p = 0 keeps only the most probable token: greedy decoding, whatever the random key.
  assert texts[:BATCH] == [infer.decode_tokens(VOCAB, row[0]) for row in greedy]
  with pytest.raises(ValueError, match=r"situations\[1\]: field 'selftext': expected a string"):
    generator([_situations()[0], {"title": "t", "subreddit": "r"}])


def test_bad_situations_file_names_line_and_field(tmp_path):
  source = tmp_path / "bad.jsonl"
  bad = {"title": 3, "selftext": "", "subreddit": ""}
  source.write_text(json.dumps(_situations()[0]) + "\n" + json.dumps(bad) + "\n")
  with pytest.raises(ValueError, match=r"bad.jsonl:2: field 'title': expected a string, got 3"):
    infer.read_situations(str(source))
  source.write_text('{"title": "cut')
  with pytest.raises(ValueError, match=r"bad.jsonl:1: invalid JSON"):
    infer.read_situations(str(source))


def test_needs_a_task_or_a_file_with_its_formatting(model, tmp_path):
  with pytest.raises(ValueError, match=r"give a generation task \(MIXTURE_OR_TASK_NAME\) or an input_file"):
    infer.infer(checkpoint_path=model[0], output_file=str(tmp_path / "x"), dataset=_file_dataset())
  with pytest.raises(ValueError, match="a situations file needs format_inputs and vocabulary"):
    infer.infer(checkpoint_path=model[0], output_file=str(tmp_path / "x"), dataset=_file_dataset(),
                situations=infer.Situations(str(tmp_path / "s.jsonl")))
  with pytest.raises(ValueError, match="'quickstart' is a mixture; name one generation task"):
    infer.infer(checkpoint_path=model[0], output_file=str(tmp_path / "x"),
                dataset=configs.DatasetConfig("quickstart", LENGTHS, "test", BATCH))


def test_served_situations_are_formatted_like_the_advice_task():
  situations, _ = reddit_advice.read_reddit_advice(tasks.data_files("reddit_advice")["all"])
  by_id = {s.id: s for s in situations}
  format_inputs = generate_script.situation_formatter(VOCAB, LENGTHS["inputs"])
  dataset = seqio.get_mixture_or_task("turingadvice_generation").get_dataset(
      LENGTHS, split="test", shuffle=False)
  for example in dataset.as_numpy_iterator():
    s = by_id[example["id"].decode().split("/")[0]]
    situation = {"title": s.title, "selftext": s.selftext, "subreddit": s.subreddit,
                 "created_utc": s.created_utc}
    assert format_inputs(situation) == example["inputs_pretokenized"].decode()
    encoded = infer.encode_inputs(VOCAB, [format_inputs(situation)], LENGTHS["inputs"])[0]
    np.testing.assert_array_equal(encoded[:len(example["inputs"])], example["inputs"])
    assert not encoded[len(example["inputs"]):].any()


def test_infer_gin_generates_for_a_situations_file(model, tmp_path):
  source = tmp_path / "situations.jsonl"
  source.write_text("".join(json.dumps(s) + "\n" for s in _situations()[:3]))
  gin.clear_config()
  try:
    gin_cli.parse_gin(
        ["gin/runs/infer.gin"],
        ["MODEL_CONFIG = None", f"CHECKPOINT_PATH = '{model[0]}'",
         f"INFER_OUTPUT_FILE = '{tmp_path / 'advice.jsonl'}'", f"INPUT_FILE = '{source}'",
         f"TASK_FEATURE_LENGTHS = {LENGTHS}", f"BATCH_SIZE = {BATCH}"], [str(PROJECT_ROOT)])
    situations = gin.get_configurable(infer.Situations)(
        format_inputs=generate_script.situation_formatter(VOCAB, LENGTHS["inputs"]), vocabulary=VOCAB)
    path = gin.get_configurable(infer.infer)(situations=situations)
  finally:
    gin.clear_config()
  lines = _lines(path)
  assert [line["id"] for line in lines] == ["s0", "s1", "s2"]
  assert all(line["inputs"].startswith("Subreddit: r/Advice\nDate: ") for line in lines)


