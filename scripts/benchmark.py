r"""Benchmarks our scoring, training and sampling side by side with the naive path and Hugging Face T5.

  python -m scripts.benchmark --model small --json bench.jsonl
  python -m scripts.benchmark --model small --dtype bfloat16 --json $OUT/bench.jsonl  # on a GPU
  python -m scripts.benchmark --model tiny --quick --suites scoring

Protocol (ENGINEERING.md §5): all implementations run in one process on the same weights (a random
T5.1.1 twin saved by transformers and imported with models.checkpoint_import), agreement is checked
first, then runs are interleaved A B A B with the matmul probes that give each engine's ceiling
(in the model's dtype); medians are reported, compile time (first call minus median) separately.
Each ratio is also given as the min-max of its per-repetition values, with the load average before
and after, and a WARNING line where that spread exceeds 20% of the median.
MFU = analytic model FLOPs of one call (models/flops.py) / its median time / the median
rate of the same engine's matmul probe, measured in the same case (one over 100%: the ceiling
measured low, flagged as not to be read).
Without torch or transformers the Hugging Face contenders are skipped, with a printed reason,
and the weights are a random initialisation of the config.
"""
import copy
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile

import gin
import jax
import numpy as np
from absl import app
from absl import flags

from models import checkpoint_import, decoding, network, scoring
from runner import host_memory, partitioning, trainer
from models import flops as model_flops
from scripts import console
from scripts.bench import evaluation as bench_evaluation
from scripts.bench import profile as bench_profile
from scripts.bench import report as bench_report
from scripts.bench import timing as bench_timing

try:
  import torch
  from scripts.bench import hf as bench_hf
  HF_MISSING = None
except ImportError as error:  # a JAX-only machine
  torch = bench_hf = None
  HF_MISSING = str(error)

SUITES = ("scoring", "training", "generation", "import", "evaluation", "profile")
DEFAULT_SUITES = SUITES[:-1]  # the profile (phases of a step, minutes at small) runs on request
QUICK_REPS = 3

_MODEL = flags.DEFINE_enum("model", "small", ["tiny", "small", "base", "large"], "T5.1.1 size (gin/models/t5_1_1).")
_SUITES = flags.DEFINE_list("suites", ",".join(DEFAULT_SUITES), f"Suites to run, of {', '.join(SUITES)}.")
_REPS = flags.DEFINE_integer("reps", 7, "Interleaved timed repetitions (each runs every contender once), "
                             "after one warm-up; at least 7 for numbers to read.")
_JSON = flags.DEFINE_string("json", None, "Write one JSON object per measurement to this file.")
_DEVICE = flags.DEFINE_enum("device", "auto", ["auto", "cpu", "gpu"], "auto: JAX's default backend.")
_DTYPE = flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"],
                           "Activations and matmul probe; default float32 on a CPU, bfloat16 on a GPU.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the weights and the batches.")
_QUICK = flags.DEFINE_bool("quick", False, f"A smoke run: {QUICK_REPS} repetitions of tiny shapes, the first "
                           "scoring case only (the numbers mean nothing; the code paths all run).")

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIN_DIR = os.path.join(PROJECT_ROOT, "gin", "models", "t5_1_1")


@dataclasses.dataclass(frozen=True)
class ScoringCase:
  name: str
  batch: int  # contexts per call
  context: int
  candidates: int
  steps: int  # candidate length after padding
  full_length: bool = False  # every candidate fills `steps` (else lengths vary from steps // 4)


SCORING_CASES = (
    ScoringCase("timedial", batch=2, context=256, candidates=4, steps=16),
    ScoringCase("asq", batch=2, context=384, candidates=2, steps=32),
    ScoringCase("advice", batch=1, context=1280, candidates=2, steps=128, full_length=True),
)
TRAINING_SHAPE = dict(batch=2, context=256, steps=64)
GENERATION_SHAPE = dict(batch=4, context=256, new_tokens=64)
# --quick: shapes that compile and run in a moment (a smoke run, not a measurement).
QUICK_SHAPES = dict(scoring_cases=(ScoringCase("timedial", batch=2, context=32, candidates=4, steps=8),),
                    training_shape=dict(batch=2, context=32, steps=8),
                    generation_shape=dict(batch=2, context=32, new_tokens=8), matmul_size=512)
SCORE_TOLERANCE = 1e-3


def model_config(name: str):
  """The T5Config bound by gin/models/t5_1_1/<name>.gin."""

  if not hasattr(gin, "parse_config_file"):  # the project's gin/ folder, imported as a namespace package
    raise ImportError("gin-config is not installed (on the GPU machine: carry a copy and put it on PYTHONPATH)")
  gin.clear_config()
  gin.parse_config_file(os.path.join(GIN_DIR, f"{name}.gin"))
  config = gin.query_parameter("%MODEL_CONFIG").scoped_configurable_fn()
  gin.clear_config()
  return config


def token_ids(rng, shape, vocab, lengths=None):
  """Random ids in [2, vocab) with EOS (1) closing each row at its length and padding (0) after."""
  ids = rng.integers(2, vocab, size=shape).astype("int32")
  flat = ids.reshape(-1, shape[-1])
  for row, length in enumerate([shape[-1]] * len(flat) if lengths is None else lengths):
    flat[row, length - 1] = 1
    flat[row, length:] = 0
  return flat.reshape(shape)


@dataclasses.dataclass
class Bench:
  """What every suite shares: the two engines' models on one set of weights, and how to time them."""
  config: object  # T5Config of the timed runs (its dtype: the activations' and the matmul probes')
  params: object
  hf_model: object  # None where torch or transformers is missing: Hugging Face is skipped
  torch_device: str
  reps: int
  seed: int
  meta: dict
  scoring_cases: tuple = SCORING_CASES
  training_shape: dict = dataclasses.field(default_factory=lambda: TRAINING_SHAPE)
  generation_shape: dict = dataclasses.field(default_factory=lambda: GENERATION_SHAPE)
  matmul_size: int | None = None  # None: 8192 on a GPU, 2048 on a CPU

  @property
  def on_gpu(self):
    return self.torch_device != "cpu"

  @property
  def torch_dtype(self):
    return torch.bfloat16 if self.config.dtype == "bfloat16" else None

  def matmul_runners(self):
    size, dtype = self.matmul_size or (8192 if self.on_gpu else 2048), self.config.dtype
    jax_run, flops = bench_timing.jax_matmul_runner(size, dtype)
    runners, probe_flops = {"jax_matmul": jax_run}, {"jax_matmul": flops}
    if self.hf_model is not None:
      runners["torch_matmul"], probe_flops["torch_matmul"] = bench_timing.torch_matmul_runner(
          size, dtype, self.torch_device)
    return runners, probe_flops

  def measure(self, suite, case, shape, unit, runners, work, check):
    """Interleaves `runners` with the matmul probes; returns the case's records and the probes'."""
    probes, probe_flops = self.matmul_runners()
    agreement = {}
    load_start = bench_timing.load_average()
    timings = bench_timing.interleaved({**runners, **probes}, self.reps,
                                       check=lambda first: agreement.update(check(first)))
    meta = dict(self.meta, suite=suite, case=case, shape=shape, unit=unit, load_start=load_start,
                load_end=bench_timing.load_average())
    peaks = {name.split("_")[0]: flops / timings[name].median_s for name, flops in probe_flops.items()}
    return (bench_report.case_records(meta, timings, work, peaks, agreement)
            + bench_report.peak_records(meta, timings, probe_flops))


def _max_abs_diff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _require(agreement: dict, tolerance: float, what: str):
  for name, diff in agreement.items():
    if diff > tolerance:
      raise AssertionError(f"{what}: {name} = {diff:.3g} exceeds {tolerance:g}; the race would not be fair")
  return agreement


def scoring_suite(bench: Bench) -> list[dict]:
  c = bench.config
  records = []
  for case in bench.scoring_cases:
    rng = np.random.default_rng(bench.seed)
    input_ids = token_ids(rng, (case.batch, case.context), c.vocab_size)
    rows = case.batch * case.candidates
    lengths = [case.steps] * rows if case.full_length else rng.integers(max(case.steps // 4, 1), case.steps + 1, rows)
    candidate_ids = token_ids(rng, (case.batch, case.candidates, case.steps), c.vocab_size, lengths)
    runners = {
        "score_candidates": lambda: np.asarray(scoring.score_candidates(c, bench.params, input_ids, candidate_ids)),
        "score_pairs": lambda: np.asarray(scoring.score_pairs(c, bench.params, input_ids, candidate_ids)),
    }
    shape_args = (c, case.batch, case.context, case.candidates, case.steps)
    work = {
        "score_candidates": dict(items=rows, engine="jax", flops=model_flops.shared_scoring_flops(*shape_args)),
        "score_pairs": dict(items=rows, engine="jax", flops=model_flops.pair_scoring_flops(*shape_args)),
    }
    if bench.hf_model is not None:
      runners["hf_t5"] = bench_hf.scorer(bench.hf_model, input_ids, candidate_ids, device=bench.torch_device)
      work["hf_t5"] = dict(items=rows, engine="torch", flops=model_flops.pair_scoring_flops(*shape_args))
    tolerance = SCORE_TOLERANCE if c.dtype == "float32" else 0.1

    def check(first):
      ours = first.pop("score_candidates")
      return _require({f"max_abs_diff_vs_{name}": _max_abs_diff(ours, theirs) for name, theirs in first.items()
                       if not name.endswith("_matmul")}, tolerance, "scores differ")

    shape = dict(batch=case.batch, context=case.context, candidates=case.candidates, candidate_len=case.steps,
                 mean_candidate_tokens=float(np.mean(lengths)))
    records += bench.measure("scoring", case.name, shape, "candidates/s", runners, work, check)
  return records


def training_suite(bench: Bench) -> list[dict]:
  c, shape = bench.config, bench.training_shape
  rng = np.random.default_rng(bench.seed)
  batch = {"input_ids": token_ids(rng, (shape["batch"], shape["context"]), c.vocab_size),
           "target_ids": token_ids(rng, (shape["batch"], shape["steps"]), c.vocab_size)}
  optimizer = trainer.make_optimizer("adafactor", learning_rate=1e-3)
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  shardings = partitioning.param_shardings(bench.params, c, mesh)
  step = trainer.make_train_step(c, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings,
                                 partitioning.opt_state_shardings(optimizer, bench.params, shardings, mesh), z_loss=0.0)
  # The step donates its state, so it trains a copy; the other suites keep the original weights.
  params = jax.device_put(jax.tree.map(np.array, bench.params), shardings)
  state = {"params": params, "opt": optimizer.init(params), "step": 0}
  global_batch = partitioning.global_batch(batch, mesh)

  def ours():
    state["params"], state["opt"], metrics = step(state["params"], state["opt"], global_batch, state["step"])
    state["step"] += 1
    return float(metrics["loss"])

  tokens = shape["batch"] * (shape["context"] + shape["steps"])
  flops = model_flops.training_flops(c, shape["batch"], shape["context"], shape["steps"])
  runners = {"train_step": ours}
  work = {"train_step": dict(items=tokens, engine="jax", flops=flops)}
  if bench.hf_model is not None:
    runners["hf_t5"] = bench_hf.trainer(copy.deepcopy(bench.hf_model), batch["input_ids"], batch["target_ids"],
                                        device=bench.torch_device, autocast_dtype=bench.torch_dtype)
    work["hf_t5"] = dict(items=tokens, engine="torch", flops=flops)
  tolerance = SCORE_TOLERANCE if c.dtype == "float32" else 0.1

  def check(first):
    if "hf_t5" not in first:
      return {"first_loss": first["train_step"]}
    return _require({"first_loss_abs_diff": abs(first["train_step"] - first["hf_t5"])}, tolerance, "losses differ")

  return bench.measure("training", "cross_entropy_adafactor", shape, "tokens/s (input+target)", runners, work,
                       check)


def generation_suite(bench: Bench) -> list[dict]:
  c, shape = bench.config, bench.generation_shape
  rng = np.random.default_rng(bench.seed)
  input_ids = token_ids(rng, (shape["batch"], shape["context"]), c.vocab_size)
  new_tokens = shape["new_tokens"]
  key = jax.random.PRNGKey(bench.seed)

  def ours(greedy=False):
    return lambda: np.asarray(decoding.sample(c, bench.params, input_ids, key, max_length=new_tokens,
                                              top_p=0.95, greedy=greedy))[:, 0]

  items = shape["batch"] * new_tokens
  flops = model_flops.generation_flops(c, shape["batch"], shape["context"], new_tokens)
  runners = {"sample": ours()}
  work = {"sample": dict(items=items, engine="jax", flops=flops)}
  if bench.hf_model is not None:
    runners["hf_t5"] = bench_hf.sampler(bench.hf_model, input_ids, new_tokens=new_tokens, top_p=0.95,
                                        device=bench.torch_device)
    work["hf_t5"] = dict(items=items, engine="torch", flops=flops)

  def check(first):
    # Sampled tokens depend on each library's random numbers; greedy decoding must match.
    del first
    if bench.hf_model is None:
      return {}
    theirs = bench_hf.sampler(bench.hf_model, input_ids, new_tokens=new_tokens, greedy=True,
                              device=bench.torch_device)()
    return {"greedy_token_match": float(np.mean(ours(greedy=True)() == theirs))}

  return bench.measure("generation", "nucleus_top_p_0.95", shape, "tokens/s", runners, work, check)


# A fresh interpreter each: what a user waits for before the first task is usable.
IMPORT_PROGRAMS = {"import_seqio": "import seqio", "import_t5_tasks": "import t5_tasks"}


def import_suite(bench: Bench) -> list[dict]:
  """Cold-start time of `import t5_tasks` (registers every task and mixture) beside `import seqio`."""
  if importlib.util.find_spec("seqio") is None:  # the GPU machine has no seqio or TensorFlow
    print("import: skipped, seqio is not installed here", file=sys.stderr)
    return []
  def runner(statement):
    return lambda: subprocess.run([sys.executable, "-c", statement], cwd=PROJECT_ROOT, check=True,
                                  capture_output=True)
  load_start = bench_timing.load_average()
  timings = bench_timing.interleaved({name: runner(s) for name, s in IMPORT_PROGRAMS.items()}, bench.reps,
                                     warmup=0)
  meta = dict(bench.meta, suite="import", case="cold_start", unit="s", load_start=load_start,
              load_end=bench_timing.load_average())
  return bench_report.duration_records(meta, timings)


SUITE_FUNCTIONS = {"scoring": scoring_suite, "training": training_suite, "generation": generation_suite,
                   "import": import_suite, "profile": lambda bench: bench_profile.profile_suite(bench, token_ids, bench_hf),
                   "evaluation": bench_evaluation.evaluation_suite}


def make_bench(model: str, device: str, dtype: str, reps: int, seed: int, directory) -> Bench:
  """Builds the Hugging Face twin of `model` (where installed), imports its weights, and sets both
  engines' threads; without Hugging Face, the weights are a random initialisation."""
  threads = bench_timing.compute_threads()
  torch_device = "cuda" if device == "gpu" else "cpu"
  if bench_hf is None:
    print(f"hf_t5: skipped, torch or transformers is not installed here ({HF_MISSING})", file=sys.stderr)
    config = model_config(model).replace(dropout_rate=0.0)
    params, hf_model = network.init_params(config, jax.random.PRNGKey(seed)), None
  else:
    torch.set_num_threads(threads)
    hf_model = bench_hf.make_twin(model_config(model), directory, seed)
    config, params = checkpoint_import.load_hf_t5(directory)
    config = config.replace(dropout_rate=0.0)
  config = config.replace(dtype=dtype)
  if hf_model is not None and dtype == "bfloat16":
    hf_model = hf_model.to(torch_device, torch.bfloat16)
  elif hf_model is not None:
    hf_model = hf_model.to(torch_device)
  meta = dict(model=model, device=device, accelerator=str(jax.devices()[0].device_kind), dtype=config.dtype,
              threads=threads, jax=jax.__version__, torch=getattr(torch, "__version__", None),
              xla_flags=os.environ.get("XLA_FLAGS", ""))
  return Bench(config, jax.device_put(params), hf_model, torch_device, reps, seed, meta)


def run(model="small", suites=DEFAULT_SUITES, reps=7, device="cpu", dtype=None, seed=0, quick=False) -> list[dict]:
  """Runs the suites and returns their records (see scripts/bench/report.py); `quick`: QUICK_REPS
  repetitions of QUICK_SHAPES, to check that everything runs."""
  unknown = set(suites) - set(SUITES)
  if unknown:
    raise ValueError(f"unknown suite(s) {sorted(unknown)}; expected some of {SUITES}")
  dtype = dtype or ("bfloat16" if device == "gpu" else "float32")
  with tempfile.TemporaryDirectory() as directory:
    bench = make_bench(model, device, dtype, QUICK_REPS if quick else reps, seed, directory)
    if quick:
      bench = dataclasses.replace(bench, **QUICK_SHAPES)
    print(f"{bench.meta['accelerator']}, {dtype}, {bench.reps} repetitions (load {os.getloadavg()[0]:.2f})",
          file=sys.stderr)
    records = []
    for suite in suites:
      records += SUITE_FUNCTIONS[suite](bench)
      print(f"{suite}: done (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
  return records


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()  # JAX logs each backend it probes at INFO; the run prints its own lines
  # Chosen before any backend starts: a GPU run must not fall back to the CPU silently.
  if _DEVICE.value != "auto":
    jax.config.update("jax_platforms", "cuda" if _DEVICE.value == "gpu" else "cpu")
  host_memory.reuse_freed_memory()  # as training and evaluation run (runner/host_memory.py)
  device = "gpu" if jax.default_backend() == "gpu" else "cpu"
  records = run(_MODEL.value, _SUITES.value, _REPS.value, device, _DTYPE.value, _SEED.value, _QUICK.value)
  print(bench_report.table(records))
  if _JSON.value:
    bench_report.write_json_lines(_JSON.value, records)
    print(f"wrote {len(records)} records to {_JSON.value}")


if __name__ == "__main__":
  console.run(main)
