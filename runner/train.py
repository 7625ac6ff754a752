"""The training entry point: t5x's `train` with its gin macros, on a jax.sharding mesh.

Reads top to bottom: join the hosts, build the mesh, restore the latest checkpoint (or start
from INITIAL_CHECKPOINT_PATH / random weights), then loop: global batch, train step, log,
checkpoint. The same program runs on a laptop CPU, one GPU and a TPU pod slice; only gin
bindings change. `train(...)` is a plain function: tests call it with arguments, scripts/train.py
through gin (`gin/runs/finetune.gin`).
"""
import dataclasses
import functools
import json
import math
from typing import Callable, Iterator

import jax
import numpy as np
from absl import logging

from models import flops
from models import reward as reward_lib
from models.config import T5Config
from models.network import init_params
from runner import checkpoint_integrity
from runner import checkpoints
from runner import data
from runner import host_memory
from runner import outputs
from runner import partitioning
from runner import preflight as run_preflight
from runner import reward_normalization
from runner import run_dir
from runner import training_evaluation
from runner import trainer
from runner.progress import Progress
import storage

@dataclasses.dataclass
class TrainResult:
  step: int  # the step the run stopped at (train_steps, or earlier when preempted)
  params: dict
  preempted: bool
  metrics: dict  # the last logged metrics
  signal_number: int | None = None  # SIGTERM or SIGINT when a signal stopped the run


DATA_FILES = run_dir.DATA_FILES
EVAL_METRICS_FILE = training_evaluation.EVAL_METRICS_FILE


class NonFiniteLossError(FloatingPointError):
  pass


def _initial_params(config, objective: trainer.Objective, initial_checkpoint_path, seed, mesh=None,
                    rules=None):
  """Random parameters, or INITIAL_CHECKPOINT_PATH's; a reward model gets a head unless it has one."""
  rng = jax.random.PRNGKey(seed)
  loaded = (checkpoints.load_params(initial_checkpoint_path, config, partitioning.Partitioner.for_mesh(mesh, rules))[1]
            if initial_checkpoint_path else None)
  if not objective.reward_head:
    params = loaded if loaded is not None else init_params(config, rng)
    return {k: v for k, v in params.items() if k != reward_lib.HEAD}
  if loaded is not None and reward_lib.HEAD in loaded:
    return loaded
  return reward_lib.init_reward_params(config, rng, loaded)


def _initialise_or_restore(manager, config, goal, optimizer, initial_checkpoint_path, seed, mesh, rules):
  """(step, params, opt_state, (params shardings, optimizer state shardings)) to start from.

  The latest checkpoint in `manager` that reads (a damaged later one is reported and passed over;
  when none reads, its CheckpointDamagedError stops the run rather than start it afresh), else
  INITIAL_CHECKPOINT_PATH's or random parameters. Shardings come first, so that no array is ever
  whole on one device.
  """
  random_init = functools.partial(_initial_params, config, goal, None, seed)
  abstract_params = jax.eval_shape(random_init)
  params_shardings = partitioning.param_shardings(abstract_params, config, mesh, rules)
  opt_shardings = partitioning.opt_state_shardings(optimizer, abstract_params, params_shardings, mesh)
  shardings = (params_shardings, opt_shardings)
  restored, damaged = checkpoints.restore_readable(
      manager, partitioning.with_shardings(abstract_params, params_shardings),
      partitioning.with_shardings(jax.eval_shape(optimizer.init, abstract_params), opt_shardings))
  # Set aside, so that the run can save those steps again when it reaches them.
  moved = checkpoint_integrity.set_aside(manager, [error.step for error in damaged])
  for error, path in zip(damaged, moved):
    if jax.process_index() == 0:
      print(f"checkpoint step {error.step} in {manager.directory} is unreadable ({error.damage}); "
            f"resuming from step {restored[0]} (step {error.step} kept as {path.name})", flush=True)
  if restored:
    step, params, opt_state, _ = restored  # the data position is the step: one batch per step
    return step, params, opt_state, shardings
  if initial_checkpoint_path:
    params = jax.device_put(_initial_params(config, goal, initial_checkpoint_path, seed, mesh, rules),
                            params_shardings)
  else:  # created in place, shard by shard: a large model never sits whole on one device
    params = jax.jit(random_init, out_shardings=params_shardings)()
  return 0, params, jax.jit(optimizer.init, out_shardings=opt_shardings)(params), shardings


def _metric_writer(model_dir):
  try:
    from clu import metric_writers  # pylint: disable=g-import-not-at-top
  except ImportError as error:  # clu's TensorBoard writer needs TensorFlow, which a GPU machine may lack
    logging.warning("clu's TensorBoard writer is not importable (%s): metrics go to the console only", error)
    return None
  directory = run_dir.RunDir(model_dir).tensorboard
  if not storage.tensorflow_reaches(directory):
    if jax.process_index() == 0:
      print(f"TensorBoard summaries are off: TensorFlow's GCS client cannot reach the emulator "
            f"(STORAGE_EMULATOR_HOST) that holds {model_dir}; metrics go to the console", flush=True)
    return None
  return metric_writers.create_default_writer(directory, just_logging=jax.process_index() > 0)


def _real_tokens(batch):
  return sum(np.count_nonzero(batch[name]) for name in ("input_ids", "target_ids", "candidate_ids")
             if name in batch)


def _print_mixture(name, split):
  """Prints the tasks the run trains on and their shares; an unknown name stops the run here."""
  rates = data.mixture_rates(name, split)
  if jax.process_index() == 0:
    print(f"training on {name}: " + ", ".join(f"{task} {rate:.1%}" for task, rate in rates), flush=True)


def check_settings(*, train_steps: int, batch_size: int, accumulation_steps: int, data_axis: int,
                   model_config: T5Config, vocabulary_size: int | None, checkpoint_every: int = 1000,
                   keep_checkpoints: int = 3, log_every: int = 50) -> None:
  """Stops a run that could not train as asked, before anything compiles or MODEL_DIR changes."""
  for name, value in (("TRAIN_STEPS", train_steps), ("BATCH_SIZE", batch_size),
                      ("ACCUMULATION_STEPS", accumulation_steps),
                      ("train.checkpoint_every", checkpoint_every), ("train.keep_checkpoints", keep_checkpoints),
                      ("train.log_every", log_every)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise ValueError(f"{name} must be a whole number, got {value!r}")
  for name, value in (("train.checkpoint_every", checkpoint_every), ("train.keep_checkpoints", keep_checkpoints),
                      ("train.log_every", log_every)):
    if value <= 0:
      raise ValueError(f"{name} must be positive, got {value}")
  if not isinstance(model_config, T5Config):
    raise ValueError(f"MODEL_CONFIG must be a T5Config (a gin/models file binds @config.T5Config()), "
                     f"got {str(model_config)[:60]!r}")
  if train_steps <= 0:
    raise ValueError(f"TRAIN_STEPS must be positive, got {train_steps}: the run would save nothing")
  if batch_size <= 0:
    raise ValueError(f"BATCH_SIZE must be positive, got {batch_size}")
  if accumulation_steps <= 0:
    raise ValueError(f"ACCUMULATION_STEPS must be positive, got {accumulation_steps}")
  # Each microbatch is split over the data axis.
  rows = data_axis * accumulation_steps
  if batch_size % rows:
    raise ValueError(
        f"BATCH_SIZE {batch_size} does not split over the mesh's data axis ({data_axis}) x "
        f"ACCUMULATION_STEPS ({accumulation_steps}); use a multiple of {rows}, e.g. "
        f"{max(rows, batch_size - batch_size % rows)}")
  if vocabulary_size is not None and vocabulary_size > model_config.vocab_size:
    raise ValueError(f"the vocabulary has {vocabulary_size} ids but MODEL_CONFIG.vocab_size is "
                     f"{model_config.vocab_size}: ids past it would index outside the embedding; use a "
                     "model whose vocab_size holds the vocabulary")


def _print_preflight(model_config, mesh, *, batch_size, feature_lengths, device_memory_gib, **plan_settings):
  """Prints what the run is about to do (runner/preflight.py: processes, devices, mesh, batch,
  memory plan), and each process the rows of every global batch its devices hold; stops a run whose
  memory plan does not fit its devices, before anything is allocated. Batches from a
  `batch_source` have no configured lengths to plan with: none is printed."""
  if feature_lengths is None:
    return
  settings = dict(mesh_shape=(mesh.shape["data"], mesh.shape["model"]), batch_size=batch_size,
                  feature_lengths=feature_lengths, remat=model_config.remat,
                  device_memory_gib=device_memory_gib, **plan_settings)
  if jax.process_index() == 0:
    print("\n".join(run_preflight.describe_run(model_config, **settings)), flush=True)
  first, end = partitioning.process_rows(mesh, batch_size, plan_settings["rules"])
  print(f"data: process {jax.process_index()} of {jax.process_count()} holds rows {first}-{end - 1} "
        f"of each global batch of {batch_size}", flush=True)
  run_preflight.check(model_config, **settings)


def _data_record(name, split) -> dict:
  """What each training task reads (files by content, examples, the tasks' configuration), as
  MODEL_DIR/data_files.json keeps it."""
  described, configuration = data.tasks_provenance(data.tasks_with_split(name, split))
  record = {"mixture_or_task_name": name, "split": split, "tasks": described, "task_configuration": configuration}
  return json.loads(json.dumps(record))


def _check_data_record(model_dir, record: dict) -> None:
  """Refuses to resume a run's checkpoints on other data than its data_files.json records, naming
  each differing field with both values, before anything compiles or is written: the batches
  after the checkpoint would come from another stream. Files are compared by content, so a run
  copied elsewhere with its data resumes; fields a record predates are not compared."""
  layout = run_dir.RunDir(model_dir)
  if not storage.exists(layout.data_files) or not any(n.isdigit() for n in storage.list_names(layout.checkpoints)):
    return
  recorded = json.loads(storage.read_text(layout.data_files))
  changed = data.identity_differences(data.content_identity(recorded), data.content_identity(record),
                                      only_recorded=True)
  if changed:
    raise ValueError(f"MODEL_DIR {model_dir} holds a run trained on other data; fields that differ from "
                     f"{layout.data_files}: {'; '.join(changed[:4])}"
                     + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
                     + "; bind the run's data and settings again, or name a new MODEL_DIR")


def _log_interval(log_every: int, train_steps: int) -> int:
  """Steps between progress lines: LOG_EVERY, or a tenth of a shorter run (a report every 10%)."""
  return max(1, min(log_every, train_steps // 10))


def train(*, model_config: T5Config, mixture_or_task_name=None, task_feature_lengths=None,
          train_steps: int, batch_size: int, model_dir: str, initial_checkpoint_path=None,
          use_cached_tasks=False, objective="cross_entropy", optimizer=None, accumulation_steps=1,
          z_loss=1e-4, seed=0, split="train", mesh_shape=(-1, 1),
          logical_axis_rules=partitioning.STANDARD_LOGICAL_AXIS_RULES, multi_host=None,
          checkpoint_every=1000, keep_checkpoints=3, log_every=50, compilation_cache_dir=None,
          batch_source: Callable[[int], Iterator[dict]] | None = None, run_config: str | None = None,
          vocabulary_size: int | None = None, normalize_reward_task: str | None = None,
          normalize_reward_split: str = "train", eval_every: int | None = None,
          eval_mixture_or_task_name: str | None = None, eval_split: str = "validation",
          eval_metric_groups=None, best_metric: str | None = None, best_mode: str = "max",
          device_memory_gib: float | None = None, eval_normalization: str = "token") -> TrainResult:
  """Trains (or resumes training of) a model in `model_dir` up to `train_steps` steps.

  Data comes from the seqio task or mixture, or from `batch_source(start_step)` (an iterator of
  whole numpy batches, the same on every host) when given. `mesh_shape` is (data, model); -1 takes the rest.
  `optimizer` defaults to `trainer.make_optimizer()` (Adafactor, constant 1e-3).
  On SIGTERM or SIGINT the run saves a checkpoint at its current step and returns with
  preempted=True and the signal's number.
  `compilation_cache_dir` keeps compiled steps on disk (process-wide), so a restart skips compiling.
  `run_config` (the gin configuration's text) is written to `model_dir/config.gin`, the data
  files each task read to `model_dir/data_files.json`. `vocabulary_size`, when given, is checked
  against the model's embedding before anything runs. Every run first prints its preflight
  (runner/preflight.py) and stops when the memory plan does not fit the devices' memory
  (`device_memory_gib`, default: what the device reports).
  With `normalize_reward_task` (a reward objective), a run that reaches `train_steps` also writes
  its reward model shifted so that the task's `normalize_reward_split` references score 0 on
  average to `model_dir/normalized` (`runner.reward_normalization`; Stiennon et al. 2020, §3.4);
  the training checkpoints stay as they are.

  With `eval_every` (steps; 0 or None: off), every `eval_every` steps and at the end the run
  scores `eval_split` of `eval_mixture_or_task_name` (default: the training mixture) with its
  current parameters, as runner/evaluate.py does (the reward scorer for a reward objective, else
  likelihood normalised by `eval_normalization`, offline evaluation's NORMALIZATION), adding each
  group of `eval_metric_groups` ({group: [task names]}, or a function of the evaluated task names
  returning it); it writes `eval/<task>/<metric>` TensorBoard scalars,
  a line of `model_dir/eval_metrics.jsonl` and one console line. With `best_metric`
  ('<task or group>/<metric>') it also keeps the best checkpoint by it (`best_mode` 'max' or
  'min'; a tie keeps the earlier step) in `model_dir/best`; resuming still restores the latest.
  """
  goal = trainer.get_objective(objective)
  if normalize_reward_task is not None and not goal.reward_head:
    raise ValueError(f"normalize_reward_task needs a reward model (OBJECTIVE 'pairwise' or 'listwise'), "
                     f"not {objective!r}")
  storage.check_reachable(model_dir, "MODEL_DIR")
  partitioning.initialize_distributed(multi_host)
  host_memory.reuse_freed_memory()
  if normalize_reward_task is not None and jax.process_count() > 1:
    raise ValueError("normalize_reward_task runs in one process; on several hosts, run "
                     "scripts.normalize_reward after training")
  mesh = partitioning.create_mesh(*mesh_shape)
  check_settings(train_steps=train_steps, batch_size=batch_size, accumulation_steps=accumulation_steps,
                 data_axis=partitioning.batch_blocks(mesh, partitioning.as_rules(logical_axis_rules)),
                 model_config=model_config, vocabulary_size=vocabulary_size, checkpoint_every=checkpoint_every,
                 keep_checkpoints=keep_checkpoints, log_every=log_every)
  checkpoints.check_run_model(model_dir, model_config)
  optimizer = optimizer or trainer.make_optimizer()
  _print_preflight(model_config, mesh, batch_size=batch_size, feature_lengths=task_feature_lengths,
                   optimizer=optimizer, accumulation_steps=accumulation_steps, objective=objective,
                   rules=logical_axis_rules, device_memory_gib=device_memory_gib)
  if batch_source is None:
    _print_mixture(mixture_or_task_name, split)
    data.require_examples(data.tasks_with_split(mixture_or_task_name, split), split)
    data_record = _data_record(mixture_or_task_name, split)
    _check_data_record(model_dir, data_record)
  if normalize_reward_task is not None:  # its references are read after the last step: check them before the first
    data.require_examples(data.tasks_with_split(normalize_reward_task, normalize_reward_split), normalize_reward_split)
  if compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir)
  rules = partitioning.as_rules(logical_axis_rules)
  evaluation = training_evaluation.make(
      eval_every=eval_every, eval_mixture_or_task_name=eval_mixture_or_task_name or mixture_or_task_name,
      eval_split=eval_split, eval_metric_groups=eval_metric_groups, best_metric=best_metric,
      best_mode=best_mode, goal=goal, model_config=model_config, task_feature_lengths=task_feature_lengths,
      batch_size=batch_size, mesh=mesh, rules=rules, use_cached=use_cached_tasks, model_dir=model_dir,
      normalization=eval_normalization)

  manager = checkpoints.checkpoint_manager(model_dir, keep_checkpoints)
  step, params, opt_state, shardings = _initialise_or_restore(
      manager, model_config, goal, optimizer, initial_checkpoint_path, seed, mesh, rules)
  # Written once the run is known to start: a refused resume leaves the run's records as they were.
  if jax.process_index() == 0:  # evaluation and inference read the architecture from here
    checkpoints.write_model_config(model_dir, model_config)
    if run_config is not None:
      outputs.write_run_config(model_dir, run_config)
    if batch_source is None:
      storage.write_text(run_dir.RunDir(model_dir).data_files, json.dumps(data_record, indent=2) + "\n")
  if step:
    print(f"resuming from the checkpoint of step {step} in {model_dir}", flush=True)
  if evaluation is not None:
    evaluation.resume(step)

  train_step = trainer.make_train_step(model_config, optimizer, mesh, *shardings,
                                       objective=objective, accumulation_steps=accumulation_steps,
                                       z_loss=z_loss, dropout_seed=seed, rules=rules)
  if batch_source is not None:
    batches = batch_source(step)
  else:  # one batch per step (accumulation splits it), so the data position is the step
    batches = data.train_batches(mixture_or_task_name, task_feature_lengths, batch_size,
                                 candidates=goal.candidates, split=split, seed=seed, start_step=step,
                                 use_cached=use_cached_tasks)
  writer = _metric_writer(model_dir)
  # MFU on the progress line where the devices' peak is published (none on a CPU); candidate batches'
  # decoder rows vary with each item's candidates, so those objectives print none.
  peak = flops.peak_flops_per_second([device.device_kind for device in jax.devices()])
  step_flops = (flops.training_flops(model_config, batch_size, task_feature_lengths["inputs"],
                                     task_feature_lengths["targets"])
                if peak and task_feature_lengths and not goal.candidates else None)
  progress = Progress("step", train_steps, "steps", flops_per_unit=step_flops, peak_flops=peak)
  progress.done = step
  pending, last_metrics, preempted, saved_step = [], {}, False, step
  log_interval = _log_interval(log_every, train_steps)

  def check_finite():
    """Raises on a non-finite loss, gradient or parameter norm among the steps not yet checked."""
    for pending_step, metrics in jax.device_get(pending):
      norms = {name: float(metrics[name]) for name in ("loss", "grad_norm", "param_norm")}
      if not all(map(math.isfinite, norms.values())):
        checkpoints.finish(manager)
        raise NonFiniteLossError(
            f"loss {norms['loss']}, gradient norm {norms['grad_norm']}, parameter norm {norms['param_norm']} "
            f"at step {pending_step}; stopped without saving: the last good checkpoint is step "
            f"{manager.latest_step()} in {model_dir}")
    pending.clear()

  def log(metrics):
    check_finite()
    values = {name: float(value) for name, value in jax.device_get(metrics).items()}
    rates = progress.report(f"loss {values['loss']:.4f}")
    if writer is not None:
      writer.write_scalars(step, {**values, **rates})
    return {**values, **rates}

  def evaluate_now():
    check_finite()  # a diverged run stops here, not in a metric of NaN scores
    evaluation(step, params, writer)

  def save():
    nonlocal saved_step
    if step == saved_step:
      return
    check_finite()
    if checkpoints.save(manager, step, params, opt_state, {"batches": step}):
      saved_step = step

  if evaluation is not None and step and step % eval_every == 0 and step not in evaluation.evaluated_steps:
    evaluate_now()  # a run stopped by a signal at an evaluation step saved it unevaluated
  # clu's periodic actions would do for these two, but clu.periodic_actions imports its TensorFlow
  # summary writer, and the GPU machines have no TensorFlow.
  with checkpoints.PreemptionGuard(manager) as guard:
    while step < train_steps:
      batch = next(batches)
      params, opt_state, metrics = train_step(params, opt_state, partitioning.global_batch(batch, mesh, rules), step)
      pending.append((step, metrics))
      step += 1
      progress.advance(1, _real_tokens(batch))
      if step % log_interval == 0 or step == train_steps:
        last_metrics = log(metrics)
      if guard.should_stop(step):
        preempted = True
        break
      # Before the step's checkpoint: the best of a step is on disk before the latest one is.
      if evaluation is not None and step % eval_every == 0:
        evaluate_now()
      if step % checkpoint_every == 0:
        save()
    if evaluation is not None and not preempted and step not in evaluation.evaluated_steps:
      evaluate_now()  # the end of the run
    save()
  checkpoints.finish(manager)
  if writer is not None:
    writer.flush()
  if normalize_reward_task is not None and not preempted:
    with partitioning.activate(mesh, rules):
      reward_normalization.normalize(
          model_config, params, source=model_dir,
          output_dir=run_dir.RunDir(model_dir).normalized,
          task_name=normalize_reward_task, split=normalize_reward_split,
          feature_lengths=task_feature_lengths, batch_size=batch_size)
  return TrainResult(step=step, params=params, preempted=preempted, metrics=last_metrics,
                     signal_number=guard.signal_number)
