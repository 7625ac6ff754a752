"""Parameters of a model's shapes drawn by numpy, for tests whose claim holds for any values."""
import jax
import numpy as np

from models.config import T5Config
from models.network import init_params


def random_params(config: T5Config, seed: int):
  """Standard normal values in `init_params`' shapes and dtypes: initialising them in jax (op by op,
  not jitted) compiles for seconds."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(lambda: init_params(config, jax.random.PRNGKey(0)))
  return jax.tree.map(lambda leaf: rng.standard_normal(leaf.shape).astype(leaf.dtype), shapes)
