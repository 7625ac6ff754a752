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
      restored = checkpoints.restore_params("run", config, other_mesh)
      spec = restored["decoder"]["logits_dense"]["kernel"].sharding
      assert spec.mesh.shape == {"data": 8, "model": 1}, spec
      single = checkpoints.restore_params("run/checkpoints/7", config)
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


def test_restore_params_names_a_missing_directory(tmp_path):
  from models.config import T5Config
  from runner import checkpoints
  with pytest.raises(FileNotFoundError, match="does not exist"):
    checkpoints.restore_params(tmp_path / "absent", T5Config())
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="no orbax checkpoint found"):
    checkpoints.restore_params(tmp_path / "empty", T5Config())
