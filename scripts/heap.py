r"""HEAP's benchmark in one command (Mehri & Shwartz 2023): a protocol's runs, then Tables 2 and 3.

  python -m scripts.heap --protocol=cross_cluster --clusters=hate_speech --out_dir=runs/heap \
      --gin.INITIAL_CHECKPOINT_PATH="'/ckpt/t5-base'" --gin.t5_tasks.tasks.data_files.files="{...}"

Plans the protocol over its targets (single-task and cross-task: one run per criterion, 22;
multi-task: one; cross-cluster: one per cluster and member; base: one, untrained) and seed
(--seeds), then runs them here one after another: each run's training (scripts.train's command
line, its protocol's recipe and its target's Table 4 row) and its evaluation on its own target's
test split only (scripts.evaluate, gin/recipes/heap/evaluate.gin). A rerun skips what is finished
and resumes the rest. At the end it assembles every finished run under --out_dir into Tables 2 and
3 (runner/heap_benchmark.py; Table 2: accuracy and Spearman), prints them beside the paper's
figures and writes heap_tables.{json,md} there. --dry_run prints the plan; --print_commands prints
each run's commands (for a pod) and runs nothing. Other --gin_file/--gin.NAME arguments reach every
training and evaluation (data files, TASK_FEATURE_LENGTHS, INITIAL_CHECKPOINT_PATH, ...).
"""
import shlex
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import heap_benchmark as bench
from scripts import evaluate as evaluate_script
from scripts import gin_cli
from scripts import interpreter
from scripts import train as train_script
import storage

# Set per run from the plan; a flag says how to change each.
PLANNED_MACROS = {"MIXTURE_OR_TASK_NAME": "--protocol/--targets", "MODEL_DIR": "--out_dir",
                  "CHECKPOINT_PATH": "--out_dir", "EVAL_OUTPUT_DIR": "--out_dir",
                  "TRAIN_STEPS": "--train_steps", "ACCUMULATION_STEPS": "--accumulation_steps",
                  "BATCH_SIZE": "--microbatch and --accumulation_steps", "LEARNING_RATE": "Table 4's row"}


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """scripts.heap's own flags (gin_cli.run defines the gin ones)."""
  flags.DEFINE_enum("protocol", None, bench.PROTOCOLS, "HEAP's setup (§4.2; base: §5).", flag_values=fv)
  flags.DEFINE_string("out_dir", "runs/heap", "Folder of the runs and the tables (local or gs://).", flag_values=fv)
  flags.DEFINE_string("model_gin", "gin/models/t5_1_1/base.gin", "The model's gin file.", flag_values=fv)
  flags.DEFINE_list("targets", [], "Criteria to test (abbreviations, any case); default: all.", flag_values=fv)
  flags.DEFINE_list("clusters", list(bench.TABLE_3_CLUSTERS), "cross_cluster: the clusters (Table 3's "
                    "three by default; §6's tellmewhy, defeasible_inference, story_rewriting).", flag_values=fv)
  flags.DEFINE_list("seeds", ["0", "1", "2", "3", "4"], "Seeds (Table 2 averages 5).", flag_values=fv)
  flags.DEFINE_integer("train_steps", None, "Steps of every run (default: Table 4's epochs x the run's "
                       "train examples / batch).", flag_values=fv)
  flags.DEFINE_integer("accumulation_steps", None, "Replaces Table 4's gradient accumulation.", flag_values=fv)
  flags.DEFINE_integer("microbatch", bench.MICROBATCH, "Rows per accumulated microbatch.", flag_values=fv)
  flags.DEFINE_bool("dry_run", False, "Print the plan and stop.", flag_values=fv)
  flags.DEFINE_bool("print_commands", False, "Print each run's scripts.train and scripts.evaluate "
                    "commands (for a pod) and stop.", flag_values=fv)


def _user_arguments(args) -> tuple[list[str], list[str]]:
  """The extra --gin_file and --gin.NAME arguments, refusing a macro the plan sets per run."""
  for binding in args.gin_bindings:
    name = binding.split("=", 1)[0].strip()
    if name in PLANNED_MACROS:
      raise ValueError(f"--gin.{name}: scripts.heap sets it for each run; use {PLANNED_MACROS[name]}")
  return list(args.gin_file), list(args.gin_bindings)


def _parse(files: Sequence[str], bindings: Sequence[str], args) -> None:
  """A run's gin configuration as gin_cli's `start` parses and checks a command line."""
  gin.clear_config()
  gin_cli.parse_gin(files, bindings, args.gin_search_paths)
  gin_cli.check_macros(bindings, args.strict_gin)
  gin_cli.check_macro_references(bindings)
  gin_cli.check_required_macros()
  gin_cli.check_macro_kinds()


def _run_script(main, files, bindings) -> None:
  """Runs scripts.train's or scripts.evaluate's `main` on this command line, in this process."""
  flags.FLAGS.gin_file, flags.FLAGS.gin_bindings = list(files), list(bindings)
  gin.clear_config()
  main(["scripts.heap"])


def _shared_configuration(args, user_files, user_bindings) -> None:
  """What every run reads (the model, HEAP's reward model recipe, the user's data files)."""
  _parse([args.model_gin, "gin/runs/finetune.gin", f"{bench.RECIPES}/reward_model.gin", *user_files],
         ["MIXTURE_OR_TASK_NAME = 'heap_multitask'", f"MODEL_DIR = {args.out_dir!r}",
          *user_bindings], args)


def _train_examples():
  """criterion -> its train comparisons under the parsed configuration (counted once each)."""
  import seqio  # pylint: disable=g-import-not-at-top  # registered by t5_tasks, imported in main
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  counts = {}

  def count(criterion):
    if criterion not in counts:
      counts[criterion] = seqio.get_mixture_or_task(heap.task_name(criterion)).num_input_examples("train")
    return counts[criterion]
  return count


def _command(script, files, bindings) -> str:
  def flag(binding):
    name, value = (part.strip() for part in binding.split("=", 1))
    if value == shlex.quote(value):
      return f"--gin.{name}={value}"
    # As the README writes them (--gin.MODEL_DIR="'runs/x'"), where double quotes keep the value as is.
    return f'--gin.{name}="{value}"' if not set(value) & set('"$`\\!') else f"--gin.{name}={shlex.quote(value)}"
  return " ".join([f"{interpreter.python()} -m {script}", *(f"--gin_file={f}" for f in files), *map(flag, bindings)])


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  args = flags.FLAGS
  if args.protocol is None:
    raise app.UsageError(f"--protocol is required: one of {', '.join(bench.PROTOCOLS)}")
  from scripts import console  # pylint: disable=g-import-not-at-top
  console.quiet_libraries()
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  user_files, user_bindings = _user_arguments(args)
  seeds = [int(seed) for seed in args.seeds]
  _shared_configuration(args, user_files, user_bindings)
  runs = bench.plan(args.protocol, heap, out_dir=args.out_dir, seeds=seeds,
                    targets=bench.parse_targets(args.targets, heap.criterion_of), clusters=args.clusters,
                    train_examples=None if args.protocol == "base" else _train_examples(),
                    train_steps=args.train_steps, accumulation_steps=args.accumulation_steps,
                    microbatch=args.microbatch)
  if args.dry_run:
    print(f"{args.protocol}: {len(runs)} runs ({bench.summary(runs)['finished']} finished)")
    for number, run in enumerate(runs, start=1):
      print(f"{number:3d}. {bench.describe(run)}")
    return
  if args.print_commands:
    if args.protocol == "base":
      raise ValueError("--print_commands: the base setup trains nothing; run it here "
                       f"({interpreter.python()} -m scripts.heap --protocol=base ...)")
    for run in runs:
      files, bindings = bench.training_command(run, args.model_gin)
      print(_command("scripts.train", [*files, *user_files], [*bindings, *user_bindings]))
      for target in run.targets:
        files, bindings = bench.evaluation_command(run, target, args.model_gin, heap.task_name)
        print(_command("scripts.evaluate", [*files, *user_files], [*bindings, *user_bindings]))
    return
  todo = bench.pending(runs)
  print(f"{args.protocol}: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to run", flush=True)
  for number, (run, targets) in enumerate(todo, start=1):
    print(f"\n=== {number}/{len(todo)}: {bench.describe(run)}", flush=True)
    if run.mixture is None:
      _shared_configuration(args, user_files, user_bindings)
      if not storage.exists(storage.join(run.model_dir, "params")):
        bench.write_base_checkpoint(run.model_dir, gin.query_parameter("%MODEL_CONFIG").scoped_configurable_fn(),
                                    gin.query_parameter("%INITIAL_CHECKPOINT_PATH"), run.seed)
    else:
      files, bindings = bench.training_command(run, args.model_gin)
      _run_script(train_script.main, [*files, *user_files], [*bindings, *user_bindings])
    for target in targets:
      files, bindings = bench.evaluation_command(run, target, args.model_gin, heap.task_name)
      _run_script(evaluate_script.main, [*files, *user_files], [*bindings, *user_bindings])
  tables = bench.assemble(heap, out_dir=args.out_dir, seeds=seeds)
  clusters = args.clusters if args.protocol == "cross_cluster" else bench.TABLE_3_CLUSTERS
  print("\n" + bench.tables_markdown(tables, clusters))
  json_path, md_path = bench.write_tables(tables, args.out_dir, clusters)
  print(f"wrote {json_path} and {md_path}", flush=True)


if __name__ == "__main__":
  gin_cli.run(main, define_flags)
