"""Where the time of a training step and of generation goes, phase by phase, beside Hugging Face's.

  python -m scripts.benchmark --model small --suites profile --json profile.jsonl

Each phase is its own jitted function (or torch call), all of them interleaved in one
`bench_timing.interleaved` run (A B C ... A B C ...), so that load from other processes falls on
every phase alike. Phases that cannot run alone are differences of two that can, taken repetition
by repetition (backward = value_and_grad - forward); their min-max is that of the differences.
XLA's own cost analysis (FLOPs, bytes accessed, temporaries) and a count of the optimized HLO's
telling ops (converts, transposes, copies, dots over the vocabulary) come with each JAX phase.
"""
import collections
import functools
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from models import decoding, network
from models.network import Transformer
from runner import partitioning, trainer
from scripts.bench import report as bench_report
from scripts.bench import timing as bench_timing

Z_LOSS = 1e-4  # t5x's default, for the z-loss share


def hlo_summary(compiled, vocab_size: int) -> dict:
  """Counts of the optimized HLO ops that tell where time goes, and XLA's cost and memory estimates."""
  text = compiled.as_text()
  ops = collections.Counter(re.findall(r"= \S+ (convert|transpose|copy|dot|dynamic-update-slice|scatter|gather|"
                                       r"while|sort|reduce|fusion)\(", text))
  # A dot whose output or operand has the vocabulary as a dimension: the logits, their gradient,
  # or (the thing to look for) a one-hot matmul.
  vocab_dots = len(re.findall(rf"= f32\[[^\]]*\b{vocab_size}\b[^\]]*\][^=]*? dot\(|dot\([^)]*\b{vocab_size}\b", text))
  cost = compiled.cost_analysis() or {}
  cost = cost[0] if isinstance(cost, list) else cost
  memory = compiled.memory_analysis()
  return dict(hlo_ops=dict(ops), vocab_dots=vocab_dots, xla_flops=float(cost.get("flops", 0.0)),
              xla_bytes_accessed=float(cost.get("bytes accessed", 0.0)),
              temp_bytes=int(getattr(memory, "temp_size_in_bytes", 0)))


def _jitted(fn, *args, vocab_size, **jit_kwargs):
  """(runner, HLO summary) of fn(*args) compiled once; the runner blocks on its result."""
  compiled = jax.jit(fn, **jit_kwargs).lower(*args).compile()
  return (lambda: jax.block_until_ready(compiled(*args))), hlo_summary(compiled, vocab_size)


def _ce_loss(config, z_loss):
  def loss(params, batch):
    total, units, _ = trainer.OBJECTIVES["cross_entropy"].loss_sums(config, params, batch, None, z_loss)
    return total / units
  return loss


def training_phases(bench, batch):
  """Runners and HLO summaries of the training step's phases (JAX) at `batch`."""
  c = bench.config
  params = bench.params
  optimizer = trainer.make_optimizer("adafactor", learning_rate=1e-3)
  grad = lambda z: jax.value_and_grad(_ce_loss(c, z))
  runners, info = {}, {}
  vocab = dict(vocab_size=c.vocab_size)
  runners["jax/forward"], info["jax/forward"] = _jitted(_ce_loss(c, 0.0), params, batch, **vocab)
  runners["jax/forward_backward"], info["jax/forward_backward"] = _jitted(grad(0.0), params, batch, **vocab)
  runners["jax/forward_backward_zloss"], info["jax/forward_backward_zloss"] = _jitted(grad(Z_LOSS), params, batch,
                                                                                     **vocab)
  _, grads = jax.jit(grad(0.0))(params, batch)
  opt_state = optimizer.init(params)

  def update(grads, opt_state, params):
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state
  runners["jax/optimizer"], info["jax/optimizer"] = _jitted(update, grads, opt_state, params, **vocab)

  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  shardings = partitioning.param_shardings(params, c, mesh)
  opt_shardings = partitioning.opt_state_shardings(optimizer, params, shardings, mesh)
  global_batch = partitioning.global_batch(batch, mesh)
  for name, accumulation in [("jax/train_step", 1), ("jax/train_step_accumulate_2", 2)]:
    step = trainer.make_train_step(c, optimizer, partitioning.Partitioner.for_mesh(mesh), shardings, opt_shardings, z_loss=0.0,
                                   accumulation_steps=accumulation)
    # The step donates its state, so each trains its own copy.
    state = {"params": jax.device_put(jax.tree.map(np.array, params), shardings)}
    state["opt"] = optimizer.init(state["params"])
    compiled = step.lower(state["params"], state["opt"], global_batch, jnp.int32(0)).compile()
    info[name] = hlo_summary(compiled, c.vocab_size)

    def run(compiled=compiled, state=state):
      state["params"], state["opt"], metrics = compiled(state["params"], state["opt"], global_batch, jnp.int32(0))
      return float(metrics["loss"])
    runners[name] = run
  return runners, info


def generation_phases(bench, input_ids, new_tokens, top_p=0.95):
  """Runners and HLO summaries of generation's phases (JAX): encoding, one decoding step, the whole call."""
  c, params = bench.config, bench.params
  model = Transformer(c)
  vocab = dict(vocab_size=c.vocab_size)
  rows = input_ids.shape[0]
  key = jax.random.PRNGKey(bench.seed)

  def encode(params, input_ids):
    encoded = model.apply({"params": params}, input_ids, method=Transformer.encode)
    return model.apply({"params": params}, encoded, method=Transformer.cross_kv)

  cross_kvs = jax.jit(encode)(params, input_ids)
  cache = network.init_cache(c, rows, new_tokens)
  token = jnp.ones((rows,), jnp.int32)
  position = jnp.int32(new_tokens // 2)

  def logits_step(params, cross_kvs, cache, token, position):
    return model.apply({"params": params}, cross_kvs, input_ids > 0, token[:, None], cache, position,
                       method=Transformer.decode_step)

  def sampling_step(params, cross_kvs, cache, token, position):
    logits, cache = logits_step(params, cross_kvs, cache, token, position)
    return decoding.choose_tokens(logits, key, temperature=1.0, top_p=top_p, greedy=False), cache

  def nucleus(logits):
    return decoding.choose_tokens(logits, key, temperature=1.0, top_p=top_p, greedy=False)

  logits, _ = jax.jit(logits_step)(params, cross_kvs, cache, token, position)
  runners, info = {}, {}
  runners["jax/encode"], info["jax/encode"] = _jitted(encode, params, input_ids, **vocab)
  step_args = (params, cross_kvs, cache, token, position)
  runners["jax/decode_step_logits"], info["jax/decode_step_logits"] = _jitted(logits_step, *step_args, **vocab)
  runners["jax/decode_step"], info["jax/decode_step"] = _jitted(sampling_step, *step_args, **vocab)
  runners["jax/nucleus_sampling"], info["jax/nucleus_sampling"] = _jitted(nucleus, logits, **vocab)
  for name, length in [("jax/generate", new_tokens), ("jax/generate_1", 1)]:
    generate = functools.partial(decoding.sample, c, max_length=length, top_p=top_p)
    runners[name], info[name] = _jitted(generate, params, input_ids, key, **vocab)
  return runners, info


# Phases that are differences of measured ones, repetition by repetition: name -> (plus, minus, divisor).
def _derived(new_tokens):
  per_token = max(new_tokens - 1, 1)
  return {
      "training": {
          "jax/backward": ("jax/forward_backward", "jax/forward", 1),
          "jax/z_loss_share": ("jax/forward_backward_zloss", "jax/forward_backward", 1),
          "jax/step_rest (casts, metrics, norms)": ("jax/train_step", ("jax/forward_backward", "jax/optimizer"), 1),
          "jax/accumulation_overhead": ("jax/train_step_accumulate_2", "jax/train_step", 1),
          "hf/backward": ("hf/forward_backward", "hf/forward", 1),
          "hf/step_rest": ("hf/train_step", ("hf/forward_backward", "hf/optimizer"), 1),
      },
      "generation": {
          "jax/sampling_share_of_step": ("jax/decode_step", "jax/decode_step_logits", 1),
          "jax/per_token (generate - generate_1) / (n - 1)": ("jax/generate", "jax/generate_1", per_token),
          "hf/per_token (generate - generate_1) / (n - 1)": ("hf/generate", "hf/generate_1", per_token),
      },
  }


def _differences(times, plus, minus, divisor):
  minus = (minus,) if isinstance(minus, str) else minus
  if plus not in times or any(m not in times for m in minus):
    return None
  return [(p - sum(times[m][i] for m in minus)) / divisor for i, p in enumerate(times[plus])]


def _ms_stats(values):
  """Median and min-max in milliseconds (a difference may be negative: no relative spread)."""
  ms = [1e3 * v for v in values]
  return dict(median=float(np.median(ms)), min=min(ms), max=max(ms), reps=ms)


def phase_records(meta, case, timings, info, derived):
  """One record per phase: its milliseconds (median, min-max), and for JAX phases XLA's estimates."""
  times = {name: t.times_s for name, t in timings.items()}
  records = []
  for name, timing in timings.items():
    records.append(dict(meta, case=case, impl=name, median_s=timing.median_s, times_s=timing.times_s,
                        first_call_s=timing.first_call_s, phase_ms=_ms_stats(timing.times_s), derived=False,
                        **info.get(name, {})))
  for name, (plus, minus, divisor) in derived.items():
    values = _differences(times, plus, minus, divisor)
    if values is not None:
      records.append(dict(meta, case=case, impl=name, times_s=values, phase_ms=_ms_stats(values), derived=True,
                          of=[plus, minus, divisor]))
  return records


def ratio_record(meta, case, timings, ours, theirs):
  """How many times faster `ours` is than `theirs`, per interleaved repetition."""
  if ours not in timings or theirs not in timings:
    return []
  values = [b / a for a, b in zip(timings[ours].times_s, timings[theirs].times_s)]
  return [dict(meta, case=case, impl=f"{ours} vs {theirs}", speedup=bench_report.spread(values))]


def table(records) -> str:
  """The phases as a table: milliseconds median [min-max], XLA's GFLOPs and MB accessed, HLO op counts."""
  lines = []
  for case in dict.fromkeys(r["case"] for r in records):
    rows = [r for r in records if r["case"] == case]
    lines.append(f"\n[profile / {case}] {rows[0]['shape']}  load {rows[0]['load_start']:.2f}->"
                 f"{rows[0]['load_end']:.2f}  {len(rows[0]['times_s'])} repetitions")
    lines.append(f"  {'phase':<48}{'ms median [min, max]':>30}{'XLA GF':>9}{'MB acc':>9}  HLO ops")
    for r in rows:
      if "phase_ms" not in r:
        continue
      s = r["phase_ms"]
      xla = (f"{r['xla_flops'] / 1e9:>9.2f}{r['xla_bytes_accessed'] / 1e6:>9.0f}  "
             + " ".join(f"{k}={v}" for k, v in sorted(r["hlo_ops"].items())) + f" vocab_dots={r['vocab_dots']}"
             if "xla_flops" in r else "")
      lines.append(f"  {r['impl']:<48}{_ms_range(s):>30}{xla}")
    for r in rows:
      if "speedup" in r:
        s = r["speedup"]
        lines.append(f"  speedup {r['impl']}: x{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}]")
  return "\n".join(lines)


def _ms_range(stats):
  return f"{stats['median']:.2f} [{stats['min']:.2f}, {stats['max']:.2f}]"


def profile_suite(bench, token_ids, hf) -> list[dict]:
  """The training and generation profiles on the benchmark's shapes and batches (scripts.benchmark's
  `profile` suite, which passes its `token_ids` and `bench_hf`, None where Hugging Face is missing)."""
  c, records = bench.config, []
  hf = hf if bench.hf_model is not None else None
  shape = bench.training_shape
  rng = np.random.default_rng(bench.seed)  # the training suite's batch
  batch = {"input_ids": token_ids(rng, (shape["batch"], shape["context"]), c.vocab_size),
           "target_ids": token_ids(rng, (shape["batch"], shape["steps"]), c.vocab_size)}
  runners, info = training_phases(bench, batch)
  if hf is not None:
    runners.update(hf.training_phases(bench.hf_model, batch["input_ids"], batch["target_ids"],
                                      device=bench.torch_device))
  records += _measure(bench, "training", shape, runners, info, _derived(0)["training"],
                      [("jax/train_step", "hf/train_step"), ("jax/forward", "hf/forward"),
                       ("jax/forward_backward", "hf/forward_backward"), ("jax/optimizer", "hf/optimizer")])
  shape = bench.generation_shape
  input_ids = token_ids(np.random.default_rng(bench.seed), (shape["batch"], shape["context"]),
                                  c.vocab_size)
  runners, info = generation_phases(bench, input_ids, shape["new_tokens"])
  if hf is not None:
    for name, length in [("hf/generate", shape["new_tokens"]), ("hf/generate_1", 1)]:
      runners[name] = hf.sampler(bench.hf_model, input_ids, new_tokens=length, top_p=0.95, device=bench.torch_device)
  records += _measure(bench, "generation", shape, runners, info, _derived(shape["new_tokens"])["generation"],
                      [("jax/generate", "hf/generate"), ("jax/generate_1", "hf/generate_1")])
  print(table(records))
  return records


def _measure(bench, case, shape, runners, info, derived, races):
  load_start = bench_timing.load_average()
  timings = bench_timing.interleaved(runners, bench.reps)
  meta = dict(bench.meta, suite="profile", shape=shape, load_start=load_start, load_end=bench_timing.load_average())
  records = phase_records(meta, case, timings, info, derived)
  for ours, theirs in races:
    records += ratio_record(meta, case, timings, ours, theirs)
  print(f"profile/{case}: done (load {meta['load_end']:.2f})", file=sys.stderr)
  return records

