"""What a run is about to do, printed before it starts: processes, devices, mesh, batch and memory.

`describe_run` gives the lines and `check` stops a run whose memory plan (runner/memory_plan.py)
does not fit the device, with the arithmetic and a mesh that would fit. `for_training` does both
for the objects `train.train` receives: every run calls it, and `python -m scripts.preflight` calls
it with the same objects, which gin/runs/finetune.gin binds to both, without running anything.
A mesh larger than this machine's devices (a pod slice planned from a laptop) is planned from
shapes alone: nothing here creates a mesh or allocates.
"""
import collections

import jax

from models.config import T5Config
from runner import configs
from runner import memory_plan
from runner import partitioning
from runner import trainer


def _plan(config, mesh_shape, batch_size, feature_lengths, optimizer, accumulation_steps, remat, objective,
          rules):
  return memory_plan.plan(config, mesh_shape=partitioning.resolve_mesh_shape(mesh_shape), batch_size=batch_size,
                          feature_lengths=feature_lengths, optimizer=optimizer,
                          accumulation_steps=accumulation_steps, remat=remat, objective=objective, rules=rules)


def describe_run(config: T5Config, *, mesh_shape, batch_size: int, feature_lengths: dict, optimizer="adafactor",
                 accumulation_steps: int = 1, remat: bool = False, objective: str = "cross_entropy",
                 rules=partitioning.STANDARD_LOGICAL_AXIS_RULES, device_memory_gib: float | None = None,
                 shard_lines: list[str] | None = None) -> list[str]:
  """The preflight's lines: processes, devices, mesh, batch, `shard_lines` as given, memory plan."""
  data, model = partitioning.resolve_mesh_shape(mesh_shape)
  processes = jax.process_count()
  kinds = collections.Counter(device.device_kind for device in jax.devices())
  mesh_devices = data * model
  lines = [f"processes: {processes} (this is process {jax.process_index()})",
           f"devices: {jax.local_device_count()} local, {jax.device_count()} global ("
           + ", ".join(f"{count} x {kind}" for kind, count in kinds.items()) + ")"]
  mesh_line = f"mesh: data {data} x model {model} = {mesh_devices} device{'s' if mesh_devices > 1 else ''}"
  if mesh_devices != jax.device_count():
    mesh_line += f" (planned from shapes: this machine sees {jax.device_count()})"
  lines.append(mesh_line)
  per_host = batch_size / processes
  lines.append(f"batch: {batch_size} rows a step, {per_host:g} per host ({processes} host{'s' if processes > 1 else ''}), "
               f"{batch_size / (data * accumulation_steps):g} per device per microbatch "
               f"(data {data} x accumulation {accumulation_steps})")
  lines += list(shard_lines or [])
  plan = _plan(config, mesh_shape, batch_size, feature_lengths, optimizer, accumulation_steps, remat, objective,
               rules)
  device_bytes, source = memory_plan.device_memory_bytes(device_memory_gib)
  lines.append(f"device memory: {memory_plan.mib(device_bytes)} ({source})")
  lines += plan.describe(device_bytes)
  return lines


def _sum(plan: memory_plan.MemoryPlan) -> str:
  """parameters + optimizer state + gradients + update + activations = total, in MiB/GiB."""
  groups = {}
  for part in plan.parts:
    group = part.name.split(":")[0].split(" (")[0]
    groups[group] = groups.get(group, 0) + part.bytes
  return (" + ".join(f"{name} {memory_plan.mib(count)}" for name, count in groups.items() if name != "batch")
          + f" = {memory_plan.mib(plan.total)}")


def check(config: T5Config, *, mesh_shape, batch_size: int, feature_lengths: dict, optimizer="adafactor",
          accumulation_steps: int = 1, remat: bool = False, objective: str = "cross_entropy",
          rules=partitioning.STANDARD_LOGICAL_AXIS_RULES,
          device_memory_gib: float | None = None) -> memory_plan.MemoryPlan:
  """The plan, or a ValueError (one paragraph: the arithmetic and a setting that fits) when it does not fit."""
  plan = _plan(config, mesh_shape, batch_size, feature_lengths, optimizer, accumulation_steps, remat, objective,
               rules)
  device_bytes, source = memory_plan.device_memory_bytes(device_memory_gib)
  if plan.fits(device_bytes):
    return plan
  mib = memory_plan.mib
  # Lines, not one long line: the command line's one-paragraph errors cut a line past 500 characters.
  message = (f"the memory plan does not fit: one training step needs {mib(plan.total)} per device on "
             f"{plan.settings()}, but a device holds {mib(device_bytes)} ({source}):\n{_sum(plan)}\n")
  alternative = memory_plan.fitting_alternative(
      config, device_bytes, mesh_shape=plan.mesh_shape, batch_size=batch_size, feature_lengths=feature_lengths,
      optimizer=optimizer, accumulation_steps=accumulation_steps, remat=remat, objective=objective, rules=rules)
  if alternative is None:
    message += ("No mesh of up to 16 times the devices fits, with or without remat and accumulation: "
                "use devices with more memory or a smaller model.")
  else:
    data, model = alternative.mesh_shape
    flags = [f'--gin.MESH_SHAPE="({data}, {model})"']  # quoted: pasted into a shell as it stands
    if alternative.accumulation_steps != accumulation_steps:
      flags.append(f"--gin.ACCUMULATION_STEPS={alternative.accumulation_steps}")
    if alternative.remat and not remat:
      flags.append("--gin.REMAT=True")
    message += (f"It would fit on {alternative.settings()}: {mib(alternative.total)} "
                f"({data * model} devices); e.g. {' '.join(flags)}.")
  raise ValueError(message)


def for_training(*, model_config: T5Config, train_dataset: configs.DatasetConfig,
                 training: configs.TrainingConfig, partitioner: partitioning.Partitioner) -> list[str]:
  """Prints a training run's preflight (process 0) and stops the run when its memory plan does not
  fit its devices (`check`), before anything is allocated; returns the lines. Joins the hosts,
  but makes no mesh: a pod slice's mesh is planned from shapes. Batches without configured lengths
  (a batch source's) have none to plan with: nothing is printed."""
  if train_dataset.task_feature_lengths is None:
    return []
  partitioner.initialize()
  settings = dict(mesh_shape=partitioner.axes(), batch_size=train_dataset.batch_size,
                  feature_lengths=train_dataset.task_feature_lengths,
                  optimizer=training.optimizer or trainer.make_optimizer(),
                  accumulation_steps=training.accumulation_steps, remat=model_config.remat,
                  objective=training.objective, rules=partitioner.rules,
                  device_memory_gib=training.device_memory_gib)
  lines = describe_run(model_config, **settings)
  if jax.process_index() == 0:
    print("\n".join(lines), flush=True)
  check(model_config, **settings)
  return lines
