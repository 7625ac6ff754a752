r"""Converts checkpoints: Hugging Face or t5x in, this project's format out; any format in, Hugging Face out.

  python -m scripts.convert_checkpoint --hf_dir /models/t5-v1_1-small --out /ckpt/t5-small
  python -m scripts.convert_checkpoint --t5x_dir gs://my-bucket/t5x/base \
      --gin_file=gin/models/t5_1_1/base.gin --out /ckpt/t5x-base
  python -m scripts.convert_checkpoint --checkpoint /runs/base --to_hf /models/base-hf
  python -m scripts.convert_checkpoint --checkpoint gs://my-bucket/runs/base --to_hf gs://my-bucket/hf/base

`--hf_dir` (config.json + *.safetensors) or `--t5x_dir` (a t5x model directory, meaning its latest
checkpoint_<step>/, or one step directory; legacy or orbax layout, local or in a bucket) with
`--out` writes `OUT/params` (params-only orbax checkpoint: CHECKPOINT_PATH / INITIAL_CHECKPOINT_PATH
for evaluation and training) and `OUT/t5_config.json` (the architecture). A t5x checkpoint records
no architecture: `--gin_file` names the model's gin file, which binds MODEL_CONFIG.

`--checkpoint` (anything `runner.checkpoints.load_params` reads) with `--to_hf DIR` writes a
Hugging Face T5 directory (`models.checkpoint_export`): config.json and model.safetensors, float32,
plus reward_head.safetensors and its note for a reward model, and the tokenizer of the vocabulary
the checkpoint recorded (`runner.model_inputs`) with the record itself. Importing records the
vocabulary too: a Hugging Face directory's spiece.model, or `--sentencepiece_model`.

Every directory may be local or in a bucket (`gs://...`): a bucket path stays one (`storage`).

One direction per call. `--gin_file` and `--gin.NAME=value` bind MODEL_CONFIG as for training;
an architecture the checkpoint records is checked against it.
"""
import json
from typing import Sequence

import gin
from absl import app
from absl import flags

import storage
from models import checkpoint_export
from models import t5x_checkpoint
from models.config import T5Config
from runner import checkpoints
from runner import model_inputs
from scripts import console
from scripts import gin_cli  # the shared gin command line

PARAMS_SUBDIR = "params"


def _imported_vocabulary(recorded: dict | None, source: str, sentencepiece_model: str | None) -> dict | None:
  """The vocabulary `source` recorded (a Hugging Face directory's spiece.model), or
  --sentencepiece_model's (with T5's 100 sentinels); both given must be the same model."""
  if sentencepiece_model is None:
    return recorded and recorded["vocabulary"]
  given = model_inputs.sentencepiece_vocabulary(sentencepiece_model, model_inputs.T5_EXTRA_IDS)
  model_inputs.check_vocabulary(recorded, given, source)
  return given


def convert(source: str, out_dir: str, model_config: T5Config | None = None,
            sentencepiece_model: str | None = None) -> T5Config:
  """Writes `out_dir/params`, `out_dir/t5_config.json` and `out_dir/model_inputs.json` (local or
  gs://) from any checkpoint `load_params` reads; the vocabulary recorded is the source's (a
  Hugging Face directory's spiece.model) or `sentencepiece_model` (a t5x checkpoint records none)."""
  params_dir = storage.join(out_dir, PARAMS_SUBDIR)
  if storage.exists(params_dir):
    raise FileExistsError(f"{params_dir} already exists; choose a new --out directory")
  recorded = model_inputs.read(source)
  vocabulary = _imported_vocabulary(recorded, source, sentencepiece_model)
  config, params = checkpoints.load_params(source, model_config)
  storage.makedirs(out_dir)
  checkpoints.save_params(params_dir, params)
  checkpoints.write_model_config(out_dir, config)
  model_inputs.write(out_dir, vocabulary, recorded and recorded["task_feature_lengths"])
  print(f"vocabulary: {model_inputs.shown(vocabulary)}" + (
      "" if vocabulary else "; bind SENTENCEPIECE_MODEL_PATH when training on it, or convert again "
      "with --sentencepiece_model"), flush=True)
  return config


def export_hf(checkpoint: str, hf_dir: str,
              model_config: T5Config | None = None) -> tuple[T5Config, list[str]]:
  """Writes `hf_dir` as a Hugging Face T5 directory of `checkpoint`, with the tokenizer files of
  its recorded vocabulary and the record itself; returns the config and files written."""
  config, params = checkpoints.load_params(checkpoint, model_config)
  recorded = model_inputs.read(checkpoint)
  vocabulary = recorded and recorded["vocabulary"]
  extra_files = {}
  if vocabulary and vocabulary["kind"] in ("sentencepiece", "bytes"):
    model = model_inputs.model_bytes(vocabulary) if vocabulary["kind"] == "sentencepiece" else None
    extra_files = checkpoint_export.hf_tokenizer_files(vocabulary, model)
    extra_files[model_inputs.RECORD] = model_inputs.record_text(
        vocabulary, recorded["task_feature_lengths"], checkpoint_export.SENTENCEPIECE_MODEL).encode()
  else:
    print(f"no tokenizer written: {checkpoint} records no vocabulary this export can describe "
          f"({model_inputs.shown(vocabulary)})", flush=True)
  return config, checkpoint_export.save_hf_t5(hf_dir, config, params, extra_files)


def _configured_model() -> T5Config:
  """MODEL_CONFIG from --gin_file / --gin.NAME=value."""
  gin_cli.parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  try:
    return gin.query_parameter("%MODEL_CONFIG").scoped_configurable_fn()
  except ValueError:
    raise ValueError("the gin files bind no MODEL_CONFIG; give a model file, e.g. "
                     "--gin_file=gin/models/t5_1_1/base.gin") from None


def _check_directions(values: dict) -> None:
  """Exactly one direction: (--hf_dir | --t5x_dir) with --out, or --checkpoint with --to_hf; `values`
  maps each of those flags to its value, and "gin" to whether gin files or bindings were given.
  A command line of another shape is an app.UsageError (absl shows the usage); a source that holds
  no checkpoint of its kind is an error of one line, before anything is read or written."""
  sources = [name for name in ("hf_dir", "t5x_dir", "checkpoint") if values[name]]
  if len(sources) != 1:
    raise app.UsageError("give exactly one of --hf_dir or --t5x_dir (with --out), or --checkpoint "
                         f"(with --to_hf); got {', '.join('--' + name for name in sources) or 'none'}")
  source = sources[0]
  wanted, unwanted = ("to_hf", "out") if source == "checkpoint" else ("out", "to_hf")
  if not values[wanted]:
    raise app.UsageError(f"--{source} needs --{wanted} DIR")
  if values[unwanted]:
    raise app.UsageError(f"--{unwanted} does not go with --{source}: one direction per call, --hf_dir "
                         "or --t5x_dir with --out, --checkpoint with --to_hf")
  if values["t5x_dir"] and not values["gin"]:
    raise app.UsageError("--t5x_dir: a t5x checkpoint records no architecture; name the model's gin file, "
                         "e.g. --gin_file=gin/models/t5_1_1/base.gin")
  if source == "checkpoint":
    checkpoints.check_checkpoint(values["checkpoint"], "--checkpoint")
    return
  checkpoints.check_directory(values[source], f"--{source}")
  if source == "hf_dir" and not checkpoints.is_hf_checkpoint(values["hf_dir"]):
    raise FileNotFoundError(f"--hf_dir {values['hf_dir']}: no config.json there (a Hugging Face directory has one)")
  if source == "t5x_dir" and t5x_checkpoint.t5x_step_dir(values["t5x_dir"]) is None:
    raise FileNotFoundError(f"--t5x_dir {values['t5x_dir']}: no t5x checkpoint there (a checkpoint_<step>/ "
                            "directory with a `checkpoint` msgpack file or a `state/` directory)")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  values = {name: flags.FLAGS[name].value for name in ("hf_dir", "t5x_dir", "checkpoint", "out", "to_hf")}
  values["gin"] = bool(flags.FLAGS.gin_file or flags.FLAGS.gin_bindings)
  _check_directions(values)
  console.quiet_libraries()
  model_config = _configured_model() if values["gin"] else None
  if values["checkpoint"]:
    config, written = export_hf(values["checkpoint"], values["to_hf"], model_config)
    print(f"wrote {', '.join(written)} ({config})", flush=True)
    return
  config = convert(values["hf_dir"] or values["t5x_dir"], values["out"], model_config,
                   flags.FLAGS.sentencepiece_model)
  print(f"wrote {storage.join(values['out'], PARAMS_SUBDIR)} and "
        f"{storage.join(values['out'], checkpoints.CONFIG_FILE)} ({config})", flush=True)


if __name__ == "__main__":
  flags.DEFINE_string("hf_dir", None, "Hugging Face T5 directory (config.json + *.safetensors) to convert.")
  flags.DEFINE_string("t5x_dir", None,
                      "t5x model directory (its latest step) or checkpoint_<step>/ to convert.")
  flags.DEFINE_string("out", None, "Output directory for the orbax checkpoint and t5_config.json.")
  flags.DEFINE_string("checkpoint", None, "Checkpoint to export (any format CHECKPOINT_PATH accepts).")
  flags.DEFINE_string("sentencepiece_model", None,
                      "The SentencePiece model the imported checkpoint was trained with, recorded with it "
                      "(default: the Hugging Face directory's spiece.model; a t5x checkpoint names none).")
  flags.DEFINE_string("to_hf", None, "Output directory of the Hugging Face export of --checkpoint.")
  gin_cli.run(main)
