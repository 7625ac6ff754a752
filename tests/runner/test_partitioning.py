"""Partitioning: mesh shapes, rule-table shardings of parameters, optimizer state and batches."""
import jax
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from models import reward as reward_lib
from models.config import T5Config
from runner import lost_host
from runner import partitioning

TINY = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                num_encoder_layers=2, num_decoder_layers=2)


@pytest.fixture(scope="module")
def mesh():
  return partitioning.create_mesh(1, 1, devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def abstract_params():
  return jax.eval_shape(lambda: reward_lib.init_reward_params(TINY, jax.random.PRNGKey(0)))


def test_create_mesh_fills_minus_one_and_rejects_wrong_sizes():
  mesh = partitioning.create_mesh(-1, 1, devices=jax.devices()[:1])
  assert dict(mesh.shape) == {"data": 1, "model": 1}
  with pytest.raises(ValueError, match=r"data \(2\) x model \(1\) must equal the device count \(1\)"):
    partitioning.create_mesh(2, 1, devices=jax.devices()[:1])
  with pytest.raises(ValueError, match="at most one of data and model may be -1"):
    partitioning.create_mesh(-1, -1)


def test_parameters_follow_the_standard_rules(mesh, abstract_params):
  shardings = partitioning.param_shardings(abstract_params, TINY, mesh)
  expected = {  # t5x's rules applied by hand to each parameter's logical axes
      ("token_embedder", "embedding"): P("model", None),                         # vocab, embed
      ("encoder", "layers_0", "attention", "query", "kernel"): P(None, "model"),  # embed, joined_kv
      ("encoder", "layers_0", "attention", "out", "kernel"): P("model", None),    # joined_kv, embed
      ("decoder", "layers_1", "mlp", "wi_1", "kernel"): P(None, "model"),         # embed, mlp
      ("decoder", "layers_1", "mlp", "wo", "kernel"): P("model", None),           # mlp, embed
      ("decoder", "logits_dense", "kernel"): P(None, "model"),                    # embed, vocab
      ("encoder", "relpos_bias", "rel_embedding"): P("model", None),              # heads, relpos_buckets
      ("decoder", "decoder_norm", "scale"): P(None),                              # embed
      ("reward_head", "kernel"): P(),                                             # not a Transformer parameter
  }
  for path, partition in expected.items():
    assert spec_in(shardings, path).spec == partition, path


def spec_in(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def test_optimizer_state_is_split_like_its_parameters(mesh, abstract_params):
  shardings = partitioning.param_shardings(abstract_params, TINY, mesh)
  adam = partitioning.opt_state_shardings(optax.adam(1e-3), abstract_params, shardings, mesh)
  assert adam[0].mu["decoder"]["logits_dense"]["kernel"].spec == P(None, "model")
  assert adam[0].nu["token_embedder"]["embedding"].spec == P("model", None)
  assert adam[0].count.spec == P()
  adafactor = optax.adafactor(1e-3, min_dim_size_to_factor=32)  # tiny's kernels factor from 32 on
  factored = partitioning.opt_state_shardings(adafactor, abstract_params, shardings, mesh)
  state = jax.eval_shape(adafactor.init, abstract_params)
  by_param = {}
  for (path, sharding), leaf in zip(jax.tree_util.tree_flatten_with_path(factored)[0], jax.tree.leaves(state)):
    names = tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))
    by_param.setdefault(names, []).append((leaf.shape, sharding.spec))
  # [64, 384] is factored (dims >= 128): its row and column statistics are small and replicated.
  factored_stats = [(shape, spec) for shape, spec in by_param[("decoder", "logits_dense", "kernel")]
                    if shape in ((64,), (384,))]
  assert sorted(factored_stats) == [((64,), P()), ((384,), P())]
  # A vector is not factored: its full second moment is split like it.
  assert ((64,), P(None)) in by_param[("encoder", "encoder_norm", "scale")]


def test_global_batch_splits_rows_over_the_data_axis(mesh):
  local = {"input_ids": np.arange(24, dtype=np.int32).reshape(4, 6)}
  batch = partitioning.global_batch(local, mesh)
  assert batch["input_ids"].sharding.spec == P("data")
  np.testing.assert_array_equal(np.asarray(batch["input_ids"]), local["input_ids"])


def test_global_batch_places_the_rows_each_device_holds(run_python):
  """On 8 devices, a (4, 2) mesh gives each device a quarter of the rows (replicated over `model`),
  a (1, 8) mesh every row to every device, and rules that put the batch on both axes an eighth;
  process_rows spans what this process's devices hold, and batch_blocks counts the row blocks."""
  out = run_python("""
      import numpy as np
      from runner import partitioning
      batch = {"input_ids": np.arange(8 * 3, dtype=np.int32).reshape(8, 3)}
      both = (("batch", ("data", "model")),) + partitioning.STANDARD_LOGICAL_AXIS_RULES[1:]
      for shape, rules in [((4, 2), partitioning.STANDARD_LOGICAL_AXIS_RULES),
                           ((1, 8), partitioning.STANDARD_LOGICAL_AXIS_RULES), ((4, 2), both)]:
        mesh = partitioning.create_mesh(*shape)
        array = partitioning.global_batch(batch, mesh, rules)["input_ids"]
        np.testing.assert_array_equal(np.asarray(array), batch["input_ids"])
        rows = sorted({len(shard.data) for shard in array.addressable_shards})
        print(shape, rows, partitioning.process_rows(mesh, 8, rules), partitioning.batch_blocks(mesh, rules))
      """, devices=8)
  assert out.splitlines() == ["(4, 2) [2] (0, 8) 4", "(1, 8) [8] (0, 8) 1", "(4, 2) [1] (0, 8) 8"]


def test_a_batch_size_the_row_blocks_do_not_divide_is_refused_before_any_work(run_python):
  """BATCH_SIZE 6 on 4 devices: evaluation and generation refuse it by the number of row blocks
  (`batch_blocks`), 4 with rules that put the batch on both mesh axes of a (2, 2) mesh; 6 splits
  over the data axis alone (2) and then fails elsewhere (the checkpoint does not exist)."""
  out = run_python("""
      from runner import configs, evaluate, infer, partitioning
      both = (("batch", ("data", "model")),) + partitioning.STANDARD_LOGICAL_AXIS_RULES[1:]
      for rules in (both, partitioning.STANDARD_LOGICAL_AXIS_RULES):
        calls = {"evaluate": lambda: evaluate.evaluate(
                     dataset=configs.DatasetConfig("none", {}, "test", 6), checkpoint_path="none",
                     output_dir="out", partitioner=partitioning.Partitioner((2, 2), rules)),
                 "generate": lambda: infer._load("none", None, None, partitioning.Partitioner((2, 2), rules), 6)}
        for name, call in calls.items():
          try:
            call()
          except Exception as e:  # pylint: disable=broad-except
            print(name, type(e).__name__, str(e).splitlines()[0])
      """, devices=4)
  lines = out.splitlines()
  assert lines[:2] == ["evaluate ValueError BATCH_SIZE 6 is not divisible by the mesh's data axis (4)",
                       "generate ValueError BATCH_SIZE 6 is not divisible by the mesh's data axis (4)"], out
  assert len(lines) == 4 and not any("divisible" in line for line in lines[2:]), out


def test_a_lost_host_is_declared_after_20_seconds_unless_the_environment_says_otherwise(monkeypatch):
  """jax's own 100 s would keep a pod's survivors of a vanished host waiting well past 30 s."""
  joined = []
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  monkeypatch.setattr(jax.distributed, "initialize", lambda **arguments: joined.append(arguments))
  monkeypatch.setattr(jax.config, "update", lambda *args: None)  # gloo: nothing joins here
  monkeypatch.setattr(lost_host, "install", lambda *args: None)  # this process's stderr stays pytest's
  run = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
  partitioning.initialize_distributed(environ=run)
  partitioning.initialize_distributed(environ={**run, "JAX_HEARTBEAT_TIMEOUT_SECONDS": "7"})
  assert [arguments["heartbeat_timeout_seconds"] for arguments in joined] == [20, 7]
  assert joined[0]["process_id"] == 1 and joined[0]["num_processes"] == 2


def test_the_heartbeat_default_is_one_number_for_the_run_and_launch_local():
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import launch_local  # pylint: disable=g-import-not-at-top,unused-import  # defines its flags
  assert lost_host.DEFAULT_HEARTBEAT_TIMEOUT_S == 20
  assert flags.FLAGS["heartbeat_timeout_seconds"].help.endswith("(unset: the run's default, 20).")
