"""The preflight's memory plan against XLA's own memory analysis, and the preflight command line."""
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from models.config import T5Config
from runner import memory_plan, preflight
from scripts import preflight as preflight_script
from tests.conftest import PROJECT_ROOT, xla_flags
from tests.helpers import cli

TINY = dict(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128,
            num_encoder_layers=2, num_decoder_layers=2)  # gin/models/t5_1_1/tiny.gin
SMALL = dict(vocab_size=32128, emb_dim=512, num_heads=6, head_dim=64, mlp_dim=1024,
             num_encoder_layers=8, num_decoder_layers=8)  # gin/models/t5_1_1/small.gin
# small's vocabulary and widths with 2 layers a stack, for XLA to compile: the plan counts each layer
# alike, and XLA's compile time grows faster than the layers (8 a stack: 29 s of CPU; 2: 7 s).
SMALL_2_LAYERS = dict(SMALL, num_encoder_layers=2, num_decoder_layers=2)
XXL = dict(vocab_size=32128, emb_dim=4096, num_heads=64, head_dim=64, mlp_dim=10240,
           num_encoder_layers=24, num_decoder_layers=24)  # gin/models/t5_1_1/xxl.gin

# Compiles (never runs) the project's train step on 4 simulated devices, data-parallel, and prints
# XLA's per-device memory analysis beside the plan's numbers.
_COMPILE_AND_PLAN = """
import functools, json
import jax, jax.numpy as jnp
from models.config import T5Config
from runner import memory_plan, partitioning, trainer, train as train_lib

def measure(sizes, batch, lengths):
  config = T5Config(**sizes)
  mesh = partitioning.create_mesh(4, 1)
  optimizer = trainer.make_optimizer()
  goal = trainer.get_objective("cross_entropy")
  abstract_params = jax.eval_shape(functools.partial(train_lib._initial_params, config, goal, None, 0))
  params_shardings = partitioning.param_shardings(abstract_params, config, mesh)
  opt_shardings = partitioning.opt_state_shardings(optimizer, abstract_params, params_shardings, mesh)
  step = trainer.make_train_step(config, optimizer, partitioning.Partitioner.for_mesh(mesh), params_shardings, opt_shardings)
  rows = partitioning.batch_sharding(mesh)
  batch_structs = {"input_ids": jax.ShapeDtypeStruct((batch, lengths["inputs"]), jnp.int32, sharding=rows),
                   "target_ids": jax.ShapeDtypeStruct((batch, lengths["targets"]), jnp.int32, sharding=rows)}
  compiled = step.lower(
      partitioning.with_shardings(abstract_params, params_shardings),
      partitioning.with_shardings(jax.eval_shape(optimizer.init, abstract_params), opt_shardings),
      batch_structs, jax.ShapeDtypeStruct((), jnp.int32)).compile()
  xla = compiled.memory_analysis()
  plan = memory_plan.plan(config, mesh_shape=(4, 1), batch_size=batch, feature_lengths=lengths)
  return {"xla_total": xla.argument_size_in_bytes + xla.output_size_in_bytes - xla.alias_size_in_bytes
                       + xla.temp_size_in_bytes,
          "xla_arguments": xla.argument_size_in_bytes, "xla_temp": xla.temp_size_in_bytes,
          "plan_total": plan.total,
          "plan_arguments": plan.part("parameters") + plan.part("optimizer state (adafactor)") + plan.part("batch")}

for sizes in %(sizes)r:
  print(json.dumps(measure(sizes, 8, {"inputs": 64, "targets": 16})))
"""

_XXL_ARGS = ("--gin_file=gin/models/t5_1_1/xxl.gin", "--gin_file=gin/runs/finetune.gin",
             "--gin.MESH_SHAPE=(32,8)", "--gin.DEVICE_MEMORY_GIB=16")
_TINY_ARGS = ("--gin_file=gin/models/t5_1_1/tiny.gin", "--gin_file=gin/runs/finetune.gin", "--gin.BATCH_SIZE=16")


@pytest.fixture(scope="module")
def compiled_sizes():
  """The one subprocess of this file (its 4 simulated devices must be set before JAX starts), small
  (2 layers a stack) and tiny compiled in it, started by the first test and run beside the
  in-process ones (the test that reads it is the file's last). It compiles with the suite's
  FAST_COMPILE: LLVM's optimisation level changes the machine code, not XLA's buffer assignment
  (small's memory analysis is byte for byte the same with and without it)."""
  env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(devices=4))
  program = textwrap.dedent(_COMPILE_AND_PLAN % {"sizes": [SMALL_2_LAYERS, TINY]})
  process = subprocess.Popen([sys.executable, "-c", program],
                             cwd=PROJECT_ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  yield process
  if process.poll() is None:
    process.kill()


def _finish(process, expect_returncode=0):
  out, err = process.communicate(timeout=600)
  assert process.returncode == expect_returncode, out + err[-4000:]
  return out, err


def _preflight(argv, expect_returncode=0):
  """`python -m scripts.preflight ARGV` in this process (tests/helpers/cli.py): a plan from gin
  files, which needs no fresh interpreter; (stdout, stderr)."""
  result = cli.run_script(preflight_script.main, argv, program="preflight")
  assert result.code == expect_returncode, result.stdout + result.stderr[-4000:]
  return result.stdout, result.stderr


def _xxl_parameters_per_device(model: int) -> float:
  """T5.1.1 xxl's float32 parameter bytes on one device with the vocab, heads and mlp split over
  `model`, counted from the sizes (not from the network): embedding and logits, then the layers."""
  c = XXL
  inner = c["num_heads"] * c["head_dim"]
  embeddings = 2 * c["vocab_size"] * c["emb_dim"] / model
  attention = 4 * c["emb_dim"] * inner / model
  mlp = 3 * c["emb_dim"] * c["mlp_dim"] / model
  norms = (2 * c["num_encoder_layers"] + 3 * c["num_decoder_layers"] + 2) * c["emb_dim"]
  relpos = 2 * c["num_heads"] * 32 / model
  layers = c["num_encoder_layers"] * (attention + mlp) + c["num_decoder_layers"] * (2 * attention + mlp)
  return 4 * (embeddings + layers + norms + relpos)


def test_xxl_on_32_by_8_of_16_gib_says_whether_it_fits_and_why(compiled_sizes):
  del compiled_sizes  # started here, the file's first test, so that it compiles while the others run
  out, err = _preflight(_XXL_ARGS, expect_returncode=1)
  print(out, err)
  assert "mesh: data 32 x model 8 = 256 devices (planned from shapes" in out
  expected = _xxl_parameters_per_device(8)
  plan = memory_plan.plan(T5Config(**XXL), mesh_shape=(32, 8), batch_size=32,
                          feature_lengths={"inputs": 512, "targets": 128})
  assert plan.part("parameters") == pytest.approx(expected, rel=1e-6)
  assert f"parameters {memory_plan.mib(expected)}" in err
  # Parameters, two gradient copies and the update alone are 4 x 5.19 GiB: more than 16 GiB.
  assert 4 * expected > 16 * 2 ** 30
  assert "does NOT fit in 16.00 GiB per device" in out
  assert "the memory plan does not fit" in err and '--gin.MESH_SHAPE="(' in err


def test_a_plan_that_does_not_fit_raises_with_the_arithmetic_and_a_mesh_that_fits():
  config = T5Config(**SMALL)
  lengths = {"inputs": 64, "targets": 16}
  with pytest.raises(ValueError) as raised:
    preflight.check(config, mesh_shape=(4, 1), batch_size=8, feature_lengths=lengths, device_memory_gib=1.0)
  message = str(raised.value)
  assert "1.00 GiB" in message and "parameters 293.6 MiB" in message and "gradients 587.2 MiB" in message
  suggested = message.split('--gin.MESH_SHAPE="(')[1].split(")")[0]
  data, model = map(int, suggested.split(","))
  assert memory_plan.plan(config, mesh_shape=(data, model), batch_size=8,
                          feature_lengths=lengths).fits(2 ** 30)
  # The plan that fits: the same check passes on it.
  preflight.check(config, mesh_shape=(data, model), batch_size=8, feature_lengths=lengths, device_memory_gib=1.0)


def test_tiny_preflight_prints_processes_devices_mesh_batch_and_plan():
  out, _ = _preflight(_TINY_ARGS)
  print(out)
  lines = out.splitlines()
  assert lines[0] == "processes: 1 (this is process 0)"
  assert lines[1].startswith("devices: 1 local, 1 global (1 x cpu)")
  assert lines[2] == "mesh: data 1 x model 1 = 1 device"
  assert lines[3].startswith("batch: 16 rows a step, 16 per host (1 host), 16 per device per microbatch")
  assert any(line.startswith("  fits in ") for line in lines)
  assert "inputs 512, targets 128" in out  # finetune.gin's TASK_FEATURE_LENGTHS


def test_remat_keeps_only_layer_inputs_and_accumulation_splits_the_rows():
  config, lengths = T5Config(**SMALL), {"inputs": 512, "targets": 128}
  full = memory_plan.plan(config, mesh_shape=(1, 1), batch_size=8, feature_lengths=lengths)
  remat = memory_plan.plan(config, mesh_shape=(1, 1), batch_size=8, feature_lengths=lengths, remat=True)
  accumulated = memory_plan.plan(config, mesh_shape=(1, 1), batch_size=8, feature_lengths=lengths,
                                 accumulation_steps=2)
  assert remat.total < full.total and accumulated.rows_per_device == 4
  kept = remat.part("activations: layer inputs (remat)")
  assert kept == (8 * 512 * 8 + 8 * 128 * 8) * 512 * 4
  assert math.isclose(accumulated.part("gradients"), 3 * full.part("parameters"))


def test_plan_is_within_20_percent_of_xla_memory_analysis_for_small(compiled_sizes):
  small_line, tiny_line = _finish(compiled_sizes)[0].splitlines()[-2:]
  measured = {"small": json.loads(small_line), "tiny": json.loads(tiny_line)}
  for name, numbers in measured.items():
    print(name, {key: f"{value / 2 ** 20:.1f} MiB" for key, value in numbers.items()},
          f"plan / XLA total {numbers['plan_total'] / numbers['xla_total']:.2f}")
  small = measured["small"]
  # Parameters and optimizer state are the arguments XLA holds: exact shapes, exact shards.
  assert small["plan_arguments"] == pytest.approx(small["xla_arguments"], rel=0.01)
  assert small["plan_total"] == pytest.approx(small["xla_total"], rel=0.20)
  # tiny: arguments exact; its total is dominated by temporaries XLA fuses away (no bound on it).
  assert measured["tiny"]["plan_arguments"] == pytest.approx(measured["tiny"]["xla_arguments"], rel=0.01)
