"""scripts/launch_tpu_pod.sh: per worker, one identical setup (the lock's Python, the lock and the TPU
pins, the version check) and then one identical run of the chosen module; the checkout's uncommitted
changes shipped as a patch; clear usage errors. tests/scripts/test_launch_tpu_pod_rehearsal.py runs them."""
import shlex
import shutil
import subprocess

import pytest

from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "launch_tpu_pod.sh"
TRAIN_ARGS = ("--", "--gin_file=gin/runs/finetune.gin", "--gin.MODEL_DIR='gs://bucket/run one'")


def _launch(*args, cwd, script=SCRIPT):
  return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _git(repo, *args):
  return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _remote_command(line: str) -> str:
  return next(w for w in shlex.split(line) if w.startswith("--command="))[len("--command="):]


def _rounds(lines: list[str], workers: int) -> tuple[list[str], list[str]]:
  """(the setup commands, the run commands) of a dry run's ssh lines, each the same for every worker."""
  setups, runs = lines[:workers], lines[workers:]
  assert len(runs) == workers and all("check_environment" in line for line in setups)
  assert len({_remote_command(line) for line in setups}) == 1 and len({_remote_command(line) for line in runs}) == 1
  return setups, runs


@pytest.fixture
def checkout(tmp_path):
  """A committed git checkout holding the launcher, with an origin; returns (checkout, HEAD)."""
  repo = tmp_path / "checkout"
  (repo / "scripts").mkdir(parents=True)
  (repo / "gin").mkdir()
  shutil.copy(SCRIPT, repo / "scripts")
  (repo / "scripts" / "train.py").write_text("")  # the default module, which the launcher looks for
  (repo / "gin" / "finetune.gin").write_text("TRAIN_STEPS = 1000\n")
  _git(repo, "init", "-q")
  _git(repo, "add", ".")
  _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
  _git(repo, "remote", "add", "origin", "https://example.org/t5.git")
  return repo, _git(repo, "rev-parse", "HEAD").strip()


def test_dry_run_prints_one_setup_then_one_run_for_each_worker(tmp_path):
  result = _launch("--tpu=my-pod", "--zone=us-central2-b", "--workers=4", "--repo=https://example.org/t5.git",
                   "--ref=abc123", "--dry_run", *TRAIN_ARGS, cwd=tmp_path)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  assert len(lines) == 8
  for worker, line in enumerate(lines):
    words = shlex.split(line)
    assert words[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-pod"]
    assert "--zone=us-central2-b" in words and f"--worker={worker % 4}" in words
  setups, runs = _rounds(lines, 4)
  setup = _remote_command(setups[0])
  assert "git clone -q https://example.org/t5.git" in setup and "git checkout -q abc123;" in setup
  assert "git apply" not in setup  # --ref installs that ref as it is
  # The lock's Python (its first line), the lock and the TPU pins, then the check, which knows the pod's size.
  assert "lock=requirements/constraints.txt" in setup and "sed -n '1s/.* on [A-Za-z]* " in setup
  assert ".venv/bin/python -m pip install -q -c $lock -r requirements/tpu.txt -e ." in setup
  assert setup.endswith("exec .venv/bin/python -m scripts.check_environment --constraints=$lock "
                        "--pins=requirements/tpu.txt --processes=4")
  run = _remote_command(runs[0])
  assert run.startswith("cd ~/t5-scoring && exec ")
  assert shlex.split(run.split("exec ", 1)[1]) == [".venv/bin/python", "-m", "scripts.train",
                                                   "--gin_file=gin/runs/finetune.gin",
                                                   "--gin.MODEL_DIR='gs://bucket/run one'"]
  assert not (tmp_path / "tpu_logs").exists()


@pytest.mark.parametrize("module", ["scripts.evaluate", "scripts.generate", "scripts.heap"])
def test_every_entry_point_launches_the_same_way(tmp_path, module):
  result = _launch("--tpu=p", "--zone=z", "--workers=2", "--repo=r", "--ref=main", f"--module={module}",
                   "--dry_run", "--", "--gin.EVAL_OUTPUT_DIR='gs://b/eval'", cwd=tmp_path)
  assert result.returncode == 0, result.stderr
  setups, runs = _rounds(result.stdout.strip().splitlines(), 2)
  assert shlex.split(_remote_command(runs[0]).split("exec ", 1)[1]) == [
      ".venv/bin/python", "-m", module, "--gin.EVAL_OUTPUT_DIR='gs://b/eval'"]
  assert _remote_command(setups[0]) == _remote_command(
      _launch("--tpu=p", "--zone=z", "--workers=2", "--repo=r", "--ref=main", "--dry_run", cwd=tmp_path).stdout
      .splitlines()[0])


def test_dry_run_without_a_worker_count_or_gcloud_targets_all_workers(checkout):
  repo, head = checkout
  result = _launch("--tpu=my-pod", "--zone=z", "--dry_run", *TRAIN_ARGS, cwd=repo,
                   script=repo / "scripts" / "launch_tpu_pod.sh")
  assert result.returncode == 0, result.stderr
  setup, run = result.stdout.strip().splitlines()  # a clean checkout: nothing to copy first
  assert "--worker=all" in shlex.split(setup) and "--worker=all" in shlex.split(run)
  remote = _remote_command(setup)
  assert f"git checkout -q {head};" in remote and "git apply" not in remote
  assert "--processes" not in remote  # the pod's size is not known: the check cannot compare it
  assert not (repo / "tpu_logs").exists()


def test_uncommitted_and_new_files_reach_the_workers_as_a_patch(checkout, tmp_path):
  repo, head = checkout
  (repo / "gin" / "finetune.gin").write_text("TRAIN_STEPS = 50\n")
  (repo / "gin" / "mine.gin").write_text("include 'gin/finetune.gin'\nBATCH_SIZE = 8\n")
  script = repo / "scripts" / "launch_tpu_pod.sh"
  for _ in range(2):  # the second run finds the first one's patch in the checkout: not shipped itself
    result = _launch("--tpu=my-pod", "--zone=z", "--workers=2", "--dry_run", *TRAIN_ARGS, cwd=repo,
                     script=script)
    assert result.returncode == 0, result.stderr
    copy, *ssh = result.stdout.strip().splitlines()
    patch = repo / "tpu_logs" / "uncommitted.patch"
    assert shlex.split(copy) == ["gcloud", "compute", "tpus", "tpu-vm", "scp", str(patch),
                                 "my-pod:t5-scoring.patch", "--zone=z", "--worker=all"]
    setups, _ = _rounds(ssh, 2)
    assert f"git checkout -q {head}; git apply ~/t5-scoring.patch; " in _remote_command(setups[0])
    assert "tpu_logs" not in patch.read_text()
  worker = tmp_path / "worker"
  _git(tmp_path, "clone", "-q", str(repo), str(worker))
  _git(worker, "checkout", "-q", head)
  _git(worker, "apply", str(patch))
  for name in ("finetune.gin", "mine.gin"):
    assert (worker / "gin" / name).read_text() == (repo / "gin" / name).read_text()


def test_ref_installs_as_is_and_says_the_changes_stay_here(checkout):
  repo, _ = checkout
  (repo / "gin" / "finetune.gin").write_text("TRAIN_STEPS = 50\n")
  result = _launch("--tpu=p", "--zone=z", "--ref=main", "--dry_run", cwd=repo,
                   script=repo / "scripts" / "launch_tpu_pod.sh")
  assert result.returncode == 0, result.stderr
  assert len(result.stdout.strip().splitlines()) == 2 and "git apply" not in result.stdout
  assert "uncommitted changes are not shipped" in result.stderr


def test_help_and_missing_arguments(tmp_path):
  help_result = _launch("--help", cwd=tmp_path)
  assert help_result.returncode == 0
  assert "--dry_run" in help_result.stdout and "uncommitted changes" in help_result.stdout
  missing = _launch("--zone=z", "--dry_run", cwd=tmp_path)
  assert missing.returncode == 2 and "--tpu is required" in missing.stderr
  bad = _launch("--tpu=p", "--zone=z", "--repo=r", "--workers=0", "--dry_run", cwd=tmp_path)
  assert bad.returncode == 2 and "bad worker count '0'" in bad.stderr
  typo = _launch("--tpu=p", "--zone=z", "--repo=r", "--module=scripts.evalute", "--dry_run", cwd=tmp_path)
  assert typo.returncode == 2
  assert typo.stderr == f"launch_tpu_pod.sh: --module=scripts.evalute: no such module in {PROJECT_ROOT}\n"


def test_without_origin_a_dry_run_shows_a_placeholder_and_a_launch_stops(checkout):
  repo, _ = checkout
  _git(repo, "remote", "remove", "origin")
  script = repo / "scripts" / "launch_tpu_pod.sh"
  dry = _launch("--tpu=p", "--zone=z", "--dry_run", cwd=repo, script=script)
  assert dry.returncode == 0 and "git clone -q REPO_URL" in _remote_command(dry.stdout)
  assert "pass --repo=URL" in dry.stderr
  launch = _launch("--tpu=p", "--zone=z", "--workers=2", cwd=repo, script=script)
  assert launch.returncode == 2 and "no git origin here; pass --repo=URL" in launch.stderr
