#!/usr/bin/env bash
# Starts the same training command on every worker of a Cloud TPU VM pod slice.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/launch_tpu_pod.sh --tpu=NAME --zone=ZONE [options] -- [scripts.train arguments]

Installs the project on every worker of a TPU VM pod slice and starts the same
`python -m scripts.train ... --gin.MULTI_HOST=True` on all of them (each host then
loads its own shard of the data; jax.distributed finds the coordinator itself).

What runs is this checkout: the workers check out its HEAD from --repo (so push HEAD
first), then apply the checkout's uncommitted changes, untracked files included
(edited or new gin files need no commit). The patch is written to LOG_DIR/uncommitted.patch
and copied to each worker. With --ref, that ref is installed as it is and nothing
uncommitted is shipped.

Options:
  --tpu=NAME        TPU VM name (gcloud compute tpus tpu-vm list)
  --zone=ZONE       its zone
  --project=ID      Google Cloud project (default: gcloud's configured one)
  --workers=N|all   number of workers, or `all` for one gcloud command with --worker=all
                    (default: asked from gcloud tpu-vm describe; with --dry_run: all)
  --repo=URL        git repository the workers install from (default: this checkout's origin)
  --ref=REF         commit or branch to install instead of this checkout's HEAD and changes
  --log_dir=DIR     where each worker's output and the shipped patch are written (default: ./tpu_logs)
  --dry_run         write the patch, print the gcloud commands and exit (gcloud not needed)
  -h, --help        this text

Example:
  scripts/launch_tpu_pod.sh --tpu=my-v4-32 --zone=us-central2-b -- \
      --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/generation_and_cloze.gin \
      --gin.MODEL_DIR="'gs://my-bucket/runs/base'" --gin.BATCH_SIZE=128
USAGE
}

fail() { echo "launch_tpu_pod.sh: $*" >&2; exit 2; }

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
    *) fail "unknown option $1 (see --help)" ;;
  esac
  shift
done

[[ -n "$tpu" ]] || fail "--tpu is required (see --help)"
[[ -n "$zone" ]] || fail "--zone is required (see --help)"
gcloud_flags=(--zone="$zone")
[[ -n "$project" ]] && gcloud_flags+=(--project="$project")

here="$(cd "$(dirname "$0")/.." && pwd)"
repo="${repo:-$(git -C "$here" remote get-url origin 2>/dev/null || true)}"
if [[ -z "$repo" ]]; then
  ((dry_run)) || fail "no git origin here; pass --repo=URL"
  repo="REPO_URL"
  echo "launch_tpu_pod.sh: no git origin here: the commands show REPO_URL (pass --repo=URL)" >&2
fi

ship_changes=0
if [[ -z "$ref" ]]; then
  ref="$(git -C "$here" rev-parse HEAD 2>/dev/null)" || fail "$here is no git checkout; pass --repo and --ref"
  ship_changes=1
  if [[ -z "$(git -C "$here" branch -r --contains "$ref" 2>/dev/null)" ]]; then
    echo "launch_tpu_pod.sh: warning: HEAD ($ref) is on no remote branch known here;" \
         "push it, or the workers cannot check it out" >&2
  fi
fi

if [[ -z "$workers" ]]; then
  if ((dry_run)); then
    workers=all
  else
    workers="$(gcloud compute tpus tpu-vm describe "$tpu" "${gcloud_flags[@]}" \
               --format='value(networkEndpoints.len())')"
  fi
fi
if [[ "$workers" == all ]]; then
  worker_ids=(all)
elif [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
  worker_ids=($(seq 0 $((workers - 1))))
else
  fail "bad worker count '$workers'"
fi

# The checkout's uncommitted changes as one patch against HEAD: tracked edits, then new files
# (not this launcher's own outputs, since the log folder lies in the checkout by default).
patch_file=""
if ((ship_changes)) && [[ -n "$(git -C "$here" status --porcelain)" ]]; then
  mkdir -p "$log_dir"
  log_dir="$(cd "$log_dir" && pwd)"
  patch_file="$log_dir/uncommitted.patch"
  own_outputs=()
  if [[ "$log_dir/" == "$here"/* ]]; then
    prefix="${log_dir#"$here"}/"
    own_outputs=(":(exclude,glob)${prefix#/}uncommitted.patch" ":(exclude,glob)${prefix#/}worker_*.log")
  fi
  (
    cd "$here"
    git diff --binary HEAD
    git ls-files -z --others --exclude-standard -- . ${own_outputs[@]+"${own_outputs[@]}"} |
      while IFS= read -r -d '' path; do
        git diff --binary --no-index -- /dev/null "$path" || (($? == 1))  # 1: the files differ
      done
  ) >"$patch_file"
  [[ -s "$patch_file" ]] || { rm -f "$patch_file"; patch_file=""; }
elif ((!ship_changes)) && [[ -n "$(git -C "$here" status --porcelain 2>/dev/null)" ]]; then
  echo "launch_tpu_pod.sh: --ref=$ref given: this checkout's uncommitted changes are not shipped" >&2
fi

# The same command on every host: fetch the code at ref, apply the patch, install with JAX for TPU, train.
printf -v quoted_args ' %q' "${train_args[@]}" --gin.MULTI_HOST=True
remote="set -e; [ -d ~/t5-scoring ] || git clone -q $(printf %q "$repo") ~/t5-scoring; cd ~/t5-scoring"
remote+="; git fetch -q origin && git reset -q --hard && git clean -qfd"
remote+=" && git checkout -q $(printf %q "$ref")"
[[ -n "$patch_file" ]] && remote+="; git apply ~/t5-scoring.patch"
remote+="; [ -d .venv ] || python3 -m venv .venv; .venv/bin/pip install -q -e . 'jax[tpu]'"
remote+="; exec .venv/bin/python -m scripts.train${quoted_args}"

tpu_target="$(printf %q "$tpu")$(printf ' %q' "${gcloud_flags[@]}")"
copy=""
if [[ -n "$patch_file" ]]; then
  copy="gcloud compute tpus tpu-vm scp $(printf %q "$patch_file") $(printf %q "$tpu:t5-scoring.patch")"
  copy+="$(printf ' %q' "${gcloud_flags[@]}") --worker=all"
fi
commands=()
for worker in "${worker_ids[@]}"; do
  commands+=("gcloud compute tpus tpu-vm ssh $tpu_target --worker=$worker --command=$(printf %q "$remote")")
done

if ((dry_run)); then
  [[ -n "$copy" ]] && echo "$copy"
  printf '%s\n' "${commands[@]}"
  exit 0
fi

mkdir -p "$log_dir"
if [[ -n "$copy" ]]; then
  echo "shipping uncommitted changes: $patch_file"
  bash -c "$copy"
fi
pids=()
for i in "${!worker_ids[@]}"; do
  bash -c "${commands[$i]}" >"$log_dir/worker_${worker_ids[$i]}.log" 2>&1 &
  pids+=($!)
done
echo "started ${#worker_ids[@]} command(s) for $workers workers; output in $log_dir/worker_*.log" \
     "(worker 0 prints the progress)"
status=0
for i in "${!worker_ids[@]}"; do
  log="$log_dir/worker_${worker_ids[$i]}.log"
  wait "${pids[$i]}" || { echo "worker ${worker_ids[$i]} failed: see $log" >&2; status=1; }
done
exit $status
