"""Learning to summarize from human feedback as its appendix runs it: the query formats (Table 4,
B.2), the TL;DR supervised task and its filters (appendix A), the confidence filter (C.1), reward
normalisation (§3.4) by function and by command line, and the recipes (B.1)."""
import contextlib
import io
import json
import os

import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import seqio
from absl import flags

import t5_tasks  # pylint: disable=unused-import  (registers the tasks)
from models import reward as reward_lib
from models.config import T5Config
from runner import checkpoints
from runner import reward_normalization
from scripts import normalize_reward
from scripts import gin_cli
from t5_tasks import families
from t5_tasks import preprocessors
from t5_tasks import tasks
from t5_tasks.sources import records
from t5_tasks.sources import summarize_references
from tests.conftest import PROJECT_ROOT

BYTES = seqio.ByteVocabulary()
COUNT = preprocessors.token_counter(BYTES)
COMPARISONS = str(tasks.QUICKSTART_DIR / "summarize_comparisons.jsonl")
REFERENCES = str(tasks.QUICKSTART_DIR / "summarize_references.jsonl")
QUICKSTART = {"summarize_feedback": {"all": COMPARISONS}, "summarize_references": {"all": REFERENCES}}
# gin/models/t5_1_1/tiny.gin
TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                num_encoder_layers=2, num_decoder_layers=2)
LENGTHS = {"inputs": 256, "targets": 128}


@pytest.fixture
def bind():
  """bind(name, value): a gin binding for this test only (the tasks read theirs when built)."""
  def bind_parameter(name, value):
    with gin.unlock_config():
      gin.bind_parameter(name, value)
  yield bind_parameter
  gin.clear_config()


def _rows(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def test_reddit_posts_and_news_articles_are_queried_as_table_4_writes_them():
  post = "Line one of the post.\nLine two."
  assert (preprocessors.summary_inputs_text("tifu", "T", post, COUNT, None)
          == f"SUBREDDIT: r/tifu\n\nTITLE: T\n\nPOST: {post}\n\nTL;DR:")
  assert preprocessors.summary_inputs_text("", "", post, COUNT, None) == f"Article: {post}\n\nTL;DR:"
  transfer = preprocessors.summary_inputs_text("", "", post, COUNT, None, "transfer")
  assert transfer == f"{post}\n\nTL;DR:"
  # Too long by a few tokens: the article is cut at its last newline that fits (B.2).
  assert (preprocessors.summary_inputs_text("", "", post, COUNT, len(BYTES.encode(transfer)) - 3, "transfer")
          == "Line one of the post.\n\nTL;DR:")


def _news_query():
  task = seqio.get_mixture_or_task("summarize_feedback_sft")
  for ex in task.get_dataset(LENGTHS, split="train", shuffle=False).as_numpy_iterator():
    if ex["id"] == b"cnn_qsref03":
      return ex["inputs_pretokenized"].decode()
  raise AssertionError("the quickstart news article is missing")


def test_the_news_format_is_a_gin_setting_read_when_the_dataset_is_built(bind):
  assert _news_query().startswith("Article: The city council voted")
  bind("t5_tasks.preprocessors.news_format.setting", "transfer")
  assert _news_query().startswith("The city council voted") and _news_query().endswith("\n\nTL;DR:")
  bind("t5_tasks.preprocessors.news_format.setting", "headline")
  with pytest.raises(ValueError, match="news_format.setting must be one of"):
    preprocessors.news_format()


def test_sft_references_are_the_ref_summaries_once_per_post_and_the_references_file(capsys):
  expected = {}  # (id, summary) -> split, from the raw files
  released = {"train": "train", "valid1": "validation", "valid2": "test"}
  for row in _rows(COMPARISONS):
    for summary in row["summaries"]:
      if summary["policy"] == "ref":
        expected.setdefault((row["info"]["id"], summary["text"]), released[row["split"]])
  from_comparisons = len(expected)
  for row in _rows(REFERENCES):
    expected[(row["id"], row["summary"])] = released[row["split"]]
  out = families.sft_examples(QUICKSTART)
  found = {(ex["id"], ex["candidates"][0]): split for split, examples in out.items() for ex in examples}
  assert found == expected and sum(map(len, out.values())) == len(expected) == 12
  assert 4 < from_comparisons < sum(1 for row in _rows(COMPARISONS)
                                    for s in row["summaries"] if s["policy"] == "ref")  # deduplicated
  assert all(ex["candidate_labels"] == [1] for examples in out.values() for ex in examples)
  assert f"12 references ({from_comparisons} from comparisons), filtered out 0" in capsys.readouterr().out
  # A file under a split key puts every record there; {} reads no comparisons.
  only_file = families.sft_examples({"summarize_feedback": {}, "summarize_references": {"validation": REFERENCES}})
  assert len(only_file["validation"]) == 6 and not only_file["train"] and not only_file["test"]


def test_the_sft_task_trains_on_the_query_and_the_reference():
  task = seqio.get_mixture_or_task("summarize_feedback_sft")
  assert families.SUMMARIZE_FEEDBACK_SFT in families.FAMILIES and task.splits == families.SPLITS
  lengths = {"inputs": 512, "targets": 128}  # the whole post fits
  ex = next(task.get_dataset(lengths, split="validation", shuffle=False).as_numpy_iterator())
  reference = {r["id"]: r for r in _rows(REFERENCES)}[ex["id"].decode()]
  assert ex["inputs_pretokenized"].decode() == (f"SUBREDDIT: r/{reference['subreddit']}\n\nTITLE: "
                                                f"{reference['title']}\n\nPOST: {reference['post']}\n\nTL;DR:")
  assert ex["targets_pretokenized"].decode() == reference["summary"]


def test_appendix_a_tokens_are_gpt2_pieces_whatever_the_vocabulary():
  # Counted by hand: GPT-2 splits contractions, letters, digits and other symbols apart before BPE.
  count = summarize_references.paper_token_count
  assert count("Can't make myself write my master's thesis.") == 10  # Can 't ... master 's thesis .
  assert count(" New job, $7k car loan at 6%") == 11  # New job , $ 7 k car loan at 6 %
  assert count("well...ok!? snake_case") == 7  # well ... ok !? snake _ case
  assert count("") == 0 and count("  \n ") == 0
  text = "Rescue dog barks at men; training or a behaviourist?"
  assert count(text) == 11 != len(BYTES.encode(text))  # 9 words, ";" and "?"; 52 bytes


def test_reference_filters_count_appendix_a_tokens_and_say_how_many(bind, capsys):
  count = summarize_references.paper_token_count
  unfiltered = {}
  for row in _rows(COMPARISONS):
    for s in row["summaries"]:
      if s["policy"] == "ref":
        unfiltered[(row["info"]["id"], s["text"])] = (row["info"]["subreddit"], row["info"]["post"])
  for row in _rows(REFERENCES):
    unfiltered[(row["id"], row["summary"])] = (row.get("subreddit", ""), row.get("post", row.get("article")))
  # The quickstart references are TL;DRs of the paper's length: appendix A's filters keep them all.
  assert all(24 <= count(summary) <= 48 and count(post) <= 512 for (_, summary), (_, post) in unfiltered.items())
  max_post, low, high = 60, 28, 34
  bind("t5_tasks.families.reference_filter.max_post_tokens", max_post)
  bind("t5_tasks.families.reference_filter.min_summary_tokens", low)
  bind("t5_tasks.families.reference_filter.max_summary_tokens", high)
  out = families.sft_examples(QUICKSTART)
  # News articles have no post limit.
  kept = {key for key, (subreddit, post) in unfiltered.items()
          if (not subreddit or count(post) <= max_post) and low <= count(key[1]) <= high}
  assert {(ex["id"], ex["candidates"][0]) for examples in out.values() for ex in examples} == kept
  assert 0 < len(kept) < len(unfiltered) and ("cnn_qsref03", _rows(REFERENCES)[2]["summary"]) in kept
  assert f"filtered out {len(unfiltered) - len(kept)}; post over {max_post} tokens: " in capsys.readouterr().out
  # A filter that leaves nothing stops the dataset, naming the filter and the counts.
  bind("t5_tasks.families.reference_filter.min_summary_tokens", 49)
  with pytest.raises(ValueError, match=r"^summarize_feedback_sft: t5_tasks.families.reference_filter "
                                       r"\(60, 49, 34\) leaves no reference: 12 references \(6 from comparisons\), "
                                       r"filtered out 12; post over 60 tokens: \d+; summary under 49 tokens: \d+$"):
    families.sft_examples(QUICKSTART)


def test_the_references_reader_names_file_line_and_field(tmp_path):
  path = tmp_path / "references.jsonl"
  good = {"id": "a", "subreddit": "tifu", "title": "T", "post": "P", "summary": "S"}
  path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "summary": 3}) + "\n")
  with pytest.raises(records.RecordError, match=rf"{path}:2: field 'summary': expected a string"):
    summarize_references.read_references(path)
  path.write_text(json.dumps({**good, "split": "dev"}) + "\n")
  with pytest.raises(records.RecordError, match=rf"{path}:1: field 'split': expected one of"):
    summarize_references.read_references(path)
  path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
  with pytest.raises(records.RecordError, match=rf"{path}:2: field 'id': duplicate id 'a'"):
    summarize_references.read_references(path)
  article = {"id": "n", "article": "A.", "summary": "S"}
  path.write_text(json.dumps(article) + "\n")
  (read,), _ = summarize_references.read_references(path)
  assert (read.subreddit, read.title, read.post, read.split) == ("", "", "A.", "train")


def test_the_confidence_filter_keeps_confident_comparisons_and_says_how_many_it_dropped(bind, capsys, tmp_path):
  rows = _rows(COMPARISONS)
  unrated = {**rows[0], "extra": None}  # no confidence recorded
  path = tmp_path / "comparisons.jsonl"
  path.write_text("".join(json.dumps(row) + "\n" for row in rows + [unrated]))
  files = {"summarize_feedback": {"all": str(path)}}
  everything = families.summarize_examples(files)
  assert sum(map(len, everything.values())) == len(rows) + 1  # no threshold: all kept, unrated too
  bind("t5_tasks.families.comparison_filter.min_confidence", 7)
  confident = families.summarize_examples(files)
  expected = sum(1 for row in rows if row["extra"]["confidence"] >= 7)
  assert sum(map(len, confident.values())) == expected
  assert f"dropped {len(rows) + 1 - expected} comparisons of confidence below 7 or none" in capsys.readouterr().out
  # Ids name the same comparison with or without the filter.
  by_id = {ex["id"]: ex for examples in everything.values() for ex in examples}
  assert all(by_id[ex["id"]] == ex for examples in confident.values() for ex in examples)
  bind("t5_tasks.families.comparison_filter.splits", ("validation",))
  only_validation = families.summarize_examples(files)
  assert only_validation["train"] == everything["train"] and only_validation["test"] == everything["test"]
  assert len(only_validation["validation"]) == sum(
      1 for row in rows if row["split"] == "valid1" and row["extra"]["confidence"] >= 7)
  # Per-labeler thresholds (C.1, step 4); a labeler not named keeps none.
  thresholds = {"w0": 9, "w3": 7}  # valid1: w0 at 9 kept, w3 at 6 dropped, w4 (unnamed) dropped
  bind("t5_tasks.families.comparison_filter.min_confidence", thresholds)
  per_labeler = families.summarize_examples(files)
  kept = [row for row in rows if row["split"] != "valid1"
          or row["extra"]["confidence"] >= thresholds.get(row["worker"], 10)]
  assert sum(map(len, per_labeler.values())) == len(kept) + 1  # the unrated copy is a train comparison
  assert len(per_labeler["validation"]) == 1 < len(everything["validation"])
  assert (f"dropped {len(rows) - len(kept)} comparisons of confidence below their labeler's threshold, of a "
          f"labeler without one, or none") in capsys.readouterr().out
  bind("t5_tasks.families.comparison_filter.min_confidence", {"w0": 10})
  with pytest.raises(ValueError, match=r"must be 1..9, \{worker: 1..9\} or None, got \{'w0': 10\}"):
    families.comparison_filter()


@pytest.fixture(scope="module")
def reward_checkpoint(tmp_path_factory):
  """A random tiny reward model (a bias of 0.3) saved as a params-only checkpoint: (dir, params)."""
  directory = tmp_path_factory.mktemp("reward") / "rm"
  params = jax.jit(reward_lib.init_reward_params, static_argnums=0)(TINY, jax.random.PRNGKey(0))
  params[reward_lib.HEAD]["bias"] = jnp.array([0.3], jnp.float32)
  checkpoints.save_params(directory, params)
  checkpoints.write_model_config(directory, TINY)
  return directory, params


@pytest.fixture(scope="module")
def references():
  """(inputs, targets) of the train references, straight from the task's dataset, padded to full length."""
  task = seqio.get_mixture_or_task("summarize_feedback_sft")
  examples = list(task.get_dataset(LENGTHS, split="train", shuffle=False).as_numpy_iterator())
  return tuple(np.stack([np.pad(ex[key], (0, LENGTHS[key] - len(ex[key]))) for ex in examples])
               for key in ("inputs", "targets"))


@pytest.fixture(scope="module")
def transfer_references():
  """`references` with news read as normalize_reward.gin reads them (Table 4's transfer format)."""
  with gin.unlock_config():
    gin.bind_parameter("t5_tasks.preprocessors.news_format.setting", "transfer")
  try:
    task = seqio.get_mixture_or_task("summarize_feedback_sft")
    examples = list(task.get_dataset(LENGTHS, split="train", shuffle=False).as_numpy_iterator())
  finally:
    gin.clear_config()
  assert any(ex["id"] == b"cnn_qsref03" and not ex["inputs_pretokenized"].startswith(b"Article:") for ex in examples)
  return tuple(np.stack([np.pad(ex[key], (0, LENGTHS[key] - len(ex[key]))) for ex in examples])
               for key in ("inputs", "targets"))


def _rewards(params, references):
  return np.asarray(reward_lib.reward(TINY, params, *references), np.float64)


def test_normalised_references_score_zero_on_average_also_after_save_and_restore(reward_checkpoint, references,
                                                                                tmp_path):
  source, params = reward_checkpoint
  before = _rewards(params, references)
  mean, count = reward_normalization.reference_mean_reward(TINY, params, "summarize_feedback_sft", "train",
                                                           LENGTHS, batch_size=4)
  assert count == len(before) == 7 and mean == pytest.approx(before.mean(), abs=1e-5)
  assert abs(mean) > 1e-3  # a shift to make
  output = tmp_path / "normalized"
  record = reward_normalization.normalize(TINY, params, source=str(source), output_dir=str(output),
                                          task_name="summarize_feedback_sft", split="train",
                                          feature_lengths=LENGTHS, batch_size=4)
  assert record["offset"] == pytest.approx(mean, abs=1e-7) and record["references"]["count"] == 7
  assert json.loads((output / reward_normalization.NORMALIZATION_FILE).read_text()) == record
  shifted = reward_lib.shift_to_zero_mean(params, mean)
  assert abs(_rewards(shifted, references).mean()) < 1e-5
  config, restored = checkpoints.load_params(str(output))
  assert config == TINY
  assert abs(_rewards(restored, references).mean()) < 1e-5
  np.testing.assert_allclose(_rewards(restored, references), before - mean, atol=1e-5)
  # Differences (what the comparison losses see) are unchanged.
  np.testing.assert_allclose(np.diff(_rewards(restored, references)), np.diff(before), atol=1e-5)
  # Its own earlier output is replaced; anything else, or the source itself, is refused.
  reward_normalization.normalize(TINY, params, source=str(source), output_dir=str(output),
                                 task_name="summarize_feedback_sft", split="train", feature_lengths=LENGTHS,
                                 batch_size=4)
  with pytest.raises(ValueError, match="is no earlier normalisation"):
    reward_normalization.normalize(TINY, params, source=str(output), output_dir=str(source),
                                   task_name="summarize_feedback_sft", split="train",
                                   feature_lengths=LENGTHS, batch_size=4)
  with pytest.raises(ValueError, match="only a reward model"):
    reward_normalization.normalize(TINY, {k: v for k, v in params.items() if k != reward_lib.HEAD},
                                   source=str(source), output_dir=str(tmp_path / "x"),
                                   task_name="summarize_feedback_sft", split="train",
                                   feature_lengths=LENGTHS, batch_size=4)


def _command_line(argv) -> tuple[int, str, str]:
  """(exit code, stdout, stderr) of `python -m scripts.normalize_reward ARGV`, run in this process as
  its `__main__` runs it (as tests/scripts/test_gin_fuzz.py runs the scripts: no second interpreter)."""
  if "gin_file" not in flags.FLAGS:
    gin_cli.define_flags()
  flags.FLAGS.unparse_flags()
  remaining = flags.FLAGS(gin_cli.rewrite_gin_args(["normalize_reward", *argv]))
  gin.clear_config()
  out, err = io.StringIO(), io.StringIO()
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      gin_cli.one_line_errors(normalize_reward.main)(remaining)
    code = 0
  except SystemExit as exit_:
    code = exit_.code
  finally:
    flags.FLAGS.unparse_flags()
    gin.clear_config()
  return code, out.getvalue(), err.getvalue()


def test_normalize_reward_command_line(reward_checkpoint, transfer_references, tmp_path):
  source, params = reward_checkpoint
  references = transfer_references
  output = tmp_path / "normalized"
  argv = ["--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/recipes/summarize_from_feedback/normalize_reward.gin",
          f"--gin.REWARD_CHECKPOINT_PATH='{source}'", f"--gin.NORMALIZED_CHECKPOINT_PATH='{output}'",
          f"--gin.TASK_FEATURE_LENGTHS={LENGTHS}", "--gin.BATCH_SIZE=4"]
  code, stdout, stderr = _command_line(argv)
  assert code == 0, stderr[-3000:]
  record = json.loads((output / reward_normalization.NORMALIZATION_FILE).read_text())
  assert f"REWARD_CHECKPOINT_PATH={output}" in stdout
  assert record["offset"] == pytest.approx(_rewards(params, references).mean(), abs=1e-5)
  assert record["source_checkpoint"] == str(source) and os.path.isdir(source)  # the source stays
  _, restored = checkpoints.load_params(str(output))
  assert abs(_rewards(restored, references).mean()) < 1e-5
  # Writing over the source is refused in one line, and the source stays.
  code, _, stderr = _command_line([*argv[:-3], f"--gin.NORMALIZED_CHECKPOINT_PATH='{source}'", *argv[-2:]])
  assert code == 1 and "holds its source" in stderr and "Traceback" not in stderr
  assert checkpoints.load_params(str(source))[1][reward_lib.HEAD]["bias"] == pytest.approx(0.3)


def test_normalize_reward_refuses_a_reference_filter_that_leaves_nothing(reward_checkpoint, tmp_path):
  # Copies of the quickstart files: a file set this process has not built (a task keeps its
  # examples per file set, whatever the filter).
  files = {}
  for key, path in (("summarize_feedback", COMPARISONS), ("summarize_references", REFERENCES)):
    files[key] = {"all": str(tmp_path / os.path.basename(path))}
    with open(path, encoding="utf-8") as source:
      (tmp_path / os.path.basename(path)).write_text(source.read(), encoding="utf-8")
  output = tmp_path / "normalized"
  code, _, stderr = _command_line([
      "--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/recipes/summarize_from_feedback/normalize_reward.gin",
      f"--gin.REWARD_CHECKPOINT_PATH='{reward_checkpoint[0]}'", f"--gin.NORMALIZED_CHECKPOINT_PATH='{output}'",
      f"--gin_bindings=t5_tasks.tasks.data_files.files = {files!r}",
      "--gin_bindings=t5_tasks.families.reference_filter.min_summary_tokens = 40"])
  assert code == 1 and not output.exists()
  assert stderr.strip().splitlines()[-1] == (
      "error: summarize_feedback_sft: t5_tasks.families.reference_filter (512, 40, 48) leaves no reference: "
      "12 references (6 from comparisons), filtered out 12; summary under 40 tokens: 12")


RECIPES = {
    "sft.gin": ("gin/runs/finetune.gin", {
        "MIXTURE_OR_TASK_NAME": "summarize_feedback_sft", "OPTIMIZER": "adamw", "SCHEDULE": "cosine",
        "LEARNING_RATE": 6.35e-5, "BATCH_SIZE": 128, "TRAIN_STEPS": 914,
        "TASK_FEATURE_LENGTHS": {"inputs": 512, "targets": 49}}),
    "reward_model.gin": ("gin/runs/finetune.gin", {
        "MIXTURE_OR_TASK_NAME": "summarize_feedback_preference", "OBJECTIVE": "pairwise", "OPTIMIZER": "adamw",
        "SCHEDULE": "cosine", "LEARNING_RATE": 1.5e-5, "BATCH_SIZE": 64,
        "TASK_FEATURE_LENGTHS": {"inputs": 512, "targets": 49}}),
    "best_of_n.gin": ("gin/runs/infer.gin", {
        "MIXTURE_OR_TASK_NAME": "summarize_feedback_sft", "NUM_SAMPLES": 64, "TEMPERATURE": 0.7, "TOP_P": 1.0,
        "TASK_FEATURE_LENGTHS": {"inputs": 512, "targets": 49}}),
    "normalize_reward.gin": (None, {"MIXTURE_OR_TASK_NAME": "summarize_feedback_sft", "SPLIT": "train"}),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_recipe_parses_on_the_gin_command_line_and_binds_what_it_says(recipe):
  run_file, macros = RECIPES[recipe]
  files = ["gin/models/t5_1_1/tiny.gin", *([run_file] if run_file else []),
           f"gin/recipes/summarize_from_feedback/{recipe}"]
  gin.clear_config()
  try:
    gin_cli.parse_gin(files, [], [str(PROJECT_ROOT)])
    gin_cli.check_macro_references([])
    gin_cli.check_macro_kinds()
    for name, value in macros.items():
      assert gin.query_parameter(f"%{name}") == value, name
    # Every recipe reads the references alike: normalize_reward.gin's offset is reward_model.gin's.
    assert preprocessors.news_format() == "transfer"
    assert families.reference_filter() == (512, 24, 48)  # appendix A's, in GPT-2 pieces
    if recipe == "reward_model.gin":
      assert gin.query_parameter("configs.TrainingConfig.normalize_reward_task") == "summarize_feedback_sft"
      assert families.comparison_filter() == (None, ("validation",))
  finally:
    gin.clear_config()
