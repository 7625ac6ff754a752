"""A tiny PPO problem with a programmatic reward, run by tests/runner/test_ppo.py in its own
process and in subprocesses:

  python -m tests.runner.ppo_toy MODEL_DIR STEPS [--pause_at=N] [--mesh=DATA,MODEL]

The policy is a random 16-id T5 (written once to MODEL_DIR/../policy); the reward of a response
is the share of its tokens that are `TOKEN`; prompts are 4 random ids, batch i drawn with seed i.
With --pause_at, the run writes MODEL_DIR/../paused when it asks for that step's prompts and then
waits (for a SIGKILL); --mesh is the partitioner's mesh shape (every process's devices). At the
end process 0 writes the parameters to MODEL_DIR/../final.npz.
"""
import pathlib
import sys
import time

import flax.traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from models.config import T5Config
from models.network import init_params
from runner import checkpoints
from runner import configs
from runner import partitioning
from runner import ppo
from runner import train as train_lib
from runner import trainer

CONFIG = T5Config(vocab_size=16, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64, num_encoder_layers=1,
                  num_decoder_layers=1)
TOKEN = 5
BATCH, PROMPT, RESPONSE = 32, 4, 8
KL_TARGET = 1.0
COMPARISON = np.random.default_rng(99).integers(2, 16, size=(16, PROMPT)).astype(np.int32)


def score(_, input_ids, responses):
  """The share of a response's tokens (EOS included) that are TOKEN [B]."""
  del input_ids
  return jnp.sum(responses == TOKEN, axis=-1) / jnp.maximum(jnp.sum(responses > 0, axis=-1), 1)


def prompt_batches(pause_at=None, marker=None):
  def batches(start_step):
    step = start_step
    while True:
      if step == pause_at:
        marker.write_text(str(step))
        time.sleep(600)
      yield {"input_ids": np.random.default_rng(step).integers(2, 16, size=(BATCH, PROMPT)).astype(np.int32)}
      step += 1
  return train_lib.BatchSource(batches, BATCH, {"inputs": PROMPT, "targets": RESPONSE})


def policy_checkpoint(directory: pathlib.Path) -> str:
  path = directory / "policy"
  if not path.exists():
    checkpoints.save_params(str(path), init_params(CONFIG, jax.random.PRNGKey(0)))
    checkpoints.write_model_config(str(path), CONFIG)
  return str(path)


def run(model_dir: pathlib.Path, steps: int, pause_at=None, checkpoint_every=1000, mesh_shape=(-1, 1)):
  """ppo.train on the toy: the adaptive KL controller aims at KL_TARGET nats."""
  return ppo.train(
      model_config=CONFIG, prompts=prompt_batches(pause_at, model_dir.parent / "paused"),
      training=configs.TrainingConfig(steps=steps, optimizer=trainer.make_optimizer("adamw", 1e-3), log_every=1),
      ppo=configs.PPOConfig(policy_checkpoint_path=policy_checkpoint(model_dir.parent), kl_coefficient=0.1,
                            kl_target=KL_TARGET, kl_horizon=64, temperature=1.0),
      checkpoint=configs.CheckpointConfig(every=checkpoint_every),
      partitioner=partitioning.Partitioner(mesh_shape=mesh_shape),
      model_dir=str(model_dir), comparison=COMPARISON, score=score)


def flat_params(params) -> dict:
  """Every process's shards gathered: {'policy/...': array}."""
  whole = multihost_utils.process_allgather(params, tiled=True)
  return {"/".join(path): np.asarray(value) for path, value in flax.traverse_util.flatten_dict(whole).items()}


if __name__ == "__main__":
  options = dict(arg[2:].split("=", 1) for arg in sys.argv[3:])
  directory = pathlib.Path(sys.argv[1])
  result = run(directory, int(sys.argv[2]), int(options["pause_at"]) if "pause_at" in options else None,
               checkpoint_every=1, mesh_shape=tuple(map(int, options.get("mesh", "-1,1").split(","))))
  params = flat_params(result.params)
  if jax.process_index() == 0:
    np.savez(directory.parent / "final.npz", **params)
