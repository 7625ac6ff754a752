"""PPO on a problem whose answer is known (tests/runner/ppo_toy.py): a random 16-id policy
rewarded by the share of one token in its responses must raise that share while the adaptive
KL controller keeps its KL from the supervised (initial) policy near the target; a run killed
with SIGKILL and rerun must reach the same parameters as one never interrupted; the end-of-run
comparison with best-of-N is recomputed independently."""
import json
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from models import decoding
from runner import ppo
from tests.conftest import PROJECT_ROOT
from tests.helpers.processes import script_env
from tests.runner import ppo_toy

STEPS = 40
LINE = re.compile(r"step (\d+)/\d+  reward ([-+0-9.]+)  KL ([-0-9.]+)  beta ([0-9.e-]+)")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
  """(model_dir, result, {step: (reward, KL, beta)}) of STEPS steps, a progress line each."""
  import contextlib, io  # pylint: disable=g-import-not-at-top,multiple-imports
  model_dir = tmp_path_factory.mktemp("toy") / "run"
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    result = ppo_toy.run(model_dir, STEPS)
  lines = {int(m.group(1)): tuple(map(float, m.group(2, 3, 4))) for m in LINE.finditer(printed.getvalue())}
  return model_dir, result, lines, printed.getvalue()


def test_the_reward_rises_while_the_kl_stays_near_the_target(toy_run):
  _, result, lines, stdout = toy_run
  assert sorted(lines) == list(range(1, STEPS + 1)), stdout[-2000:]
  rewards = np.array([lines[s][0] for s in range(1, STEPS + 1)])
  kls = np.array([lines[s][1] for s in range(1, STEPS + 1)])
  # A random policy says TOKEN about once in 16 tokens; the KL-limited optimum is about 0.2.
  assert rewards[:5].mean() < 0.07
  assert rewards[-20:].mean() > 2 * rewards[:5].mean(), rewards
  assert lines[1][1] == pytest.approx(0.0, abs=1e-6)  # the first rollout is the reference's own
  # Once the policy has moved (about 10 steps), the controller holds the KL near the target.
  assert 0.5 * ppo_toy.KL_TARGET < kls[10:].mean() < 1.5 * ppo_toy.KL_TARGET, kls
  assert kls[10:].max() < 3 * ppo_toy.KL_TARGET, kls
  # beta went down while the KL was below the target, then back up (the controller acted both ways).
  betas = [lines[s][2] for s in range(1, STEPS + 1)]
  assert min(betas) < 0.1 and betas[-1] > min(betas)
  assert result.step == STEPS and not result.preempted


def test_the_comparison_with_best_of_n_recomputes_independently(toy_run):
  model_dir, result, _, stdout = toy_run
  record = json.loads((model_dir / ppo.COMPARISON_FILE).read_text())
  assert ppo.comparison_line(record) in stdout and (model_dir / "report.html").exists()
  n = record["best_of_n"]["n"]
  kl = record["ppo"]["kl"]
  # The N whose analytic best-of-N KL (Table 10) is nearest PPO's measured KL.
  assert all(abs(decoding.best_of_n_kl(n) - kl) <= abs(decoding.best_of_n_kl(m) - kl) for m in range(1, 65))
  assert record["best_of_n"]["kl"] == pytest.approx(np.log(n) - (n - 1) / n)
  # PPO's reward again: the documented seed scheme (batch i: fold_in(PRNGKey(seed), 2i)), the
  # prompts padded to a batch with empty rows, the programmatic score of each real row.
  padded = np.zeros((ppo_toy.BATCH, ppo_toy.PROMPT), np.int32)
  padded[:len(ppo_toy.COMPARISON)] = ppo_toy.COMPARISON
  samples = decoding.sample(ppo_toy.CONFIG, result.params["policy"], padded,
                            jax.random.fold_in(jax.random.PRNGKey(0), 0), max_length=ppo_toy.RESPONSE,
                            temperature=1.0, top_p=1.0)[:, 0]
  expected = np.asarray(ppo_toy.score(None, padded, samples))[:len(ppo_toy.COMPARISON)].mean()
  assert record["ppo"]["reward"] == pytest.approx(float(expected), abs=1e-6)
  # The trained policy beats the supervised one's samples, and best-of-N beats them too.
  assert record["ppo"]["reward"] > record["supervised"]["reward"]
  assert record["best_of_n"]["reward"] >= record["supervised"]["reward"]


def test_a_killed_run_resumed_reaches_the_parameters_of_an_uninterrupted_one(tmp_path, compilation_cache):
  env = script_env(compilation_cache)
  steps, pause_at = 6, 4

  def command(directory, *more):
    return [sys.executable, "-m", "tests.runner.ppo_toy", str(directory / "run"), str(steps), *map(str, more)]

  killed = tmp_path / "killed"
  killed.mkdir()
  process = subprocess.Popen(command(killed, pause_at), cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  try:
    deadline = time.monotonic() + 300
    while not (killed / "paused").exists():
      assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()[-3000:]
      time.sleep(0.2)
    process.send_signal(signal.SIGKILL)  # no chance to save: the rerun resumes from what was on disk
  finally:
    process.kill()
    process.wait()
  resumed = subprocess.run(command(killed), cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  match = re.search(r"resuming from the checkpoint of step (\d+)", resumed.stdout)
  assert match and 1 <= int(match.group(1)) <= pause_at, resumed.stdout[-2000:]
  whole = tmp_path / "whole"
  whole.mkdir()
  uninterrupted = subprocess.run(command(whole), cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                                 timeout=300)
  assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
  with np.load(killed / "final.npz") as after_kill, np.load(whole / "final.npz") as straight:
    assert sorted(after_kill.files) == sorted(straight.files)
    assert any(name.startswith("value/reward_head") for name in straight.files)
    for name in straight.files:
      np.testing.assert_array_equal(after_kill[name], straight[name], err_msg=name)
  # The KL coefficient the controller had reached came back with the checkpoint (the last lines agree).
  assert resumed.stdout.splitlines()[-1] == uninterrupted.stdout.splitlines()[-1]
