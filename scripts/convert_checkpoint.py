r"""Converts a Hugging Face T5 checkpoint into an orbax checkpoint the runner reads.

  python -m scripts.convert_checkpoint --hf_dir /models/t5-v1_1-small --out /ckpt/t5-small

writes `OUT/params` (params-only orbax checkpoint: CHECKPOINT_PATH / INITIAL_CHECKPOINT_PATH
for evaluation and training) and `OUT/t5_config.json` (the architecture, read when no
MODEL_CONFIG is bound). The HF directory needs config.json and *.safetensors.
"""
import os
from typing import Sequence

from absl import app
from absl import flags

from models import checkpoint_import
from models.config import T5Config
from runner import checkpoints
from scripts import console

PARAMS_SUBDIR = "params"


def convert(hf_dir: str, out_dir: str) -> T5Config:
  """Writes `out_dir/params` and `out_dir/t5_config.json` from a Hugging Face T5 directory."""
  params_dir = os.path.join(os.path.abspath(out_dir), PARAMS_SUBDIR)
  if os.path.exists(params_dir):
    raise FileExistsError(f"{params_dir} already exists; choose a new --out directory")
  config, params = checkpoint_import.load_hf_t5(hf_dir)
  os.makedirs(out_dir, exist_ok=True)
  checkpoints.save_params(params_dir, params)
  checkpoints.write_model_config(out_dir, config)
  return config


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  config = convert(flags.FLAGS.hf_dir, flags.FLAGS.out)
  print(f"wrote {os.path.join(flags.FLAGS.out, PARAMS_SUBDIR)} and "
        f"{os.path.join(flags.FLAGS.out, checkpoints.CONFIG_FILE)} ({config})", flush=True)


if __name__ == "__main__":
  flags.DEFINE_string("hf_dir", None, "Hugging Face T5 directory (config.json + *.safetensors).",
                      required=True)
  flags.DEFINE_string("out", None, "Output directory for the orbax checkpoint and t5_config.json.",
                      required=True)
  app.run(main)
