"""scripts/launch_tpu_pod.sh: one identical training command per worker, and clear usage errors."""
import shlex
import subprocess

from tests.conftest import PROJECT_ROOT

SCRIPT = str(PROJECT_ROOT / "scripts" / "launch_tpu_pod.sh")


def _launch(*args):
  return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_dry_run_prints_the_same_training_command_for_each_worker():
  result = _launch("--tpu=my-pod", "--zone=us-central2-b", "--workers=4", "--repo=https://example.org/t5.git",
                   "--ref=abc123", "--dry_run", "--", "--gin_file=gin/runs/finetune.gin",
                   "--gin.MODEL_DIR='gs://bucket/run one'")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  assert len(lines) == 4
  remotes = []
  for worker, line in enumerate(lines):
    words = shlex.split(line)
    assert words[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-pod"]
    assert "--zone=us-central2-b" in words and f"--worker={worker}" in words
    remotes.append(next(w for w in words if w.startswith("--command="))[len("--command="):])
  assert len(set(remotes)) == 1
  remote = remotes[0]
  assert "git clone -q https://example.org/t5.git" in remote and "git checkout -q abc123" in remote
  train = shlex.split(remote.split("exec ", 1)[1])
  assert train == [".venv/bin/python", "-m", "scripts.train", "--gin_file=gin/runs/finetune.gin",
                   "--gin.MODEL_DIR='gs://bucket/run one'", "--gin.MULTI_HOST=True"]


def test_help_and_missing_arguments():
  help_result = _launch("--help")
  assert help_result.returncode == 0 and "--dry_run" in help_result.stdout
  missing = _launch("--zone=z", "--dry_run")
  assert missing.returncode == 2 and "--tpu is required" in missing.stderr
  no_count = _launch("--tpu=p", "--zone=z", "--repo=r", "--dry_run")
  assert no_count.returncode == 2 and "--dry_run needs --workers=N" in no_count.stderr
  bad = _launch("--tpu=p", "--zone=z", "--repo=r", "--workers=0", "--dry_run")
  assert bad.returncode == 2 and "bad worker count '0'" in bad.stderr
