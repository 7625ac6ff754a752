"""The training entry point: t5x's `train` with its gin macros, on a jax.sharding mesh.

Reads top to bottom: join the hosts, build the mesh, restore the latest checkpoint (or start
from INITIAL_CHECKPOINT_PATH / random weights), then loop: global batch, train step, log,
checkpoint. The same program runs on a laptop CPU, one GPU and a TPU pod slice; only gin
bindings change. `train(...)` takes t5x's settings objects (runner/configs.py) and a
`partitioning.Partitioner`: tests build them, scripts/train.py has gin bind them
(`gin/runs/finetune.gin`).
"""
import dataclasses
import functools
import json
import math
from typing import Callable, Iterator, Mapping

import jax
import numpy as np
from absl import logging

from models import flops
from models import reward as reward_lib
from models.config import T5Config
from models.network import init_params
from runner import checkpoint_integrity
from runner import checkpoints
from runner import configs
from runner import data
from runner import host_memory
from runner import lease as lease_lib
from runner import model_inputs
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


class NonFiniteLossError(FloatingPointError):
  pass


def _initial_params(config, objective: trainer.Objective, initial_checkpoint_path, seed,
                    partitioner: partitioning.Partitioner | None = None):
  """Random parameters, or INITIAL_CHECKPOINT_PATH's; a reward model gets a head unless it has one."""
  rng = jax.random.PRNGKey(seed)
  loaded = (checkpoints.load_params(initial_checkpoint_path, config, partitioner)[1]
            if initial_checkpoint_path else None)
  if not objective.reward_head:
    params = loaded if loaded is not None else init_params(config, rng)
    return {k: v for k, v in params.items() if k != reward_lib.HEAD}
  if loaded is not None and reward_lib.HEAD in loaded:
    return loaded
  return reward_lib.init_reward_params(config, rng, loaded)


def _initialise_or_restore(manager, config, goal, optimizer, initial_checkpoint_path, seed,
                           partitioner: partitioning.Partitioner, vocabulary: dict | None = None):
  """(step, params, opt_state, (params shardings, optimizer state shardings)) to start from.

  The latest checkpoint in `manager` that reads (a damaged later one is reported and passed over;
  when none reads, its CheckpointDamagedError stops the run rather than start it afresh), else
  INITIAL_CHECKPOINT_PATH's (refused when it recorded another `vocabulary` than the tasks') or
  random parameters. Shardings come first, so that no array is ever whole on one device.
  """
  random_init = functools.partial(_initial_params, config, goal, None, seed)
  abstract_params = jax.eval_shape(random_init)
  params_shardings = partitioner.param_shardings(abstract_params, config)
  opt_shardings = partitioner.opt_state_shardings(optimizer, abstract_params, params_shardings)
  shardings = (params_shardings, opt_shardings)
  restored = checkpoints.restore_latest(
      manager, partitioning.with_shardings(abstract_params, params_shardings),
      partitioning.with_shardings(jax.eval_shape(optimizer.init, abstract_params), opt_shardings))
  if restored:
    step, params, opt_state, _ = restored  # the data position is the step: one batch per step
    return step, params, opt_state, shardings
  if initial_checkpoint_path:
    model_inputs.check_vocabulary(model_inputs.read(initial_checkpoint_path), vocabulary,
                                  f"INITIAL_CHECKPOINT_PATH {initial_checkpoint_path}")
    params = jax.device_put(_initial_params(config, goal, initial_checkpoint_path, seed, partitioner),
                            params_shardings)
  else:  # created in place, shard by shard: a large model never sits whole on one device
    params = jax.jit(random_init, out_shardings=params_shardings)()
  return 0, params, jax.jit(optimizer.init, out_shardings=opt_shardings)(params), shardings


def metric_writer(model_dir):
  """clu's TensorBoard writer of MODEL_DIR/train (process 0 writes; others log), or None where
  TensorFlow is missing or cannot reach the run's storage (metrics then go to the console only)."""
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
  # Named as a gin binding names them (gin/runs/finetune.gin).
  periods = (("configs.CheckpointConfig.every", checkpoint_every), ("configs.CheckpointConfig.keep", keep_checkpoints),
             ("configs.TrainingConfig.log_every", log_every))
  for name, value in (("TRAIN_STEPS", train_steps), ("BATCH_SIZE", batch_size),
                      ("ACCUMULATION_STEPS", accumulation_steps), *periods):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise ValueError(f"{name} must be a whole number, got {value!r}")
  for name, value in periods:
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


def _print_preflight(model_config, dataset: configs.DatasetConfig, training: configs.TrainingConfig,
                     partitioner: partitioning.Partitioner) -> None:
  """Prints what the run is about to do (`preflight.for_training`: processes, devices, mesh, batch,
  memory plan; it stops a run whose plan does not fit), and each process the rows of every global
  batch its devices hold. Batches without configured lengths have none to plan with: none is printed."""
  if not run_preflight.for_training(model_config=model_config, train_dataset=dataset, training=training,
                                    partitioner=partitioner):
    return
  first, end = partitioner.process_rows(dataset.batch_size)
  print(f"data: process {jax.process_index()} of {jax.process_count()} holds rows {first}-{end - 1} "
        f"of each global batch of {dataset.batch_size}", flush=True)


def _data_record(name, split, tasks) -> dict:
  """What each training task reads (files by content, examples, the tasks' configuration), as
  MODEL_DIR/data_files.json keeps it."""
  described, configuration = data.tasks_provenance(tasks)
  record = {"mixture_or_task_name": name, "split": split, "tasks": described, "task_configuration": configuration}
  return json.loads(json.dumps(record))


def vocabulary_size(tasks) -> int | None:
  """The most ids any output feature of the training tasks' vocabularies has (None: no tasks)."""
  sizes = [feature.vocabulary.vocab_size for task in tasks for feature in task.output_features.values()]
  return max(sizes, default=None)


def _check_data_record(model_dir, record: dict, resuming: bool) -> dict:
  """Refuses to resume a run's checkpoints on other data than its data_files.json records, naming
  each differing field with both values, before anything compiles or is written: the batches
  after the checkpoint would come from another stream. Files are compared by content, so a run
  copied elsewhere with its data resumes; fields a record predates are not compared. Returns the
  record of the run resumed ({} for a new run; `resuming`: MODEL_DIR holds a checkpoint step)."""
  layout = run_dir.RunDir(model_dir)
  if not resuming or not storage.exists(layout.data_files):
    return {}
  recorded = json.loads(storage.read_text(layout.data_files))
  changed = data.identity_differences(data.content_identity(recorded), data.content_identity(record),
                                      only_recorded=True)
  if changed:
    raise ValueError(f"MODEL_DIR {model_dir} holds a run trained on other data; fields that differ from "
                     f"{layout.data_files}: {'; '.join(changed[:4])}"
                     + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
                     + "; bind the run's data and settings again, or name a new MODEL_DIR")
  return recorded


def check_model_dir(model_dir) -> None:
  """Refuses a MODEL_DIR whose storage is unreachable, or that is a file."""
  storage.check_reachable(model_dir, "MODEL_DIR")
  if storage.is_file(model_dir):
    raise ValueError(f"MODEL_DIR {model_dir} is a file: name a folder (a new one, or a run's to resume)")


def remove_empty(folders) -> None:
  """Deletes each local folder of `folders` that holds nothing (a bucket has no empty folders)."""
  for folder in folders:
    if not storage.is_bucket(folder) and storage.is_dir(folder) and not storage.list_names(folder):
      storage.remove_tree(folder)


def log_interval(log_every: int, train_steps: int) -> int:
  """Steps between progress lines: LOG_EVERY, or a tenth of a shorter run (a report every 10%)."""
  return max(1, min(log_every, train_steps // 10))


@dataclasses.dataclass(frozen=True)
class BatchSource:
  """Training batches from elsewhere than a seqio task (tests, benchmarks), as `train`'s
  `train_dataset`: `batches(start_step)` yields whole numpy batches of `batch_size` rows, the same
  on every host, one a step from `start_step`. With `task_feature_lengths` (the most tokens a batch
  holds) the run prints its preflight and can evaluate during training; no task is read."""
  batches: Callable[[int], Iterator[dict]]
  batch_size: int
  task_feature_lengths: Mapping[str, int] | None = None

  def __call__(self, start_step: int) -> Iterator[dict]:
    return self.batches(start_step)

  def as_dataset(self) -> configs.DatasetConfig:
    """The batches' shape as a DatasetConfig of no task (the checks and evaluation read it)."""
    return configs.DatasetConfig(None, self.task_feature_lengths, "train", self.batch_size)


def train(*, model_config: T5Config, train_dataset: configs.DatasetConfig | BatchSource,
          training: configs.TrainingConfig, checkpoint: configs.CheckpointConfig,
          partitioner: partitioning.Partitioner, model_dir: str,
          evaluation: configs.EvaluationConfig | None = None, run_config: str | None = None) -> TrainResult:
  """Trains (or resumes training of) a model in `model_dir` up to `training.steps` steps.

  Data comes from `train_dataset`: a DatasetConfig's seqio task or mixture, or a `BatchSource`.
  The mesh and its rules are `partitioner`'s (it joins the hosts of a multi-host run first).
  `training.optimizer` None is `trainer.make_optimizer()` (Adafactor, constant 1e-3).
  On SIGTERM or SIGINT the run saves a checkpoint at its step and returns preempted, with the signal.
  The run holds `model_dir`'s lease (runner/lease.py) from its first write to its end: another
  training into the same `model_dir` meanwhile stops in one line naming this one.
  `run_config` (the gin configuration's text) is written to `model_dir/config.gin`, the data
  files each task read to `model_dir/data_files.json`, the tasks' vocabulary and the feature
  lengths to `model_dir/model_inputs.json` (`runner.model_inputs`). The tasks' vocabulary is checked
  against the model's embedding, and against the one the run or its initial checkpoint recorded,
  before anything runs. Every run first prints its preflight
  (`preflight.for_training`) and stops when the memory plan does not fit the devices' memory
  (`training.device_memory_gib`, default: what the device reports).
  With `training.normalize_reward_task` (a reward objective), a run that reaches `training.steps`
  also writes its reward model shifted so that the task's `normalize_reward_split` references score
  0 on average to `model_dir/normalized` (`runner.reward_normalization`; Stiennon et al. 2020,
  §3.4); the training checkpoints stay as they are.

  With `evaluation` (`every` steps; None or 0: off), every `every` steps and at the end the run
  scores `evaluation.split` of `evaluation.mixture_or_task_name` (None: the training mixture) with
  its current parameters, as runner/evaluate.py does (the reward scorer for a reward objective,
  else likelihood normalised by `evaluation.normalization`), adding each group of
  `evaluation.metric_groups`; it writes `eval/<task>/<metric>` TensorBoard scalars, a line of
  `model_dir/eval_metrics.jsonl` and one console line. With `evaluation.best_metric`
  ('<task or group>/<metric>') it also keeps the best checkpoint by it (`best_mode` 'max' or
  'min'; a tie keeps the earlier step) in `model_dir/best`; resuming still restores the latest.
  """
  goal = trainer.get_objective(training.objective)
  if training.normalize_reward_task is not None and not goal.reward_head:
    raise ValueError(f"normalize_reward_task needs a reward model (OBJECTIVE 'pairwise' or 'listwise'), "
                     f"not {training.objective!r}")
  check_model_dir(model_dir)
  partitioner.initialize()
  host_memory.reuse_freed_memory()
  if training.normalize_reward_task is not None and jax.process_count() > 1:
    raise ValueError("normalize_reward_task runs in one process; on several hosts, run "
                     "scripts.normalize_reward after training")
  from_tasks = isinstance(train_dataset, configs.DatasetConfig)
  dataset = train_dataset if from_tasks else train_dataset.as_dataset()
  # The mixture is resolved once (an unknown name stops the run here, naming close ones).
  if from_tasks and dataset.task_feature_lengths is None:
    raise ValueError("TASK_FEATURE_LENGTHS is None: training needs them bound, e.g. "
                     "{'inputs': 512, 'targets': 128} (None means a checkpoint's own only in evaluation and inference)")
  tasks = data.tasks_with_split(dataset.mixture_or_task_name, dataset.split) if from_tasks else []
  check_settings(train_steps=training.steps, batch_size=dataset.batch_size,
                 accumulation_steps=training.accumulation_steps, data_axis=partitioner.batch_blocks(),
                 model_config=model_config, vocabulary_size=vocabulary_size(tasks),
                 checkpoint_every=checkpoint.every, keep_checkpoints=checkpoint.keep, log_every=training.log_every)
  checkpoints.check_run_model(model_dir, model_config)
  layout = run_dir.RunDir(model_dir)
  resuming = any(name.isdigit() for name in storage.list_names(layout.checkpoints))
  if checkpoint.initial_checkpoint_path and not resuming:  # read after the data is prepared: checked now
    checkpoints.check_checkpoint(checkpoint.initial_checkpoint_path, "INITIAL_CHECKPOINT_PATH")
  vocabulary = model_inputs.tasks_vocabulary(tasks)
  model_inputs.check_vocabulary(model_inputs.read(model_dir), vocabulary, f"MODEL_DIR {model_dir}")
  # Held from here to the end: a second training into MODEL_DIR stops here, in one line.
  created = [path for path in (model_dir, layout.checkpoints) if not storage.exists(path)]
  lease = lease_lib.acquire(model_dir)
  try:
    if training.optimizer is None:
      training = dataclasses.replace(training, optimizer=trainer.make_optimizer())
    optimizer = training.optimizer
    _print_preflight(model_config, dataset, training, partitioner)
    if from_tasks:
      _print_mixture(dataset.mixture_or_task_name, dataset.split)
      data.require_examples(tasks, dataset.split)
      data_record = _data_record(dataset.mixture_or_task_name, dataset.split, tasks)
      recorded = _check_data_record(model_dir, data_record, resuming)
      # What the feature lengths cut of each task, printed and kept in data_files.json (issue 48).
      data_record["truncation"] = data.training_truncation(tasks, dataset, candidates=goal.candidates,
                                                           recorded=recorded.get("truncation"))
    if training.normalize_reward_task is not None:  # its references are read after the last step: check them before the first
      data.require_examples(data.tasks_with_split(training.normalize_reward_task, training.normalize_reward_split),
                            training.normalize_reward_split)
    if training.compilation_cache_dir:
      jax.config.update("jax_compilation_cache_dir", training.compilation_cache_dir)
    evaluator = training_evaluation.make(evaluation, goal=goal, model_config=model_config, train_dataset=dataset,
                                         partitioner=partitioner, model_dir=model_dir)

    manager = checkpoints.checkpoint_manager(model_dir, checkpoint.keep)
    step, params, opt_state, shardings = _initialise_or_restore(
        manager, model_config, goal, optimizer, checkpoint.initial_checkpoint_path, training.seed, partitioner,
        vocabulary)
    # A save's checksums compile with the first save; compiled now, with the rest, so that a loaded
    # machine's slow compile is part of start-up, not a silent minute after the last step's line.
    checkpoint_integrity.checksums(params), checkpoint_integrity.checksums(opt_state)
    # Written once the run is known to start: a refused resume leaves the run's records as they were.
    if jax.process_index() == 0:  # evaluation and inference read the architecture from here
      checkpoints.write_model_config(model_dir, model_config)
      model_inputs.write(model_dir, vocabulary, dataset.task_feature_lengths)
      if run_config is not None:
        outputs.write_run_config(model_dir, run_config)
      if from_tasks:
        storage.write_text(run_dir.RunDir(model_dir).data_files, json.dumps(data_record, indent=2) + "\n")
    if step:
      print(f"resuming from the checkpoint of step {step} in {model_dir}", flush=True)
    if evaluator is not None:
      evaluator.resume(step)

    train_step = trainer.make_train_step(model_config, optimizer, partitioner, *shardings,
                                         objective=training.objective, accumulation_steps=training.accumulation_steps,
                                         z_loss=training.z_loss, dropout_seed=training.seed)
    if not from_tasks:
      batches = train_dataset(step)
    else:  # one batch per step (accumulation splits it), so the data position is the step
      batches = data.train_batches(dataset.mixture_or_task_name, dataset.task_feature_lengths, dataset.batch_size,
                                   candidates=goal.candidates, split=dataset.split, seed=dataset.seed,
                                   start_step=step, use_cached=dataset.use_cached)
    writer = metric_writer(model_dir)
    # MFU on the progress line where the devices' peak is published (none on a CPU); candidate batches'
    # decoder rows vary with each item's candidates, so those objectives print none.
    lengths = dataset.task_feature_lengths
    peak = flops.peak_flops_per_second([device.device_kind for device in jax.devices()])
    step_flops = (flops.training_flops(model_config, dataset.batch_size, lengths["inputs"], lengths["targets"])
                  if peak and lengths and not goal.candidates else None)
    train_steps = training.steps
    progress = Progress("step", train_steps, "steps", flops_per_unit=step_flops, peak_flops=peak)
    progress.done = step
    pending, last_metrics, preempted, saved_step = [], {}, False, step
    every_log = log_interval(training.log_every, train_steps)
    def check_finite():
      """Raises on a non-finite loss, gradient or parameter norm among the steps not yet checked."""
      for pending_step, metrics in jax.device_get(pending):
        norms = {name: float(metrics[name]) for name in ("loss", "grad_norm", "param_norm")}
        if not all(map(math.isfinite, norms.values())):
          checkpoints.finish(manager)
          last_good = manager.latest_step()
          raise NonFiniteLossError(
              f"loss {norms['loss']}, gradient norm {norms['grad_norm']}, parameter norm {norms['param_norm']} "
              f"at step {pending_step}; stopped without saving: "
              + (f"the last good checkpoint is step {last_good} in {model_dir}" if last_good is not None
                 else f"no checkpoint was saved before it in {model_dir}"))
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
      evaluator(step, params, writer)

    def save():
      nonlocal saved_step
      if step == saved_step:
        return
      check_finite()
      lease_lib.check(lease)  # a run whose lease was taken over writes nothing more
      if checkpoints.save(manager, step, params, opt_state, {"batches": step}):
        saved_step = step

    if evaluator is not None and step and step % evaluator.every == 0 and step not in evaluator.evaluated_steps:
      evaluate_now()  # a run stopped by a signal at an evaluation step saved it unevaluated
    # clu's periodic actions would do for these two, but clu.periodic_actions imports its TensorFlow
    # summary writer, and the GPU machines have no TensorFlow.
    with checkpoints.PreemptionGuard(manager) as guard:
      while step < train_steps:
        batch = next(batches)
        params, opt_state, metrics = train_step(params, opt_state, partitioner.global_batch(batch), step)
        pending.append((step, metrics))
        checkpoints.check_writes(manager)  # a checkpoint that failed in the background stops the run now
        step += 1
        progress.advance(1, _real_tokens(batch))
        if step % every_log == 0 or step == train_steps:
          last_metrics = log(metrics)
        if guard.should_stop(step):
          preempted = True
          break
        # Before the step's checkpoint: the best of a step is on disk before the latest one is.
        if evaluator is not None and step % evaluator.every == 0:
          evaluate_now()
        if step % checkpoint.every == 0:
          save()
      if evaluator is not None and not preempted and step not in evaluator.evaluated_steps:
        evaluate_now()  # the end of the run
      save()
    checkpoints.finish(manager)
    if writer is not None:
      writer.flush()
    if training.normalize_reward_task is not None and not preempted:
      with partitioner.activate():
        reward_normalization.normalize(
            model_config, params, source=model_dir,
            output_dir=run_dir.RunDir(model_dir).normalized,
            task_name=training.normalize_reward_task, split=training.normalize_reward_split,
            feature_lengths=lengths, batch_size=dataset.batch_size)
    return TrainResult(step=step, params=params, preempted=preempted, metrics=last_metrics,
                       signal_number=guard.signal_number)
  finally:
    if lease is not None:
      lease.release()
    if jax.process_index() == 0:
      remove_empty(reversed(created))  # a refused run leaves no empty folder of its own behind
