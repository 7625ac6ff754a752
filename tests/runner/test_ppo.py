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
KILLED_STEPS = 6
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


def _toy_command(directory, steps, *options):
  return [sys.executable, "-m", "tests.runner.ppo_toy", str(directory / "run"), str(steps), *options]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, compilation_cache):
  """(final parameters, stdout) of KILLED_STEPS steps on one device, never interrupted."""
  whole = tmp_path_factory.mktemp("whole")
  done = subprocess.run(_toy_command(whole, KILLED_STEPS), cwd=PROJECT_ROOT, env=script_env(compilation_cache),
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  with np.load(whole / "final.npz") as params:
    return dict(params), done.stdout


def test_a_killed_run_resumed_reaches_the_parameters_of_an_uninterrupted_one(tmp_path, compilation_cache,
                                                                            uninterrupted):
  env = script_env(compilation_cache)
  pause_at = 4
  process = subprocess.Popen(_toy_command(tmp_path, KILLED_STEPS, f"--pause_at={pause_at}"), cwd=PROJECT_ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    deadline = time.monotonic() + 300
    while not (tmp_path / "paused").exists():
      assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()[-3000:]
      time.sleep(0.2)
    process.send_signal(signal.SIGKILL)  # no chance to save: the rerun resumes from what was on disk
  finally:
    process.kill()
    process.wait()
  resumed = subprocess.run(_toy_command(tmp_path, KILLED_STEPS), cwd=PROJECT_ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  match = re.search(r"resuming from the checkpoint of step (\d+)", resumed.stdout)
  assert match and 1 <= int(match.group(1)) <= pause_at, resumed.stdout[-2000:]
  straight, straight_stdout = uninterrupted
  with np.load(tmp_path / "final.npz") as after_kill:
    assert sorted(after_kill.files) == sorted(straight)
    assert any(name.startswith("value/reward_head") for name in straight)
    for name, value in straight.items():
      np.testing.assert_array_equal(after_kill[name], value, err_msg=name)
  # The KL coefficient the controller had reached came back with the checkpoint (the last lines agree).
  assert resumed.stdout.splitlines()[-1] == straight_stdout.splitlines()[-1]


def test_two_hosts_on_a_data_and_model_mesh_reach_the_single_device_parameters(tmp_path, compilation_cache,
                                                                               uninterrupted):
  """scripts.launch_local: 2 processes x 2 CPU devices over gloo, mesh (data 2, model 2), the
  policy and value function split over `model` and the rollouts over `data`."""
  ppo_toy.policy_checkpoint(tmp_path)  # written once here: the processes then touch no device before joining
  command = [sys.executable, "-m", "scripts.launch_local", "--num_processes=2", "--devices_per_process=2", "--",
             *_toy_command(tmp_path, KILLED_STEPS, "--mesh=2,2")[1:]]
  done = subprocess.run(command, cwd=PROJECT_ROOT, env=script_env(compilation_cache), capture_output=True, text=True,
                        timeout=400)
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  assert re.search(r"^\[0\] step 6/6  reward ", done.stdout, re.MULTILINE), done.stdout[-2000:]
  straight, _ = uninterrupted
  with np.load(tmp_path / "final.npz") as pod:
    for name, value in straight.items():
      # The same sums in another order: float32 rounding (1e-7 in most leaves), not another
      # trajectory; Adam divides a near-zero gradient by its own size, so a parameter whose gradient
      # rounded differently moves by another fraction of the learning rate (1e-3): up to ~1e-5.
      np.testing.assert_allclose(pod[name], value, rtol=0, atol=2e-4, err_msg=name)
