#!/usr/bin/env bash
# Starts the same training command on every worker of a Cloud TPU VM pod slice.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/launch_tpu_pod.sh --tpu=NAME --zone=ZONE [options] -- [scripts.train arguments]

Installs the project on every worker of a TPU VM pod slice and starts the same
`python -m scripts.train ... --gin.MULTI_HOST=True` on all of them (each host then
loads its own shard of the data; jax.distributed finds the coordinator itself).

Options:
  --tpu=NAME        TPU VM name (gcloud compute tpus tpu-vm list)
  --zone=ZONE       its zone
  --project=ID      Google Cloud project (default: gcloud's configured one)
  --workers=N       number of workers (default: asked from gcloud tpu-vm describe)
  --repo=URL        git repository to install from (default: this checkout's origin)
  --ref=REF         commit or branch to install (default: this checkout's HEAD)
  --log_dir=DIR     where each worker's output is written locally (default: ./tpu_logs)
  --dry_run         print one command per worker and exit
  -h, --help        this text

Example:
  scripts/launch_tpu_pod.sh --tpu=my-v4-32 --zone=us-central2-b -- \
      --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/generation_and_cloze.gin \
      --gin.MODEL_DIR="'gs://my-bucket/runs/base'" --gin.BATCH_SIZE=128
USAGE
}

tpu="" zone="" project="" workers="" repo="" ref="" log_dir="./tpu_logs" dry_run=0
train_args=()
while (($#)); do
  case "$1" in
    --tpu=*) tpu="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --project=*) project="${1#*=}" ;;
    --workers=*) workers="${1#*=}" ;;
    --repo=*) repo="${1#*=}" ;;
    --ref=*) ref="${1#*=}" ;;
    --log_dir=*) log_dir="${1#*=}" ;;
    --dry_run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; train_args=("$@"); break ;;
    *) echo "launch_tpu_pod.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

[[ -n "$tpu" ]] || { echo "launch_tpu_pod.sh: --tpu is required (see --help)" >&2; exit 2; }
[[ -n "$zone" ]] || { echo "launch_tpu_pod.sh: --zone is required (see --help)" >&2; exit 2; }
gcloud_flags=(--zone="$zone")
[[ -n "$project" ]] && gcloud_flags+=(--project="$project")

here="$(cd "$(dirname "$0")/.." && pwd)"
repo="${repo:-$(git -C "$here" remote get-url origin 2>/dev/null || true)}"
ref="${ref:-$(git -C "$here" rev-parse HEAD 2>/dev/null || true)}"
[[ -n "$repo" ]] || { echo "launch_tpu_pod.sh: no git origin here; pass --repo=URL" >&2; exit 2; }
if [[ -z "$workers" ]]; then
  ((dry_run)) && { echo "launch_tpu_pod.sh: --dry_run needs --workers=N" >&2; exit 2; }
  workers="$(gcloud compute tpus tpu-vm describe "$tpu" "${gcloud_flags[@]}" \
             --format='value(networkEndpoints.len())')"
fi
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "launch_tpu_pod.sh: bad worker count '$workers'" >&2; exit 2; }

# The same command on every host: fetch the code, install it with JAX for TPU, train.
printf -v quoted_args ' %q' "${train_args[@]}" --gin.MULTI_HOST=True
remote="set -e; [ -d ~/t5-scoring ] || git clone -q $(printf %q "$repo") ~/t5-scoring; cd ~/t5-scoring"
remote+="; git fetch -q origin && git checkout -q $(printf %q "$ref")"
remote+="; [ -d .venv ] || python3 -m venv .venv; .venv/bin/pip install -q -e . 'jax[tpu]'"
remote+="; exec .venv/bin/python -m scripts.train${quoted_args}"

commands=()
for ((worker = 0; worker < workers; worker++)); do
  commands+=("gcloud compute tpus tpu-vm ssh $(printf %q "$tpu")$(printf ' %q' "${gcloud_flags[@]}") --worker=$worker --command=$(printf %q "$remote")")
done

if ((dry_run)); then
  printf '%s\n' "${commands[@]}"
  exit 0
fi

mkdir -p "$log_dir"
pids=()
for ((worker = 0; worker < workers; worker++)); do
  bash -c "${commands[$worker]}" >"$log_dir/worker_$worker.log" 2>&1 &
  pids+=($!)
done
echo "started $workers workers; output in $log_dir/worker_*.log (worker 0 prints the progress)"
status=0
for ((worker = 0; worker < workers; worker++)); do
  wait "${pids[$worker]}" || { echo "worker $worker failed: see $log_dir/worker_$worker.log" >&2; status=1; }
done
exit $status
