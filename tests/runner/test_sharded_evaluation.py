"""Evaluation on a (data 2, model 4) mesh of 8 simulated devices: sharded as training is, same scores."""
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
      from runner import checkpoints, evaluate, outputs, partitioning

      config = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
                        num_encoder_layers=2, num_decoder_layers=2)
      checkpoints.save_params("ckpt/params", init_params(config, jax.random.PRNGKey(4)))
      checkpoints.write_model_config("ckpt", config)
      lengths = {{"inputs": 256, "targets": 64}}
      evaluate.evaluate(mixture_or_task_name="asq_intent_cloze", task_feature_lengths=lengths,
                        checkpoint_path="ckpt", output_dir="sharded", batch_size=8, mesh_shape=(2, 4))

      # The parameters are split over the model axis: each device holds a quarter of the MLP.
      mesh = partitioning.create_mesh(2, 4)
      _, params = checkpoints.load_params("ckpt", config, mesh)
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
        evaluate.score_task("asq_intent_cloze", "test", lengths, 8,
                            evaluate.make_score_fn(config, "likelihood"), single, appender)
      print("scored", len(outputs.read_predictions("sharded/predictions.jsonl")))
      """, devices=8)
  inside, outside = map(int, out.split("constraints ")[1].split()[:2])
  assert inside > 0 and outside == 0, (inside, outside)
  read = lambda name: {r["id"]: r["scores"] for r in map(json.loads, (tmp_path / name / "predictions.jsonl")
                                                          .read_text().splitlines())}
  sharded, single = read("sharded"), read("single")
  assert sharded.keys() == single.keys() and len(sharded) == int(out.split("scored ")[1].split()[0]) > 4
  difference = max(abs(a - b) for key in sharded for a, b in zip(sharded[key], single[key]))
  assert difference <= 1e-5, difference
