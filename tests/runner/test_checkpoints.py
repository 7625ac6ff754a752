"""Checkpoints: a save on mesh (4, 2) restores on mesh (8, 1) and on one device to identical values."""
import pytest


def test_checkpoint_from_mesh_4x2_restores_on_mesh_8x1_and_one_device(run_python):
  out = run_python("""
      import jax, numpy as np, optax
      from models.config import T5Config
      from models.network import init_params
      from runner import checkpoints, partitioning
      config = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                        num_encoder_layers=2, num_decoder_layers=2)
      params = init_params(config, jax.random.PRNGKey(3))
      optimizer = optax.adamw(1e-3)
      expected = jax.tree.map(np.asarray, params)

      saving_mesh = partitioning.create_mesh(4, 2)
      shardings = partitioning.param_shardings(params, config, saving_mesh)
      sharded = jax.device_put(params, shardings)
      kernel = sharded["decoder"]["layers_0"]["mlp"]["wi_0"]["kernel"]
      assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model"), kernel.sharding
      opt_state = jax.jit(optimizer.init)(sharded)
      opt_state = jax.tree.map(lambda x: x + 1 if x.dtype.kind == "f" else x, opt_state)
      expected_opt = jax.tree.map(np.asarray, opt_state)
      manager = checkpoints.checkpoint_manager("run", keep=2)
      checkpoints.save(manager, 7, sharded, opt_state, {"position": 7})
      manager.wait_until_finished()

      other_mesh = partitioning.create_mesh(8, 1)
      restored = checkpoints.load_params("run", config, partitioning.Partitioner.for_mesh(other_mesh))[1]
      spec = restored["decoder"]["logits_dense"]["kernel"].sharding
      assert spec.mesh.shape == {"data": 8, "model": 1}, spec
      single = checkpoints.load_params("run/checkpoints/7", config)[1]
      for tree in (restored, single):
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, tree), expected)
      assert len(single["encoder"]["layers_1"]["mlp"]["wo"]["kernel"].sharding.device_set) == 1

      other_shardings = partitioning.param_shardings(params, config, other_mesh)
      abstract = partitioning.with_shardings(params, other_shardings)
      abstract_opt = partitioning.with_shardings(
          jax.eval_shape(optimizer.init, params),
          partitioning.opt_state_shardings(optimizer, params, other_shardings, other_mesh))
      step, p, o, position = checkpoints.restore(checkpoints.checkpoint_manager("run"), abstract, abstract_opt)
      assert step == 7 and position == {"position": 7, "step": 7}, (step, position)
      jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, o), expected_opt)
      print("restored", len(jax.tree.leaves(p)))
      """, devices=8)
  assert "restored" in out


def test_load_params_names_a_missing_directory(tmp_path):
  from models.config import T5Config
  from runner import checkpoints
  with pytest.raises(FileNotFoundError, match="does not exist"):
    checkpoints.load_params(tmp_path / "absent", T5Config())
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="holds no checkpoint: no checkpoints/<step>/params"):
    checkpoints.load_params(tmp_path / "empty", T5Config())


def test_check_checkpoint_names_the_macro_the_path_and_what_is_missing(tmp_path):
  """What a command checks before it prepares any data: a missing folder, a file, a MODEL_DIR never
  trained, a Hugging Face directory whose weights are cut short; a checkpoint of each format passes."""
  import re  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from models import checkpoint_export  # pylint: disable=g-import-not-at-top
  from models import checkpoint_import  # pylint: disable=g-import-not-at-top
  from models.config import T5Config  # pylint: disable=g-import-not-at-top
  from models.network import init_params  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top
  (tmp_path / "a_file").write_text("x")
  (tmp_path / "never_trained").mkdir()
  (tmp_path / "never_trained" / "config.gin").write_text("")
  refusals = {"absent": (FileNotFoundError, f"CHECKPOINT_PATH {tmp_path / 'absent'} does not exist"),
              "a_file": (NotADirectoryError, f"CHECKPOINT_PATH {tmp_path / 'a_file'} is a file, not a directory"),
              "never_trained": (FileNotFoundError, f"CHECKPOINT_PATH {tmp_path / 'never_trained'} holds no checkpoint: "
                                                   "no checkpoints/<step>/params")}
  for name, (kind, message) in refusals.items():
    with pytest.raises(kind, match="^" + re.escape(message)):
      checkpoints.check_checkpoint(str(tmp_path / name), "CHECKPOINT_PATH")
  config = T5Config(vocab_size=64, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                    num_encoder_layers=1, num_decoder_layers=1)
  params = init_params(config, jax.random.PRNGKey(0))
  checkpoints.save_params(tmp_path / "converted" / "params", params)
  checkpoint_export.save_hf_t5(str(tmp_path / "hf"), config, params)
  for good in ("converted", "converted/params", "hf"):
    checkpoints.check_checkpoint(str(tmp_path / good), "CHECKPOINT_PATH")
  weights = tmp_path / "hf" / "model.safetensors"
  size = weights.stat().st_size
  weights.write_bytes(weights.read_bytes()[:size - 1])
  with pytest.raises(checkpoint_import.CheckpointImportError, match="^" + re.escape(
      f"{weights}: truncated: the file has {size - 1} of the {size} bytes its header describes") + "$"):
    checkpoints.check_checkpoint(str(tmp_path / "hf"), "CHECKPOINT_PATH")


def _saved_tiny(directory, config):
  import jax
  from models.network import init_params
  from runner import checkpoints
  params = init_params(config, jax.random.PRNGKey(0))
  checkpoints.save_params(str(directory / "params"), params)
  return params


def test_load_params_names_every_mismatched_architecture_field(tmp_path):
  from models.config import T5Config
  from runner import checkpoints
  saved = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                   num_encoder_layers=2, num_decoder_layers=2)
  _saved_tiny(tmp_path / "ckpt", saved)
  checkpoints.write_model_config(str(tmp_path / "ckpt"), saved)
  configured = saved.replace(num_heads=8, num_decoder_layers=3, relative_attention_num_buckets=16,
                             dtype="bfloat16", dropout_rate=0.1)  # the last two are the run's choices
  with pytest.raises(ValueError) as error:
    checkpoints.load_params(str(tmp_path / "ckpt"), configured)
  message = str(error.value)
  assert message.startswith(f"checkpoint {tmp_path / 'ckpt'} does not match MODEL_CONFIG: ")
  for field, ours, theirs in (("num_heads", 4, 8), ("num_decoder_layers", 2, 3),
                              ("relative_attention_num_buckets", 32, 16)):
    assert f"{field}: checkpoint {ours}, MODEL_CONFIG {theirs}" in message
  assert "dtype" not in message and "dropout_rate" not in message
  # The run's choices apply over an agreeing checkpoint.
  config, _ = checkpoints.load_params(str(tmp_path / "ckpt"), saved.replace(dtype="bfloat16"))
  assert config.dtype == "bfloat16"


def test_load_params_without_a_saved_config_checks_the_parameter_shapes(tmp_path):
  from models.config import T5Config
  from runner import checkpoints
  saved = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                   num_encoder_layers=2, num_decoder_layers=2)
  _saved_tiny(tmp_path / "bare", saved)  # no t5_config.json: MODEL_CONFIG alone describes it
  with pytest.raises(ValueError, match=r"does not fit MODEL_CONFIG: decoder/layers_0/mlp/wi_0/kernel: "
                                       r"shape \(64, 128\), MODEL_CONFIG needs \(64, 256\); "):
    checkpoints.load_params(str(tmp_path / "bare"), saved.replace(mlp_dim=256))
  with pytest.raises(ValueError, match=r"does not fit MODEL_CONFIG: decoder/layers_2/encoder_decoder_attention"
                                       r"/key/kernel: missing; .*; and \d+ more$"):
    checkpoints.load_params(str(tmp_path / "bare"), saved.replace(num_decoder_layers=3))


def test_load_params_finds_the_run_config_from_a_step_directory_and_refuses_pickles(tmp_path):
  import jax
  import numpy as np
  from models.config import T5Config
  from runner import checkpoints
  config = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                    num_encoder_layers=2, num_decoder_layers=2)
  params = _saved_tiny(tmp_path / "run" / "checkpoints" / "5", config)
  checkpoints.write_model_config(str(tmp_path / "run"), config)
  for path in ("run", "run/checkpoints", "run/checkpoints/5"):
    found, restored = checkpoints.load_params(str(tmp_path / path))
    assert found == config
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored), jax.device_get(params))
  (tmp_path / "hf").mkdir()
  (tmp_path / "hf" / "config.json").write_text("{}")
  (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"")
  with pytest.raises(ValueError, match="no \\*.safetensors file. It has pytorch_model.bin: pickled weights"):
    checkpoints.load_params(str(tmp_path / "hf"))
