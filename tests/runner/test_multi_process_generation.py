"""Generation on a pod slice on one machine: 2 processes x 2 CPU devices (scripts/launch_local.py)
write the file that 1 process x 4 devices writes, on the same (data 2, model 2) mesh."""
import json
import subprocess
import sys

import jax

from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from tests.conftest import PROJECT_ROOT
from tests.runner.test_multi_process import _env, launch

# gin/models/t5_1_1/tiny.gin's model, so that the command line's model file agrees with the checkpoint.
TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
                num_decoder_layers=2, mlp_activations=("gelu", "linear"))


def test_two_processes_generate_the_file_one_process_generates(compilation_cache, tmp_path):
  checkpoints.save_params(str(tmp_path / "ckpt" / "params"), init_params(TINY, jax.random.PRNGKey(3)))
  checkpoints.write_model_config(str(tmp_path / "ckpt"), TINY)
  situations = tmp_path / "situations.jsonl"
  # Five inputs in batches of 4, each process feeding 2 rows; the last batch is one input padded to
  # the data axis' 2 rows, one from each process.
  # A date: undated situations are dated now, which two runs need not share.
  situations.write_text("".join(json.dumps({"id": f"s{i}", "title": f"Question {i}?", "selftext": "Why? " * i,
                                            "subreddit": "Advice", "created_utc": 1600000000}) + "\n"
                                for i in range(5)))

  def command(output):
    return ["-m", "scripts.generate", "--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/runs/infer.gin",
            f"--gin.CHECKPOINT_PATH='{tmp_path / 'ckpt'}'", f"--gin.INPUT_FILE='{situations}'",
            f"--gin.INFER_OUTPUT_FILE='{tmp_path / output}'", "--gin.BATCH_SIZE=4", "--gin.MESH_SHAPE=(2, 2)",
            "--gin.TOP_P=0.0",  # greedy: the tokens cannot depend on how the sums are split
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 128, 'targets': 12}"]

  single = subprocess.Popen([sys.executable, *command("single.jsonl")], cwd=PROJECT_ROOT,
                            env=_env(compilation_cache, devices=4), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  code, out, err, _ = launch(["--num_processes=2", "--devices_per_process=2"], command("pod.jsonl"),
                             _env(compilation_cache))
  single_out, single_err = single.communicate(timeout=300)
  assert single.returncode == 0, single_err[-3000:]
  assert code == 0, err[-3000:]
  # Both processes read the inputs (and sampled: the other waits on each batch's collectives); process 0 alone wrote.
  assert "[0] generating for 5 inputs" in out and "[1] generating for 5 inputs" in out, out[-3000:]
  assert "[0] wrote" in out and "[1] wrote" not in out, out[-3000:]
  pod, one = (tmp_path / "pod.jsonl").read_text(), (tmp_path / "single.jsonl").read_text()
  lines = [json.loads(line) for line in one.splitlines()]
  assert [line["id"] for line in lines] == [f"s{i}" for i in range(5)]
  assert any(line["predictions"][0] for line in lines)  # a random model's greedy text, not all empty
  assert pod == one
