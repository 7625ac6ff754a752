"""t5x checkpoints, written from their layouts (tests/models/t5x_fixtures.py), load to the tree they
were written from and score candidates identically, through `load_t5x` and the one loader."""
import jax
import numpy as np
import pytest
from flax import traverse_util

from models import t5x_checkpoint
from models.config import T5Config
from models.scoring import score_candidates
from runner import checkpoints
from tests.models import t5x_fixtures
from tests.models.hf_reference import random_ids

# A random tiny T5.1.1, gated-GELU, with decoder deeper than encoder (transformers#27448).
CONFIG = T5Config(vocab_size=96, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=48,
                  num_encoder_layers=2, num_decoder_layers=3)
STEP = 1200
LAYOUTS = ("legacy", "orbax_msgpack", "orbax")
INLINE = ("encoder/encoder_norm/scale", "decoder/layers_1/pre_mlp_layer_norm/scale")
BUCKET_WRITTEN = ("decoder/logits_dense/kernel",)


def _flat(tree):
  return traverse_util.flatten_dict(jax.tree.map(np.asarray, tree), sep="/")


@pytest.fixture(scope="module")
def params():
  return t5x_fixtures.random_params(CONFIG, seed=7)


@pytest.fixture(scope="module")
def model_dirs(params, tmp_path_factory):
  """{layout: a t5x model directory holding it at STEP}."""
  root = tmp_path_factory.mktemp("t5x")
  states = t5x_fixtures.adafactor_like_states(params)
  t5x_fixtures.write_legacy(root / "legacy", STEP, params, states, inline=INLINE,
                            bucket_written=BUCKET_WRITTEN)
  t5x_fixtures.write_orbax_msgpack(root / "orbax_msgpack", STEP, params, states)
  t5x_fixtures.write_orbax(root / "orbax", STEP, params, states)
  return {layout: root / layout for layout in LAYOUTS}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_loads_the_tree_it_was_written_from(layout, model_dirs, params):
  loaded = _flat(t5x_checkpoint.load_t5x(model_dirs[layout]))
  expected = _flat(params)
  assert sorted(loaded) == sorted(expected)
  for name, value in expected.items():
    assert loaded[name].dtype == np.float32, name
    np.testing.assert_array_equal(loaded[name], value, err_msg=name)
  shapes = traverse_util.flatten_dict(t5x_checkpoint.t5x_shapes(model_dirs[layout]), sep="/")
  assert {name: s.shape for name, s in shapes.items()} == {name: v.shape for name, v in expected.items()}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_optimizer_state_only_when_asked(layout, model_dirs, params):
  loaded, state = t5x_checkpoint.load_t5x(model_dirs[layout] / f"checkpoint_{STEP}", optimizer_state=True)
  assert int(state["step"]) == STEP
  expected = _flat(t5x_fixtures.adafactor_like_states(params))
  found = _flat(state["param_states"])
  assert sorted(found) == sorted(expected)
  np.testing.assert_array_equal(found["decoder/layers_2/mlp/wo/kernel/v_col"],
                                expected["decoder/layers_2/mlp/wo/kernel/v_col"])
  assert sorted(_flat(loaded)) == sorted(_flat(params))


def test_every_layout_scores_candidates_as_its_source(model_dirs, params):
  rng = np.random.default_rng(5)
  input_ids = random_ids(rng, (2, 10), CONFIG.vocab_size, pad_from=[10, 4])
  candidates = np.stack([random_ids(rng, (3, 6), CONFIG.vocab_size, pad_from=[6, 2, 4]) for _ in range(2)])
  expected = np.asarray(score_candidates(CONFIG, params, input_ids, candidates))
  for layout in LAYOUTS:
    config, loaded = checkpoints.load_params(str(model_dirs[layout]), CONFIG)  # MODEL_CONFIG describes it
    assert config == CONFIG
    scores = np.asarray(score_candidates(config, loaded, input_ids, candidates))
    np.testing.assert_array_equal(scores, expected, err_msg=layout)


def test_model_dir_means_its_latest_finished_step(params, tmp_path):
  later = jax.tree.map(lambda x: x + 1.0, params)
  t5x_fixtures.write_legacy(tmp_path, 100, params)
  t5x_fixtures.write_legacy(tmp_path, 200, later)
  (tmp_path / "checkpoint_300.tmp-1700000000").mkdir()  # a save cut short: t5x renames it when done
  assert t5x_checkpoint.t5x_step_dir(tmp_path).name == "checkpoint_200"
  loaded = _flat(t5x_checkpoint.load_t5x(tmp_path))
  np.testing.assert_array_equal(loaded["token_embedder/embedding"], later["token_embedder"]["embedding"])
  assert t5x_checkpoint.t5x_step_dir(tmp_path / "checkpoint_300.tmp-1700000000") is None


def test_bfloat16_checkpoint_loads_its_exact_float32_values(params, tmp_path):
  t5x_fixtures.write_legacy(tmp_path, 1, params, dtype=jax.numpy.bfloat16)  # t5x's save_dtype
  loaded = _flat(checkpoints.load_params(str(tmp_path), CONFIG)[1])
  for name, value in _flat(params).items():
    assert loaded[name].dtype == np.float32, name
    rounded = value.astype(jax.numpy.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(loaded[name], rounded, err_msg=name)


def test_other_checkpoints_are_not_taken_for_t5x(tmp_path, params):
  checkpoints.save_params(str(tmp_path / "params"), params)  # an orbax PyTree of this project
  assert t5x_checkpoint.t5x_step_dir(tmp_path) is None
  assert t5x_checkpoint.t5x_step_dir(tmp_path / "params") is None
  assert t5x_checkpoint.t5x_step_dir(tmp_path / "absent") is None


def test_a_tree_of_another_architecture_is_named(model_dirs):
  shallower = CONFIG.replace(num_decoder_layers=2)
  with pytest.raises(ValueError, match=r"checkpoint_1200 does not fit MODEL_CONFIG: .*decoder/layers_2/"
                                       r"encoder_decoder_attention/key/kernel: not a parameter"):
    checkpoints.load_params(str(model_dirs["legacy"]), shallower)
  wider = CONFIG.replace(mlp_dim=64)
  with pytest.raises(ValueError, match=r"decoder/layers_0/mlp/wi_0/kernel: shape \(32, 48\), "
                                       r"MODEL_CONFIG needs \(32, 64\)"):
    checkpoints.load_params(str(model_dirs["orbax"]), wider)


def test_a_renamed_parameter_is_named(params, tmp_path):
  flat = _flat(params)
  flat["decoder/layers_0/mlp/wi/kernel"] = flat.pop("decoder/layers_0/mlp/wi_0/kernel")  # T5.1.0's name
  t5x_fixtures.write_orbax_msgpack(tmp_path, 3, traverse_util.unflatten_dict(flat, sep="/"))
  with pytest.raises(ValueError, match=r"decoder/layers_0/mlp/wi_0/kernel: missing; "
                                       r"decoder/layers_0/mlp/wi/kernel: not a parameter of MODEL_CONFIG"):
    checkpoints.load_params(str(tmp_path), CONFIG)


def test_without_model_config_the_error_asks_for_one(model_dirs):
  with pytest.raises(ValueError, match=r"include a model gin file"):
    checkpoints.load_params(str(model_dirs["orbax"]))


def test_a_missing_array_names_the_parameter_and_its_file(params, tmp_path):
  step_dir = t5x_fixtures.write_legacy(tmp_path, 9, params)
  for path in sorted((step_dir / "target.encoder.layers_1.attention.value.kernel").iterdir()):
    path.unlink()
  with pytest.raises(t5x_checkpoint.T5xCheckpointError,
                     match=r"checkpoint_9/checkpoint: parameter 'target/encoder/layers_1/attention/value/"
                           r"kernel': cannot open its array file://.*/checkpoint_9/"
                           r"target\.encoder\.layers_1\.attention\.value\.kernel/"):
    t5x_checkpoint.load_t5x(tmp_path)
