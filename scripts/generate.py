r"""Generates advice with nucleus sampling (top-p 0.95), with gin, on the command line t5x uses.

  python -m scripts.generate --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/infer.gin \
      --gin.CHECKPOINT_PATH="'/tmp/run'" --gin.INFER_OUTPUT_FILE="'/tmp/run/advice.jsonl'"

generates for the inputs of the advice task (MIXTURE_OR_TASK_NAME, SPLIT); with
--gin.INPUT_FILE="'situations.jsonl'" for a JSON lines file of situations instead (`title`,
`selftext`, `subreddit`, optional `id` and `created_utc`: without it, February 14, 2020), formatted
as the advice task formats its inputs. `advice_generator` is the same model behind the leaderboard server (scripts/serve.py).

Best-of-N (Stiennon et al. 2020, §4.1): with a reward model, each input gets NUM_SAMPLES samples,
their rewards, the index of the best and the KL; the run prints the KL and the mean reward of
the chosen samples against all samples. For TL;DR summaries from a supervised policy:

  python -m scripts.generate --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/infer.gin \
      --gin_file=gin/recipes/summarize_from_feedback/best_of_n.gin --gin.CHECKPOINT_PATH="'/tmp/sft'" \
      --gin.REWARD_CHECKPOINT_PATH="'/tmp/rm/normalized'" --gin.INFER_OUTPUT_FILE="'/tmp/bon.jsonl'"

The output file is written whole at the end. Ctrl-C (SIGINT) or SIGTERM stops after the batch
being sampled: the lines of the inputs sampled so far are written (complete lines only), one line
says how far it got, and the exit code is 130 or 143 (as scripts/train.py's); rerunning the same
command starts over. A setting or input it cannot use exits 1 with one line.

On several processes (scripts/launch_local.py, a pod) each reads the same inputs and feeds its
own rows of every batch to the mesh of all their devices; process 0 writes the file, the one a
single process writes:

  python -m scripts.launch_local --num_processes=2 --devices_per_process=2 -- -m scripts.generate \
      --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/infer.gin --gin.MESH_SHAPE='(2, 2)' ...
"""
from typing import Callable, Sequence

import gin
import jax

from runner import checkpoints
from runner import infer as infer_lib
from runner import model_inputs
from scripts import gin_cli  # the shared gin command line
from scripts import recorded_inputs

# The date of a situation that gives none: February 14, 2020 (00:00 UTC), the TuringAdvice
# leaderboard's human-evaluation round (../shared/data/turingadvice/feb-14-2020_first100.jsonl).
# Training inputs always carry their post's date, so a fixed one keeps the input's form and
# makes it the same on any day (the clock would change it daily).
UNDATED_CREATED_UTC = 1581638400
# Feature lengths of a checkpoint that records none (an imported one), where none are bound:
# targets is the longest advice sampled.
DEFAULT_LENGTHS = {"inputs": 512, "targets": 256}


def situation_formatter(vocabulary, input_length: int) -> Callable[[dict], str]:
  """The advice task's input text for a situation (t5_tasks.preprocessors.advice_inputs_text).

  The situation is trimmed by whole middle paragraphs to fit `input_length` tokens with EOS, as
  the task does. A situation without `created_utc` (the leaderboard API sends none) is dated
  UNDATED_CREATED_UTC, so that the same request is the same model input on any day.
  """
  from t5_tasks import preprocessors  # pylint: disable=g-import-not-at-top  # TensorFlow, only when used

  count_tokens = preprocessors.token_counter(vocabulary)

  def format_inputs(situation: dict) -> str:
    created_utc = int(situation.get("created_utc", UNDATED_CREATED_UTC))
    return preprocessors.advice_inputs_text(situation["subreddit"], created_utc, situation["title"],
                                            situation["selftext"], count_tokens, input_length - 1)
  return format_inputs


def advice_generator(checkpoint_path: str, *, input_length: int | None = None, max_length: int | None = None,
                     sentencepiece_model_path: str | None = None, **kwargs) -> Callable[[list[dict]], list[str]]:
  """runner.infer.load_generator with the advice task's formatting, reading the checkpoint as it
  was trained: its recorded vocabulary and feature lengths (`runner.model_inputs`), each unless
  given here (a SentencePiece model that differs from the record is refused); a checkpoint that
  records none reads bytes, 512 input tokens and samples of at most 256. The generator's
  `settings` says which it uses, in a line."""
  from t5_tasks import vocab  # pylint: disable=g-import-not-at-top

  recorded = model_inputs.read(checkpoint_path)
  what = f"checkpoint {checkpoint_path}"
  recorded_vocabulary = recorded and recorded["vocabulary"]
  if sentencepiece_model_path is None and recorded_vocabulary and recorded_vocabulary["kind"] == "sentencepiece":
    sentencepiece_model_path = recorded_vocabulary["model_path"]
  vocabulary = vocab.get_vocabulary(sentencepiece_model_path=sentencepiece_model_path)
  model_inputs.check_vocabulary(recorded, model_inputs.describe_vocabulary(vocabulary), what)
  lengths = (recorded and recorded["task_feature_lengths"]) or DEFAULT_LENGTHS
  input_length = input_length or lengths["inputs"]
  max_length = max_length or lengths["targets"]
  source = f"recorded in {recorded['path']}" if recorded else "no record: the defaults"
  format_inputs = situation_formatter(vocabulary, input_length)
  generator = infer_lib.load_generator(checkpoint_path, format_inputs=format_inputs, vocabulary=vocabulary,
                                       input_length=input_length, max_length=max_length, **kwargs)
  generator.settings = (f"{what}: vocabulary {model_inputs.shown(model_inputs.describe_vocabulary(vocabulary))}, "
                        f"{input_length} input tokens, samples of at most {max_length} tokens ({source}, "
                        "where the command line gives none)")
  return generator


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  checkpoint_path = recorded_inputs.macro_value("CHECKPOINT_PATH")
  checkpoints.check_checkpoint(checkpoint_path, "CHECKPOINT_PATH")  # before any data is prepared
  reward_checkpoint_path = recorded_inputs.macro_value("REWARD_CHECKPOINT_PATH")
  if reward_checkpoint_path:
    checkpoints.check_checkpoint(reward_checkpoint_path, "REWARD_CHECKPOINT_PATH")
  recorded_inputs.follow(checkpoint_path, f"CHECKPOINT_PATH {checkpoint_path}", DEFAULT_LENGTHS)
  from t5_tasks import vocab  # pylint: disable=g-import-not-at-top
  vocabulary = vocab.get_vocabulary()
  input_length = recorded_inputs.macro_value("TASK_FEATURE_LENGTHS")["inputs"]  # bound by `follow`
  # INPUT_FILE's situations (infer.gin binds it), formatted as the advice task formats its inputs.
  situations = gin.get_configurable(infer_lib.Situations)(
      format_inputs=situation_formatter(vocabulary, input_length), vocabulary=vocabulary)
  path = gin.get_configurable(infer_lib.infer)(situations=situations)
  if jax.process_index() == 0:  # the one that wrote it (runner.infer.infer)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
  gin_cli.run(main)
