#!/usr/bin/env bash
# Gives every worker of a Cloud TPU VM pod slice the tested environment, checks it, then starts the
# same command (training, evaluation, generation, the HEAP benchmark) on all of them.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/launch_tpu_pod.sh --tpu=NAME --zone=ZONE [options] -- [the module's arguments]

Starts the same `python -m MODULE ARGUMENTS` on every worker of a TPU VM pod slice (MODULE:
scripts.train by default, scripts.evaluate, scripts.generate or scripts.heap), in the environment
the tests ran in. Each process joins the run through JAX's own cluster detection (a TPU VM's
metadata server), reads the whole global stream of batches and keeps the rows its devices hold.

Two rounds of gcloud ssh, the second only when every worker passed the first:
 1. Setup, on every worker: this checkout's code (below) in ~/t5-scoring; a venv there with the
    Python the lock was made on (the first line of requirements/constraints.txt): the image's
    python3.X or python3 when its version matches, else one that uv installs (uv itself from
    `pip install --user` when absent), else the worker refuses in one line; then
    `pip install -c requirements/constraints.txt -r requirements/tpu.txt -e .` (every version the
    lock's, jax's TPU extra pinned: libtpu); then `python -m scripts.check_environment`, which
    refuses in one line, naming the worker, a Python or package version other than the lock's,
    or a process count other than the pod's workers.
 2. The run: `python -m MODULE ARGUMENTS` on every worker.

What runs is this checkout: the workers check out its HEAD from --repo (so push HEAD
first), then apply the checkout's uncommitted changes, untracked files included
(edited or new gin files need no commit). The patch is written to LOG_DIR/uncommitted.patch
and copied to each worker. With --ref, that ref is installed as it is and nothing
uncommitted is shipped.

Options:
  --tpu=NAME        TPU VM name (gcloud compute tpus tpu-vm list)
  --zone=ZONE       its zone
  --project=ID      Google Cloud project (default: gcloud's configured one)
  --module=MODULE   what every worker runs (default: scripts.train; scripts.evaluate,
                    scripts.generate, scripts.heap)
  --workers=N|all   number of workers, or `all` for one gcloud command with --worker=all
                    (default: asked from gcloud tpu-vm describe; with --dry_run: all)
  --repo=URL        git repository the workers install from (default: this checkout's origin)
  --ref=REF         commit or branch to install instead of this checkout's HEAD and changes
  --log_dir=DIR     where each worker's output and the shipped patch are written (default: ./tpu_logs)
  --dry_run         write the patch, print the gcloud commands and exit (gcloud not needed)
  -h, --help        this text

Examples:
  scripts/launch_tpu_pod.sh --tpu=my-v4-32 --zone=us-central2-b -- \
      --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/generation_and_cloze.gin \
      --gin.MODEL_DIR="'gs://my-bucket/runs/base'" --gin.BATCH_SIZE=128
  scripts/launch_tpu_pod.sh --tpu=my-v4-32 --zone=us-central2-b --module=scripts.evaluate -- \
      --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/eval.gin \
      --gin.CHECKPOINT_PATH="'gs://my-bucket/runs/base'"
USAGE
}

fail() { echo "launch_tpu_pod.sh: $*" >&2; exit 2; }

tpu="" zone="" project="" module="scripts.train" workers="" repo="" ref="" log_dir="./tpu_logs" dry_run=0
module_args=()
while (($#)); do
  case "$1" in
    --tpu=*) tpu="${1#*=}" ;;
    --zone=*) zone="${1#*=}" ;;
    --project=*) project="${1#*=}" ;;
    --module=*) module="${1#*=}" ;;
    --workers=*) workers="${1#*=}" ;;
    --repo=*) repo="${1#*=}" ;;
    --ref=*) ref="${1#*=}" ;;
    --log_dir=*) log_dir="${1#*=}" ;;
    --dry_run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; module_args=("$@"); break ;;
    *) fail "unknown option $1 (see --help)" ;;
  esac
  shift
done

[[ -n "$tpu" ]] || fail "--tpu is required (see --help)"
[[ -n "$zone" ]] || fail "--zone is required (see --help)"
gcloud_flags=(--zone="$zone")
[[ -n "$project" ]] && gcloud_flags+=(--project="$project")

here="$(cd "$(dirname "$0")/.." && pwd)"
# A typo is caught here, not on every worker after its setup.
[[ "$module" =~ ^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$ && -f "$here/${module//.//}.py" ]] ||
  fail "--module=$module: no such module in $here"
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

# Round 1, the same on every worker: the code at ref (and the patch); a venv with the lock's Python
# (the image's when it matches, else uv's); the lock and the TPU pins installed; the versions and
# the process count checked. T5_POD_INSTALL, where a worker sets it, replaces the install: the
# offline rehearsal's (tests/scripts/test_launch_tpu_pod_rehearsal.py), which cannot download.
processes=""
[[ "$workers" != all ]] && processes=" --processes=$workers"
# Written as lines for reading, sent as one (each line ends a command or opens a block).
read -r -d '' setup <<'SETUP' || true
set -e; [ -d ~/t5-scoring ] || git clone -q @REPO@ ~/t5-scoring; cd ~/t5-scoring;
git fetch -q origin && git reset -q --hard && git clean -qfd && git checkout -q @REF@@APPLY@;
lock=requirements/constraints.txt; name=$(hostname); [ -z "${TPU_WORKER_ID:-}" ] || name="$TPU_WORKER_ID ($name)";
want=$(sed -n '1s/.* on [A-Za-z]* \([0-9]*\.[0-9]*\)\..*/\1/p' $lock);
version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true; };
if [ "$(version .venv/bin/python)" != "$want" ]; then
  rm -rf .venv;
  for python in python$want python3; do
    if [ "$(version $python)" = "$want" ]; then $python -m venv --without-pip .venv; break; fi;
  done;
  if [ ! -x .venv/bin/python ]; then
    uv=$(command -v uv || true);
    [ -n "$uv" ] || ! python3 -m pip install -q --user uv >/dev/null 2>&1 || uv=~/.local/bin/uv;
    [ -z "$uv" ] || "$uv" -q venv --python "$want" .venv >/dev/null 2>&1 || rm -rf .venv;
  fi;
  [ -x .venv/bin/python ] || { echo "launch_tpu_pod.sh: worker $name: no Python $want (the lock's, $lock):"
    "python3 is $(version python3 | grep . || echo absent), python$want is absent and uv could not install it" >&2;
    exit 1; };
fi;
if [ -n "${T5_POD_INSTALL:-}" ]; then $T5_POD_INSTALL; else
  [ -x .venv/bin/pip ] || .venv/bin/python -m ensurepip >/dev/null;
  .venv/bin/python -m pip install -q -c $lock --upgrade pip;
  .venv/bin/python -m pip install -q -c $lock -r requirements/tpu.txt -e .;
fi;
exec .venv/bin/python -m scripts.check_environment --constraints=$lock --pins=requirements/tpu.txt@PROCESSES@
SETUP
setup="$(sed 's/^ *//' <<<"$setup" | tr '\n' ' ')"
setup="${setup% }"
apply=""
[[ -n "$patch_file" ]] && apply="; git apply ~/t5-scoring.patch"
setup="${setup//@REPO@/$(printf %q "$repo")}"
setup="${setup//@REF@/$(printf %q "$ref")}"
setup="${setup//@APPLY@/$apply}"
setup="${setup//@PROCESSES@/$processes}"
# Round 2: the run.
run="cd ~/t5-scoring && exec .venv/bin/python -m $module$(printf ' %q' ${module_args[@]+"${module_args[@]}"})"

tpu_target="$(printf %q "$tpu")$(printf ' %q' "${gcloud_flags[@]}")"
copy=""
if [[ -n "$patch_file" ]]; then
  copy="gcloud compute tpus tpu-vm scp $(printf %q "$patch_file") $(printf %q "$tpu:t5-scoring.patch")"
  copy+="$(printf ' %q' "${gcloud_flags[@]}") --worker=all"
fi
setups=() runs=()
for worker in "${worker_ids[@]}"; do
  ssh="gcloud compute tpus tpu-vm ssh $tpu_target --worker=$worker --command="
  setups+=("$ssh$(printf %q "$setup")")
  runs+=("$ssh$(printf %q "$run")")
done

if ((dry_run)); then
  [[ -n "$copy" ]] && echo "$copy"
  printf '%s\n' "${setups[@]}" "${runs[@]}"
  exit 0
fi

# Runs ROUND's command per worker side by side, each appending to its worker's log, and says which
# workers failed: a setup with its refusal line (or its log's last line), a run with its log's last
# line. Fails when any did.
on_workers() {
  local round="$1" commands=("${@:2}") pids=() failed=0 i log
  for i in "${!worker_ids[@]}"; do
    bash -c "${commands[$i]}" >>"$log_dir/worker_${worker_ids[$i]}.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!worker_ids[@]}"; do
    log="$log_dir/worker_${worker_ids[$i]}.log"
    if ! wait "${pids[$i]}"; then
      failed=1
      if [[ "$round" == setup ]]; then
        grep -E '^(launch_tpu_pod\.sh|check_environment): worker ' "$log" >&2 || tail -n 1 "$log" >&2
      else
        tail -n 1 "$log" >&2
      fi
      echo "launch_tpu_pod.sh: worker ${worker_ids[$i]} failed: see $log" >&2
    fi
  done
  return $failed
}

mkdir -p "$log_dir"
rm -f "$log_dir"/worker_*.log
if [[ -n "$copy" ]]; then
  echo "shipping uncommitted changes: $patch_file"
  bash -c "$copy"
fi
echo "setting up $workers workers (the lock's Python and packages, then the version check);" \
     "output in $log_dir/worker_*.log"
if ! on_workers setup "${setups[@]}"; then
  echo "launch_tpu_pod.sh: $module was not started: a worker's setup failed" >&2
  exit 1
fi
echo "started python -m $module on $workers workers; output in $log_dir/worker_*.log (worker 0 prints the progress)"
on_workers run "${runs[@]}"
