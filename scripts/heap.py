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

--sweep chooses settings on the validation split instead (runner/validation_sweep.py): for each
planned run (first of --seeds), one training per point of the grid, each scored once on its target's
validation split at its last step, the best (--sweep_metric, --sweep_mode; a tie: the first point)
recorded in --out_dir/sweep/<protocol>/<run>/sweep.json and printed. --sweep=paper is §5's grid
(runner/heap_benchmark.py SECTION_5_GRID), or a literal: "{'LEARNING_RATE': [2e-5, 3e-4]}".
With --recipe=FILE in place of --protocol it sweeps that training recipe (model file, finetune.gin,
FILE, the user's arguments) into --out_dir; appendix B.1's reward-model seeds:

  python -m scripts.heap --recipe=gin/recipes/summarize_from_feedback/reward_model.gin \
      --sweep="{'SEED': [0, 1, 2]}" --sweep_metric=summarize_feedback_preference/pairwise_accuracy \
      --out_dir=runs/tldr_rm_seeds --gin.INITIAL_CHECKPOINT_PATH="'runs/tldr_sft'" --gin.TRAIN_STEPS=...
"""
import shlex
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import heap_benchmark as bench
from runner import validation_sweep
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
# Set per point of a --sweep (runner/validation_sweep.py SET_BY_SWEEP).
SWEEP_MACROS = {"MODEL_DIR": "--out_dir", "EVAL_EVERY": "--sweep (one evaluation, at the last step)",
                "EVAL_SPLIT": "--sweep_split", "BEST_METRIC": "--sweep_metric", "BEST_MODE": "--sweep_mode"}


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
  flags.DEFINE_string("sweep", None, "Choose settings on the validation split: 'paper' (§5's grid) or a "
                      "grid {NAME: [values]} / [{NAME: value}, ...]; each point trained, the best recorded.",
                      flag_values=fv)
  flags.DEFINE_string("sweep_metric", None, "'<task or group>/<metric>' the sweep chooses by (default: the "
                      "run's target's pairwise_accuracy; heap/pairwise_accuracy for multitask).", flag_values=fv)
  flags.DEFINE_enum("sweep_mode", "max", validation_sweep.MODES, "Whether the sweep keeps the highest or "
                    "lowest --sweep_metric.", flag_values=fv)
  flags.DEFINE_string("sweep_split", "validation", "The split the sweep scores.", flag_values=fv)
  flags.DEFINE_string("recipe", None, "With --sweep, in place of --protocol: a training recipe to sweep "
                      "(e.g. gin/recipes/summarize_from_feedback/reward_model.gin); needs --sweep_metric.",
                      flag_values=fv)


def _user_arguments(args) -> tuple[list[str], list[str]]:
  """The extra --gin_file and --gin.NAME arguments, refusing a macro the plan sets per run."""
  planned = {**({} if args.recipe else PLANNED_MACROS), **(SWEEP_MACROS if args.sweep is not None else {})}
  if args.sweep is not None and not args.recipe:
    planned.update({"EVAL_MIXTURE_OR_TASK_NAME": "--targets (each run's target)",
                    "LEARNING_RATE": "--sweep's grid", "ACCUMULATION_STEPS": "--sweep's grid",
                    "TRAIN_STEPS": "--train_steps or EPOCHS in --sweep's grid"})
  for binding in args.gin_bindings:
    name = binding.split("=", 1)[0].strip()
    if name in planned:
      raise ValueError(f"--gin.{name}: scripts.heap sets it for each run; use {planned[name]}")
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


def _check_point(files, bindings, grid_bindings, own, args) -> None:
  """A sweep point's configuration parsed and checked as scripts.train's command line is, before any
  training: the base (`files`, `bindings`), the grid's bindings (a name no configuration reads is
  refused) and the sweep's own."""
  gin.clear_config()
  gin_cli.parse_gin(files, bindings, args.gin_search_paths)
  try:
    gin_cli.parse_gin([], grid_bindings, args.gin_search_paths)
  except ValueError as error:
    raise ValueError(f"--sweep: {error}") from None
  gin_cli.parse_gin([], own, args.gin_search_paths)
  unread = gin_cli.unread_macros(grid_bindings)
  if unread:
    raise ValueError(f"--sweep: {', '.join(unread)}: no configuration reads "
                     f"{'this macro' if len(unread) == 1 else 'these macros'} (misspelled?); nothing was trained")
  every = [*bindings, *grid_bindings, *own]
  gin_cli.check_macro_references(every)
  gin_cli.check_required_macros()
  gin_cli.check_macro_kinds()


def _grid(args, user_bindings, default=None):
  """--sweep's grid ('paper': `default`), refusing a name the user's --gin also binds."""
  if args.sweep == "paper":
    if default is None:
      raise ValueError("--sweep=paper is HEAP's §5 grid, for --protocol; give --recipe a grid "
                       "(e.g. --sweep=\"{'SEED': [0, 1, 2]}\")")
    grid = default
  else:
    grid = validation_sweep.parse_grid(args.sweep)
  names = {name for point in validation_sweep.expand(grid) for name in point}
  for binding in user_bindings:
    name = binding.split("=", 1)[0].strip()
    if name in names:
      raise ValueError(f"--gin.{name} and --sweep both set {name}; give it in one place")
  return grid


def _jsonable(grid):
  return {name: list(values) for name, values in grid.items()} if isinstance(grid, dict) else list(grid)


def _sweep_recipe(args, user_files, user_bindings) -> None:
  """--recipe: the sweep of one training recipe into --out_dir (appendix B.1's reward-model seeds)."""
  if args.protocol is not None:
    raise app.UsageError("--recipe sweeps a recipe in place of --protocol: give one of them")
  if args.sweep is None:
    raise app.UsageError("--recipe needs --sweep (a grid, e.g. --sweep=\"{'SEED': [0, 1, 2]}\")")
  if not args.sweep_metric:
    raise ValueError("--recipe: --sweep_metric is required ('<task or group>/<metric>', e.g. "
                     "summarize_feedback_preference/pairwise_accuracy)")
  if args.print_commands:
    raise ValueError("--print_commands: not with --sweep (the sweep trains its points here, one after another)")
  grid = _grid(args, user_bindings)
  files = [args.model_gin, "gin/runs/finetune.gin", args.recipe, *user_files]

  def grid_bindings(values):
    return [validation_sweep.binding(name, value) for name, value in values.items()]

  def check(values, _, own):
    _check_point(files, user_bindings, grid_bindings(values), own, args)

  def train(values, _, own):
    bindings = [*user_bindings, *grid_bindings(values), *own]
    _run_script(train_script.main, files, bindings)
    return bindings
  validation_sweep.run(validation_sweep.expand(grid), out_dir=args.out_dir, metric=args.sweep_metric,
                       mode=args.sweep_mode, split=args.sweep_split, check=check, train=train,
                       dry_run=args.dry_run, about={"recipe": args.recipe, "grid": _jsonable(grid), "base": {
                           "gin_files": files, "gin_bindings": user_bindings}})


def _instruction_phrasings(heap) -> dict[str, int] | None:
  """{criterion: phrasings} of the bound heap_instruction.instructions_file (None: none bound)."""
  try:
    path = gin.query_parameter("t5_tasks.families.heap_instruction.instructions_file")
  except ValueError:
    return None
  if not path:
    return None
  from t5_tasks.families import base as families_base  # pylint: disable=g-import-not-at-top
  return {c: len(t) for c, t in families_base.read(heap.read_instruction_templates, path).items()}


def _sweep_protocol(args, heap, runs, user_files, user_bindings) -> None:
  """--sweep with --protocol: each planned run's points (its first seed), chosen on its target's
  validation split; a record per run in --out_dir/sweep/<protocol>/<run>."""
  if args.protocol == "base":
    raise ValueError("--sweep: the base setup trains nothing to choose settings for")
  if args.print_commands:
    raise ValueError("--print_commands: not with --sweep (the sweep trains its points here, one after another)")
  phrasings = _instruction_phrasings(heap) if args.sweep == "paper" else None
  seed = runs[0].seed
  runs = [run for run in runs if run.seed == seed]
  print(f"sweep: {len(runs)} runs of {args.protocol}, each point seeded {seed} (the first of --seeds) unless "
        "the grid sets SEED", flush=True)
  if args.sweep == "paper":
    print("sweep: §5's grid; truncation: " + bench.SECTION_5_FIXED["truncation"] + "; label input: "
          + bench.SECTION_5_FIXED["label_input"] + "; instruction phrasing: "
          + ("every phrasing of the bound instructions_file, Table 5's first" if phrasings else
             "Table 5's only (bind t5_tasks.families.heap_instruction.instructions_file to HEAP's "
             "instructions.json to sweep its phrasings)"), flush=True)
  sweeps = []
  for run in runs:
    grid = dict(bench.SECTION_5_GRID)
    if phrasings:
      grid[bench.INSTRUCTION_TEMPLATE] = ("paper", *range(min(phrasings[c] for c in {*run.trained, *run.targets})))
    grid = _grid(args, user_bindings, grid)
    points = validation_sweep.expand(grid)
    validation_sweep.check_names(points, bench.SWEEP_RESERVED)
    single = args.protocol != "multitask" and len(run.targets) == 1
    evaluated = heap.task_name(run.targets[0]) if single else run.mixture
    metric = args.sweep_metric or (f"{evaluated}/pairwise_accuracy" if single else "heap/pairwise_accuracy")

    def configuration(values, model_dir, own, run=run, evaluated=evaluated):
      point, extra = bench.sweep_point(run, values, model_dir)
      files, bindings = bench.training_command(point, args.model_gin)
      own = [b for b in own if b.split("=", 1)[0].strip() != "MODEL_DIR"]  # training_command's
      return ([*files, *user_files], [*bindings, *user_bindings],
              [*extra], [f"EVAL_MIXTURE_OR_TASK_NAME = {evaluated!r}", *own], point)

    def check(values, model_dir, own, configuration=configuration):
      files, bindings, extra, own, _ = configuration(values, model_dir, own)
      _check_point(files, bindings, extra, own, args)
    sweep = {"run": run, "grid": grid, "points": points, "evaluated": evaluated, "metric": metric,
             "out_dir": storage.join(args.out_dir, "sweep", run.protocol, run.name), "configuration": configuration}
    # Every point of every run checked before any training.
    validation_sweep.check_points(points, out_dir=sweep["out_dir"], metric=metric, mode=args.sweep_mode,
                                  split=args.sweep_split, check=check)
    sweeps.append(sweep)
  chosen = []
  for sweep in sweeps:
    run, configuration = sweep["run"], sweep["configuration"]
    print(f"\n##### sweep of {run.protocol} {run.name}: {len(sweep['points'])} points, {args.sweep_split} split "
          f"of {sweep['evaluated']}; {sweep['out_dir']}", flush=True)

    def train(values, model_dir, own, configuration=configuration):
      files, bindings, extra, own, _ = configuration(values, model_dir, own)
      _run_script(train_script.main, files, [*bindings, *extra, *own])
      return [*bindings, *extra, *own]

    def describe(values, model_dir, configuration=configuration):
      return bench.describe(configuration(values, model_dir, [])[-1])
    record = validation_sweep.run(
        sweep["points"], out_dir=sweep["out_dir"], metric=sweep["metric"], mode=args.sweep_mode,
        split=args.sweep_split, check=None, train=train, dry_run=args.dry_run, describe=describe,
        about={"protocol": run.protocol, "run": run.name, "trained": list(run.trained),
               "evaluated": sweep["evaluated"], "seed": seed, "grid": _jsonable(sweep["grid"]),
               "fixed": bench.SECTION_5_FIXED,
               "base": {"model_gin": args.model_gin, "gin_files": user_files, "gin_bindings": user_bindings}})
    if record["choice"]:
      chosen.append(f"{run.protocol} {run.name}: point {record['choice']['number']}, "
                    + ", ".join(f"{k}={v!r}" for k, v in record["choice"]["values"].items())
                    + f" ({sweep['metric']} {record['choice']['value']:.4f}); {record['choice']['model_dir']}")
  if chosen:
    print("\nsweep choices:\n" + "\n".join(chosen), flush=True)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  args = flags.FLAGS
  if args.protocol is None and args.recipe is None:
    raise app.UsageError(f"--protocol is required: one of {', '.join(bench.PROTOCOLS)} (or --recipe with --sweep)")
  from scripts import console  # pylint: disable=g-import-not-at-top
  console.quiet_libraries()
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  user_files, user_bindings = _user_arguments(args)
  if args.recipe is not None:
    _sweep_recipe(args, user_files, user_bindings)
    return
  seeds = [int(seed) for seed in args.seeds]
  _shared_configuration(args, user_files, user_bindings)
  runs = bench.plan(args.protocol, heap, out_dir=args.out_dir, seeds=seeds,
                    targets=bench.parse_targets(args.targets, heap.criterion_of), clusters=args.clusters,
                    train_examples=None if args.protocol == "base" else _train_examples(),
                    train_steps=args.train_steps, accumulation_steps=args.accumulation_steps,
                    microbatch=args.microbatch)
  if args.sweep is not None:
    _sweep_protocol(args, heap, runs, user_files, user_bindings)
    return
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
