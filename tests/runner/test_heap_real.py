"""HEAP's real CHASM comparisons (../shared/data/heap/chasm/counter_conan.json) scored by a reward
model through offline evaluation: batched by length, each pair's two counter narratives packed into
one decoder row (`models.reward.reward_packed`). Each candidate's reward must equal the reward head
on that candidate alone (`models.reward.reward`, one row per candidate, arrays padded by
tests.helpers.batching), and the pairwise accuracy must be the share of pairs whose good narrative
scores higher."""
import gin
import jax
import numpy as np
import pytest
import seqio

import t5_tasks  # pylint: disable=unused-import  # registers the tasks
from models import reward as reward_lib
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import evaluate
from runner import outputs
from tests.helpers import batching

CONFIG = T5Config(vocab_size=384, emb_dim=32, num_heads=2, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=1)
# Bytes (no SentencePiece model is bound): the instruction and the post, then one counter
# narrative; GPT-3's run to a few hundred bytes, so some are cut at 256, as seqio cuts them.
LENGTHS = {"inputs": 512, "targets": 256}
TASK = "heap_cno"  # counter-narrative offensiveness: the three systems' narratives of a post, compared
SPLIT = "test"
BATCH = 16


@pytest.fixture
def real_chasm(shared_data):
  gin.clear_config()
  path = shared_data / "heap" / "chasm" / "counter_conan.json"
  gin.bind_parameter("t5_tasks.tasks.data_files.files", {"heap/chasm": {"all": str(path)}})
  yield path
  gin.clear_config()


def test_real_chasm_pairs_get_each_narratives_own_reward(real_chasm, tmp_path):
  params = reward_lib.init_reward_params(CONFIG, jax.random.PRNGKey(3))
  checkpoint = tmp_path / "reward"
  checkpoints.save_params(str(checkpoint / "params"), params)
  checkpoints.write_model_config(str(checkpoint), CONFIG)
  metrics = evaluate.evaluate(dataset=configs.DatasetConfig(TASK, LENGTHS, SPLIT, BATCH),
                              checkpoint_path=str(checkpoint), output_dir=str(tmp_path / "out"),
                              evaluation=configs.EvaluationConfig(scorer="reward"))
  records = outputs.read_predictions(str(tmp_path / "out" / outputs.PREDICTIONS_FILE))

  examples = list(seqio.get_mixture_or_task(TASK).get_dataset(LENGTHS, split=SPLIT, shuffle=False)
                  .as_numpy_iterator())
  assert len(records) == len(examples) >= 20, len(examples)
  assert [r["id"] for r in records] == [e["id"].decode() for e in examples]  # the task's order, kept
  arrays = batching.candidates_to_numpy(examples, candidate_length=LENGTHS["targets"])
  lengths = (arrays["candidate_ids"] > 0).sum(-1)
  # The premise: pairs of unlike lengths, so that packing puts the second narrative at other places.
  assert np.mean(lengths[:, 0] != lengths[:, 1]) > 0.9 and lengths.max() > 2 * lengths.min()
  alone = jax.jit(lambda x, c: reward_lib.reward(CONFIG, params, x, c))
  expected = np.concatenate([np.asarray(alone(arrays["input_ids"][i:i + BATCH], arrays["candidate_ids"][i:i + BATCH]))
                             for i in range(0, len(examples), BATCH)])
  np.testing.assert_allclose([r["scores"] for r in records], expected, rtol=1e-5, atol=1e-5)
  assert all(r["gold"] == [1, 0] for r in records)
  good_wins = np.mean(expected[:, 0] > expected[:, 1])
  assert metrics[TASK]["pairwise_accuracy"]["value"] == pytest.approx(good_wins)
