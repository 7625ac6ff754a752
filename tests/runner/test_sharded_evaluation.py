"""Evaluation on a (data 2, model 4) mesh of 8 simulated devices: sharded as training is, same scores;
on (data 8): a short batch's rows are a multiple of 8."""
import json


def test_evaluation_on_a_2x4_mesh_shards_the_model_and_matches_one_device(run_python, tmp_path):
  out = run_python(f"""
      import json, os
      import jax, numpy as np
      import t5_tasks
      from jax.sharding import PartitionSpec as P
      from models import scoring
      from models.config import T5Config
      from models.network import init_params
      from runner import checkpoints, configs, evaluate, outputs, partitioning, scorers, scoring_loop

      # One layer each way: the sharding and the scores compared do not depend on depth (fewer to compile).
      config = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                        num_encoder_layers=1, num_decoder_layers=1)
      checkpoints.save_params("ckpt/params", init_params(config, jax.random.PRNGKey(4)))
      checkpoints.write_model_config("ckpt", config)
      lengths = {{"inputs": 256, "targets": 64}}
      evaluate.evaluate(dataset=configs.DatasetConfig("asq_intent_cloze", lengths, "test", 8),
                        checkpoint_path="ckpt", output_dir="sharded", partitioner=partitioning.Partitioner((2, 4)))

      # The parameters are split over the model axis: each device holds a quarter of the MLP.
      mesh = partitioning.create_mesh(2, 4)
      _, params = checkpoints.load_params("ckpt", config, partitioning.Partitioner.for_mesh(mesh))
      wi = params["encoder"]["layers_0"]["mlp"]["wi_0"]["kernel"]
      assert wi.sharding.spec == P(None, "model"), wi.sharding
      assert {{shard.data.shape for shard in wi.addressable_shards}} == {{(64, 32)}}
      # Inside the mesh and rules the network's activation constraints are real; outside, no-ops.
      ids = np.ones((8, 16), np.int32)
      candidates = np.ones((8, 2, 8), np.int32)
      lower = lambda: scoring.score_candidates.lower(config, params, ids, candidates).as_text()
      with partitioning.activate(mesh):
        inside = lower().count("sharding_constraint")
      outside = lower().count("sharding_constraint")
      print("constraints", inside, outside)

      # The same items scored on one device, unsharded, outside any mesh.
      single = jax.device_put(jax.device_get(params), jax.devices()[0])
      with outputs.PredictionsAppender("single") as appender:
        stats = scoring_loop.score_task("asq_intent_cloze", "test", lengths, 8,
                                    scorers.make_score_fn(config, "likelihood"), single, appender)
      print("rows alone", sorted(shape[0] for shape in stats.shapes.elements()))
      # Rows split 8 ways: the short batch's 4 items take 8 rows, one per device.
      eight = partitioning.create_mesh(8, 1)
      _, params = checkpoints.load_params("ckpt", config, partitioning.Partitioner.for_mesh(eight))
      with outputs.PredictionsAppender("eight") as appender:
        stats = scoring_loop.score_task("asq_intent_cloze", "test", lengths, 8,
                                    scorers.make_score_fn(config, "likelihood", partitioner=partitioning.Partitioner.for_mesh(eight)), params, appender,
                                    partitioner=partitioning.Partitioner.for_mesh(eight))
      print("rows on 8", sorted(shape[0] for shape in stats.shapes.elements()))
      print("items written:", len(outputs.read_predictions("sharded/predictions.jsonl")))
      """, devices=8)
  # The task's 12 items: a short batch of 4 (bucketed: the first), then 8.
  assert "rows alone [4, 8]" in out and "rows on 8 [8, 8]" in out, out
  inside, outside = map(int, out.split("constraints ")[1].split()[:2])
  assert inside > 0 and outside == 0, (inside, outside)
  read = lambda name: {r["id"]: r["scores"] for r in map(json.loads, (tmp_path / name / "predictions.jsonl")
                                                          .read_text().splitlines())}
  sharded, single, eight = read("sharded"), read("single"), read("eight")
  assert sharded.keys() == single.keys() == eight.keys()
  assert len(sharded) == int(out.split("items written: ")[1].split()[0]) > 4
  for other in (sharded, eight):
    difference = max(abs(a - b) for key in other for a, b in zip(other[key], single[key]))
    assert difference <= 1e-5, difference


def test_small_on_a_1x4_mesh_holds_a_quarter_per_device_and_scores_as_one_device(run_python):
  """T5.1.1 small (gin/models/t5_1_1/small.gin), random, with a reward head, loaded by
  `checkpoints.load_params` onto mesh (data 1, model 4): the wide parameters are split four ways
  (their shardings, and each device's bytes against a count from the config alone), and
  likelihoods and rewards computed there equal one unsharded device's. (Decoding inside a mesh that
  spans processes: tests/runner/test_multi_process_generation.py, on the tiny model.)"""
  out = run_python("""
      import json
      import flax, jax, numpy as np
      from models import reward as reward_lib, scoring
      from models.config import T5Config
      from runner import checkpoints, partitioning
      from tests.models.t5x_fixtures import random_params

      config = T5Config(vocab_size=32128, emb_dim=512, num_heads=6, head_dim=64, mlp_dim=1024,
                        num_encoder_layers=8, num_decoder_layers=8, mlp_activations=("gelu", "linear"),
                        logits_via_embedding=False)
      # The network's random parameters drawn by numpy (jax's threefry takes ~10 s of CPU for small's
      # 77M numbers), the reward head by init_reward_params.
      checkpoints.save_params("small/params", reward_lib.init_reward_params(
          config, jax.random.PRNGKey(5), random_params(config, 5)))
      checkpoints.write_model_config("small", config)
      mesh = partitioning.create_mesh(1, 4)
      _, params = checkpoints.load_params("small", config, partitioning.Partitioner.for_mesh(mesh))

      leaves = flax.traverse_util.flatten_dict(params, sep="/")
      per_device = {str(device): 0 for device in mesh.devices.flat}
      for leaf in leaves.values():
        for shard in leaf.addressable_shards:
          per_device[str(shard.device)] += shard.data.nbytes
      placement = {name: [list(leaves[name].sharding.spec),
                          sorted({shard.data.shape for shard in leaves[name].addressable_shards})]
                   for name in ("encoder/layers_0/mlp/wi_0/kernel", "decoder/layers_7/self_attention/out/kernel",
                                "token_embedder/embedding", "decoder/logits_dense/kernel",
                                "encoder/relpos_bias/rel_embedding", "reward_head/kernel")}

      rng = np.random.RandomState(0)
      ids = rng.randint(2, 32000, (2, 32)).astype(np.int32)
      ids[1, 20:] = 0
      candidates = rng.randint(2, 32000, (2, 2, 32)).astype(np.int32)
      candidates[:, 1, 12:] = 0

      def computed(p):
        return (np.asarray(scoring.score_candidates(config, p, ids, candidates)),
                np.asarray(reward_lib.reward(config, p, ids, candidates)))

      with partitioning.activate(mesh):
        sharded = computed(params)
      single = computed(jax.device_put(jax.device_get(params), jax.devices()[0]))
      print(json.dumps({
          "per_device": per_device, "total": sum(leaf.nbytes for leaf in leaves.values()),
          "placement": placement,
          "score_difference": float(np.abs(sharded[0] - single[0]).max()),
          "reward_difference": float(np.abs(sharded[1] - single[1]).max())}))
      """, devices=4)
  found = json.loads(out.splitlines()[-1])
  print("bytes per device", found["per_device"], "of", found["total"])
  # Parameter bytes from small.gin's sizes alone (float32): what model parallelism splits (attention
  # and MLP kernels, the embedding and the logits layer), and what every device holds whole (layer
  # norms, the relative position biases: 6 heads do not split 4 ways, the reward head).
  vocab, emb, inner, mlp, layers, heads, buckets = 32128, 512, 6 * 64, 1024, 8, 6, 32
  attention, mlp_block = 4 * emb * inner, 3 * emb * mlp  # q, k, v, out; wi_0, wi_1, wo
  split = 4 * (layers * (attention + mlp_block) + layers * (2 * attention + mlp_block) + 2 * vocab * emb)
  whole = 4 * ((2 * layers + 3 * layers + 2) * emb + 2 * heads * buckets + emb + 1)
  assert found["total"] == split + whole
  assert len(found["per_device"]) == 4
  assert set(found["per_device"].values()) == {split // 4 + whole}, found["per_device"]
  split_four_ways = {"encoder/layers_0/mlp/wi_0/kernel": ([None, "model"], [emb, mlp // 4]),
                     "decoder/layers_7/self_attention/out/kernel": (["model", None], [inner // 4, emb]),
                     "token_embedder/embedding": (["model", None], [vocab // 4, emb]),
                     "decoder/logits_dense/kernel": ([None, "model"], [emb, vocab // 4])}
  for name, (spec, shard) in split_four_ways.items():
    assert found["placement"][name] == [spec, [shard]], (name, found["placement"][name])
  assert found["placement"]["encoder/relpos_bias/rel_embedding"][1] == [[heads, buckets]]
  assert found["placement"]["reward_head/kernel"][1] == [[emb, 1]]
  assert found["score_difference"] <= 1e-5 and found["reward_difference"] <= 1e-5, found
