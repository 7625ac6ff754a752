r"""Benchmarks our scoring, training and sampling side by side with the naive path and Hugging Face T5.

  python -m scripts.benchmark --model small --json bench.jsonl
  python -m scripts.benchmark --model tiny --reps 1 --suites scoring --device cpu

Protocol (ENGINEERING.md §5): all implementations run in one process on the same weights (a random
T5.1.1 twin saved by transformers and imported with models.checkpoint_import), agreement is checked
first, then runs are interleaved A B A B with the matmul probes that give each engine's ceiling;
medians are reported, compile time (first call minus median) separately.
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
import torch
from absl import app
from absl import flags

from models import checkpoint_import, decoding, scoring
from runner import partitioning, trainer
from scripts import bench_flops, bench_hf, bench_report, bench_timing

_MODEL = flags.DEFINE_enum("model", "small", ["tiny", "small", "base", "large"], "T5.1.1 size (gin/models/t5_1_1).")
_SUITES = flags.DEFINE_list("suites", "scoring,training,generation,import", "Suites to run.")
_REPS = flags.DEFINE_integer("reps", 5, "Timed repetitions per implementation, after one warm-up.")
_JSON = flags.DEFINE_string("json", None, "Write one JSON object per measurement to this file.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "cpu: float32; gpu: bfloat16 activations.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the weights and the batches.")
_QUICK = flags.DEFINE_bool("quick", False, "A smoke run: one repetition and the first scoring case "
                           "(the numbers mean nothing; the code paths all run).")

SUITES = ("scoring", "training", "generation", "import")
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
SCORE_TOLERANCE = 1e-3


def model_config(name: str):
  """The T5Config bound by gin/models/t5_1_1/<name>.gin."""

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
  config: object  # T5Config of the timed runs (bfloat16 activations on a GPU)
  params: object
  hf_model: object
  torch_device: str
  reps: int
  seed: int
  meta: dict
  scoring_cases: tuple = SCORING_CASES

  @property
  def on_gpu(self):
    return self.torch_device != "cpu"

  def matmul_runners(self):
    size, dtype = (8192, "bfloat16") if self.on_gpu else (2048, "float32")
    jax_run, flops = bench_timing.jax_matmul_runner(size, dtype)
    torch_run, _ = bench_timing.torch_matmul_runner(size, dtype, self.torch_device)
    return {"jax_matmul": jax_run, "torch_matmul": torch_run}, {"jax_matmul": flops, "torch_matmul": flops}

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
        "hf_t5": bench_hf.scorer(bench.hf_model, input_ids, candidate_ids, device=bench.torch_device),
    }
    shape_args = (c, case.batch, case.context, case.candidates, case.steps)
    work = {
        "score_candidates": dict(items=rows, engine="jax", flops=bench_flops.shared_scoring_flops(*shape_args)),
        "score_pairs": dict(items=rows, engine="jax", flops=bench_flops.pair_scoring_flops(*shape_args)),
        "hf_t5": dict(items=rows, engine="torch", flops=bench_flops.pair_scoring_flops(*shape_args)),
    }
    tolerance = SCORE_TOLERANCE if c.dtype == "float32" else 0.1

    def check(first):
      ours = first["score_candidates"]
      return _require({"max_abs_diff_vs_score_pairs": _max_abs_diff(ours, first["score_pairs"]),
                       "max_abs_diff_vs_hf_t5": _max_abs_diff(ours, first["hf_t5"])}, tolerance, "scores differ")

    shape = dict(batch=case.batch, context=case.context, candidates=case.candidates, candidate_len=case.steps,
                 mean_candidate_tokens=float(np.mean(lengths)))
    records += bench.measure("scoring", case.name, shape, "candidates/s", runners, work, check)
  return records


def training_suite(bench: Bench) -> list[dict]:


  c, shape = bench.config, TRAINING_SHAPE
  rng = np.random.default_rng(bench.seed)
  batch = {"input_ids": token_ids(rng, (shape["batch"], shape["context"]), c.vocab_size),
           "target_ids": token_ids(rng, (shape["batch"], shape["steps"]), c.vocab_size)}
  optimizer = trainer.make_optimizer("adafactor", learning_rate=1e-3)
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  shardings = partitioning.param_shardings(bench.params, c, mesh)
  step = trainer.make_train_step(c, optimizer, mesh, shardings,
                                 partitioning.opt_state_shardings(optimizer, bench.params, shardings, mesh), z_loss=0.0)
  # The step donates its state, so it trains a copy; the other suites keep the original weights.
  params = jax.device_put(jax.tree.map(np.array, bench.params), shardings)
  state = {"params": params, "opt": optimizer.init(params), "step": 0}
  global_batch = partitioning.global_batch(batch, mesh)

  def ours():
    state["params"], state["opt"], metrics = step(state["params"], state["opt"], global_batch, state["step"])
    state["step"] += 1
    return float(metrics["loss"])

  hf_train = bench_hf.trainer(copy.deepcopy(bench.hf_model), batch["input_ids"], batch["target_ids"],
                              device=bench.torch_device, autocast_dtype=torch.bfloat16 if bench.on_gpu else None)
  tokens = shape["batch"] * (shape["context"] + shape["steps"])
  flops = bench_flops.training_flops(c, shape["batch"], shape["context"], shape["steps"])
  work = {"train_step": dict(items=tokens, engine="jax", flops=flops),
          "hf_t5": dict(items=tokens, engine="torch", flops=flops)}
  tolerance = SCORE_TOLERANCE if c.dtype == "float32" else 0.1

  def check(first):
    return _require({"first_loss_abs_diff": abs(first["train_step"] - first["hf_t5"])}, tolerance, "losses differ")

  return bench.measure("training", "cross_entropy_adafactor", shape, "tokens/s (input+target)",
                       {"train_step": ours, "hf_t5": hf_train}, work, check)


def generation_suite(bench: Bench) -> list[dict]:

  c, shape = bench.config, GENERATION_SHAPE
  rng = np.random.default_rng(bench.seed)
  input_ids = token_ids(rng, (shape["batch"], shape["context"]), c.vocab_size)
  new_tokens = shape["new_tokens"]
  key = jax.random.PRNGKey(bench.seed)

  def ours(greedy=False):
    return lambda: np.asarray(decoding.sample(c, bench.params, input_ids, key, max_length=new_tokens,
                                              top_p=0.95, greedy=greedy))[:, 0]

  greedy = {"sample": ours(greedy=True),
            "hf_t5": bench_hf.sampler(bench.hf_model, input_ids, new_tokens=new_tokens, greedy=True,
                                      device=bench.torch_device)}
  items = shape["batch"] * new_tokens
  flops = bench_flops.generation_flops(c, shape["batch"], shape["context"], new_tokens)
  work = {"sample": dict(items=items, engine="jax", flops=flops),
          "hf_t5": dict(items=items, engine="torch", flops=flops)}

  def check(first):
    # Sampled tokens depend on each library's random numbers; greedy decoding must match.
    del first
    return {"greedy_token_match": float(np.mean(greedy["sample"]() == greedy["hf_t5"]()))}

  runners = {"sample": ours(),
             "hf_t5": bench_hf.sampler(bench.hf_model, input_ids, new_tokens=new_tokens, top_p=0.95,
                                       device=bench.torch_device)}
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
  timings = bench_timing.interleaved({name: runner(s) for name, s in IMPORT_PROGRAMS.items()}, bench.reps,
                                     warmup=0)
  meta = dict(bench.meta, suite="import", case="cold_start", unit="s", load_end=bench_timing.load_average())
  return bench_report.duration_records(meta, timings)


SUITE_FUNCTIONS = {"scoring": scoring_suite, "training": training_suite, "generation": generation_suite,
                   "import": import_suite}


def make_bench(model: str, device: str, reps: int, seed: int, directory) -> Bench:
  """Builds the Hugging Face twin of `model`, imports its weights, and sets both engines' threads."""

  threads = bench_timing.compute_threads()
  torch.set_num_threads(threads)
  torch_device = "cuda" if device == "gpu" else "cpu"
  hf_model = bench_hf.make_twin(model_config(model), directory, seed)
  config, params = checkpoint_import.load_hf_t5(directory)
  config = config.replace(dropout_rate=0.0)
  if device == "gpu":
    config = config.replace(dtype="bfloat16")
    hf_model = hf_model.to(torch_device, torch.bfloat16)
  meta = dict(model=model, device=device, accelerator=str(jax.devices()[0].device_kind), dtype=config.dtype,
              threads=threads, jax=jax.__version__, torch=torch.__version__,
              xla_flags=os.environ.get("XLA_FLAGS", ""))
  return Bench(config, jax.device_put(params), hf_model, torch_device, reps, seed, meta)


def run(model="small", suites=SUITES, reps=5, device="cpu", seed=0, quick=False) -> list[dict]:
  """Runs the suites and returns their records (see scripts/bench_report.py); `quick`: one
  repetition of the first scoring case only, to check that everything runs."""
  unknown = set(suites) - set(SUITES)
  if unknown:
    raise ValueError(f"unknown suite(s) {sorted(unknown)}; expected some of {SUITES}")
  with tempfile.TemporaryDirectory() as directory:
    bench = make_bench(model, device, 1 if quick else reps, seed, directory)
    if quick:
      bench = dataclasses.replace(bench, scoring_cases=SCORING_CASES[:1])
    records = []
    for suite in suites:
      records += SUITE_FUNCTIONS[suite](bench)
      print(f"{suite}: done (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
  return records


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # Chosen before any backend starts: a GPU run must not fall back to the CPU silently.
  jax.config.update("jax_platforms", "cuda" if _DEVICE.value == "gpu" else "cpu")
  records = run(_MODEL.value, _SUITES.value, _REPS.value, _DEVICE.value, _SEED.value, _QUICK.value)
  print(bench_report.table(records))
  if _JSON.value:
    bench_report.write_json_lines(_JSON.value, records)
    print(f"wrote {len(records)} records to {_JSON.value}")


if __name__ == "__main__":
  app.run(main)
