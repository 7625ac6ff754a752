"""The `evaluation` suite of scripts/benchmark.py: offline evaluation end to end on the real files.

`runner.scoring_loop.score_task` scores the registered task that reads each real file (through seqio,
bytes vocabulary, random weights of the benchmark's model), items batched by length
(`bucketed`) and in the task's order (`in_order`), interleaved with the scoring kernel: the same
jitted score function on device arrays made beforehand, of batch-size items whose context and
candidates have the real items' mean lengths (no padding; each item's candidates packed into one
row K x the mean candidate length wide, as evaluation packs them). Throughput is in real tokens (non-padding
input and candidate ids sent to the device), so `bucketed vs kernel` is end-to-end evaluation's
share of the kernel's rate on the same tokens; each record adds items/s and the padding share
(padded positions / all positions scored). The `timedial_items` case runs the bucketed evaluation
on 100, 400 and 1,446 TimeDial items (the 400 repeated under new ids) for items/s against the
item count, with the growth of the process's peak RSS during each count's first run (the counts
run smallest first, so a flat memory shows as no growth after the first).

`--evaluation_items=N` evaluates only the first N items of each file, in batches of N / 4 rows
(at most BATCH_SIZE: four batches, so that sorting by length has batches to form; one batch of all
N would pad every row to the longest) and leaves the item-count case out: each contender runs 9
times (compiling, warm-up, 7 repetitions), and at the small model on this 2-core CPU a batch of 8
rows takes 4-6 s (so 16 items of both files take about 8 minutes). The default is DEFAULT_ITEMS of the model;
capped cases are named `<file>_first<N>` and their records' shape holds `items`, `file_items` (the
whole file's) and `batch`, so that no one reads a prefix as the file. Padding shares and host
reading do not depend on the model: the uncapped tiny run measures them on the whole files.

Needs seqio (t5_tasks) and ../shared/data; without either the suite is skipped with a printed
reason, as on the GPU machine.
"""
import contextlib
import importlib.util
import io
import json
import os
import resource
import sys
import tempfile

import jax
import numpy as np
from absl import flags

from runner import data, outputs, partitioning, scorers, scoring_loop
from models import flops as model_flops
from scripts import console

SHARED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir, "shared", "data")
SPLIT = "test"
BATCH_SIZE = 32  # gin/runs/eval.gin's BATCH_SIZE
# case: (registered task, t5_tasks.tasks.data_files key, file under ../shared/data, feature lengths).
# Lengths in bytes (no SentencePiece model is bound, so t5_tasks tokenizes by bytes): TimeDial's as
# tests/runner/test_timedial_real.py, ASQ's gin/runs/eval.gin's.
REAL_FILES = {
    "timedial": ("timedial_cloze_full", "timedial", "timedial/test_first400.json", {"inputs": 512, "targets": 64}),
    "asq": ("asq_intent_cloze", "asq", "asq/asq_test_first1000.json", {"inputs": 512, "targets": 128}),
}
# Files a task reads beside its items: ASQ's annotated pair types (metadata, not scored).
ALSO_BOUND = {"asq": {"asq_annotations": {name: os.path.join(SHARED_DATA, "asq", f"annotation_{name}.json")
                                          for name in ("first", "second")}}}
ITEM_COUNTS = (100, 400, 1446)  # 1,446: the whole released TimeDial test set's size
# --quick: a few items of each file at short lengths (a smoke run; the numbers mean nothing).
QUICK = dict(items=24, batch_size=8, item_counts=(8, 16, 24), lengths={"inputs": 128, "targets": 32})
SCORE_TOLERANCE = {"float32": 1e-4, "bfloat16": 0.1}
# Items of each file the suite evaluates by default (None: all): for the small model, four batches
# of 4 that end within 10 minutes on this 2-core CPU; base and large get as few, which they overrun.
DEFAULT_ITEMS = {"tiny": None, "small": 16, "base": 16, "large": 16}

_ITEMS = flags.DEFINE_integer("evaluation_items", None, "evaluation suite: the first N items of each real file "
                              "(0: all; default DEFAULT_ITEMS of the model, in scripts/bench/evaluation.py).",
                              lower_bound=0)


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def _evaluation(task, lengths, batch_size, score_fn, params, mesh, bucket, rss_growth=None):
  """A runner: score_task over the whole task; returns (TaskStats, records). Its console lines
  are kept from the benchmark's output."""
  def run():
    collected, before = outputs.CollectedRecords(), _peak_rss_mb()
    with contextlib.redirect_stdout(io.StringIO()):
      stats = scoring_loop.score_task(task, SPLIT, lengths, batch_size, score_fn, params, collected, partitioner=partitioning.Partitioner.for_mesh(mesh),
                                  progress_every_s=float("inf"), bucket_by_length=bucket)
    if rss_growth is not None:
      rss_growth.append(_peak_rss_mb() - before)
    return stats, collected.in_order(stats.ids)
  return run


def _kernel(score_fn, params, mesh, batch_size, context, candidates, steps, seed):
  """A runner: score_fn on made device arrays of `batch_size` items, every position a real token."""
  rng = np.random.default_rng(seed)
  input_ids = rng.integers(3, 259, (batch_size, context)).astype(np.int32)
  candidate_ids = rng.integers(3, 259, (batch_size, candidates, steps)).astype(np.int32)
  input_ids[:, -1] = candidate_ids[..., -1] = 1  # EOS last, as the tasks end every sequence
  score_mask = np.ones(candidate_ids.shape, bool)
  packed = data.pack_candidates(candidate_ids, score_mask)  # K x steps wide: no padding
  arrays = partitioning.global_batch({"input_ids": input_ids, **packed}, mesh)
  lengths = {"tokens": score_mask.sum(-1), "scored_chars": score_mask.sum(-1), "scored_bytes": score_mask.sum(-1)}
  return lambda: score_fn(params, arrays, lengths)


def _flops(config, stats) -> int:
  return sum(count * model_flops.shared_scoring_flops(config, rows, length, 1, packed)  # one packed row per item
             for (rows, length, packed), count in stats.shapes.items())


def _files(directory, items: int | None) -> dict:
  """case -> (task, {data_files key: {split: path}}, items in the whole file): the real files or,
  with `items`, their first items."""
  out = {}
  for case, (task, key, name, _) in REAL_FILES.items():
    path = os.path.join(SHARED_DATA, name)
    file_items = _read_json(path)
    if items:
      path = _write_items(directory, f"{case}.json", file_items[:items])
    out[case] = (task, {key: {SPLIT: path}, **ALSO_BOUND.get(case, {})}, len(file_items))
  return out


def _read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _write_items(directory, name, items) -> str:
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(items, f)
  return path


def _repeated(items: list[dict], count: int) -> list[dict]:
  """`count` items: `items` over and over, each copy under new ids (TimeDial's ids are unique)."""
  return [dict(items[i % len(items)], id=items[i % len(items)]["id"] + (i // len(items)) * 100_000)
          for i in range(count)]


def _real_lengths(task, lengths) -> dict:
  """Items, candidates and non-padding ids of the task's items as evaluation cuts them (read on
  the host, not scored): what the kernel's shape and the real-token counts come from."""
  examples, _ = data.candidate_examples(task, SPLIT, lengths)
  out = dict(items=0, candidates=0, input_tokens=0, candidate_tokens=0)
  for example in examples:
    options = [min(len(option), lengths["targets"]) for option in data.candidate_rows(example["candidates"])]
    out["items"] += 1
    out["candidates"] += len(options)
    out["input_tokens"] += min(len(example["inputs"]), lengths["inputs"])
    out["candidate_tokens"] += sum(options)
  return out


def _real_file_case(bench, case, task, lengths, batch_size, score_fn, mesh, file_items) -> list[dict]:
  c = bench.config
  real = _real_lengths(task, lengths)
  items, real_tokens = real["items"], real["input_tokens"] + real["candidate_tokens"]
  mean_context, mean_steps = real["input_tokens"] / items, real["candidate_tokens"] / real["candidates"]
  candidates = round(real["candidates"] / items)
  context, steps = max(round(mean_context), 1), max(round(mean_steps), 1)
  kernel_tokens = batch_size * (context + candidates * steps)
  runners = {"bucketed": _evaluation(task, lengths, batch_size, score_fn, bench.params, mesh, True),
             "in_order": _evaluation(task, lengths, batch_size, score_fn, bench.params, mesh, False),
             "kernel": _kernel(score_fn, bench.params, mesh, batch_size, context, candidates, steps, bench.seed)}
  work = {"bucketed": dict(items=real_tokens, engine="jax", flops=0),  # FLOPs: the shapes of its first run
          "in_order": dict(items=real_tokens, engine="jax", flops=0),
          "kernel": dict(items=kernel_tokens, engine="jax",
                         flops=model_flops.shared_scoring_flops(c, batch_size, context, candidates, steps))}
  shape = dict(items=items, file_items=file_items, batch=batch_size, lengths=lengths, mean_context=round(mean_context, 1),
               candidates=candidates, mean_candidate=round(mean_steps, 1))
  stats = {}

  def check(results):
    (bucketed, by_bucket), (in_order, by_order) = results["bucketed"], results["in_order"]
    if [r["id"] for r in by_bucket] != [r["id"] for r in by_order]:
      raise AssertionError(f"evaluation / {case}: bucketed and in-order evaluations wrote other items or orders")
    difference = max(abs(a - b) for x, y in zip(by_bucket, by_order) for a, b in zip(x["scores"], y["scores"]))
    if difference > SCORE_TOLERANCE[c.dtype]:
      raise AssertionError(f"evaluation / {case}: scores differ by {difference:.3g} with and without bucketing")
    for name, task_stats in (("bucketed", bucketed), ("in_order", in_order)):
      if task_stats.real_tokens != real_tokens:
        raise AssertionError(f"evaluation / {case} {name}: sent {task_stats.real_tokens} real tokens, the items "
                             f"hold {real_tokens}")
      stats[name] = task_stats
      work[name]["flops"] = _flops(c, task_stats)
      print(f"evaluation / {case} {name}, first run (compiling): {task_stats.line()}", file=sys.stderr)
    shape.update(padding_bucketed=round(bucketed.padding_share, 4), padding_in_order=round(in_order.padding_share, 4),
                 shapes_bucketed=len(bucketed.shapes), shapes_in_order=len(in_order.shapes))
    return {"max_abs_diff_bucketed_vs_in_order": difference}

  records = bench.measure("evaluation", case, shape, "real tokens/s", runners, work, check)
  for record in records:
    if record["impl"] in stats:
      task_stats = stats[record["impl"]]
      record.update(items=items, items_per_s=items / record["median_s"], padding_share=task_stats.padding_share,
                    real_tokens=real_tokens, positions=task_stats.positions, batch_shapes=len(task_stats.shapes))
    elif record["impl"] == "kernel":
      record.update(items=batch_size, items_per_s=batch_size / record["median_s"], padding_share=0.0,
                    real_tokens=kernel_tokens, positions=kernel_tokens)
  return records


def _item_count_case(bench, directory, counts, batch_size, lengths, score_fn, mesh) -> list[dict]:
  import gin  # pylint: disable=import-outside-toplevel
  task, key, name, _ = REAL_FILES["timedial"]
  items = _read_json(os.path.join(SHARED_DATA, name))
  growth = {count: [] for count in counts}
  runners, work, stats_of = {}, {}, {}
  tasks = {}
  for count in counts:
    path = _write_items(directory, f"timedial_{count}.json", _repeated(items, count))
    tasks[count] = {key: {SPLIT: path}}

  def runner(count):
    run = _evaluation(task, lengths, batch_size, score_fn, bench.params, mesh, True, growth[count])
    def bound():
      gin.bind_parameter("t5_tasks.tasks.data_files.files", tasks[count])
      return run()
    return bound

  for count in counts:
    runners[f"items_{count}"] = runner(count)
  shape = dict(item_counts=list(counts), batch=batch_size, lengths=lengths)

  def check(results):
    for impl, (stats, records) in ((impl, results[impl]) for impl in runners):
      stats_of[impl] = stats
      work[impl]["flops"] = _flops(bench.config, stats)
      if len(records) != int(impl.split("_")[1]):
        raise AssertionError(f"evaluation / timedial_items: {impl} wrote {len(records)} items")
    shape.update(peak_rss_growth_mb={impl: round(growth[int(impl.split("_")[1])][0], 1) for impl in runners})
    return {}

  for count in counts:
    work[f"items_{count}"] = dict(items=count, engine="jax", flops=0)
  records = bench.measure("evaluation", "timedial_items", shape, "items/s", runners, work, check)
  for record in records:
    if record["impl"] in stats_of:
      stats = stats_of[record["impl"]]
      count = int(record["impl"].split("_")[1])
      record.update(items=count, items_per_s=count / record["median_s"], padding_share=stats.padding_share,
                    real_tokens=stats.real_tokens, peak_rss_growth_mb=growth[count][0], peak_rss_mb=_peak_rss_mb())
  return records


def evaluation_suite(bench, quick: bool | None = None, items: int | None = None) -> list[dict]:
  """The suite (see the module docstring); skipped with a printed reason without seqio or the data.
  `quick`: QUICK's few items at short lengths (None: as the benchmark's --quick). `items`: the
  first that many items of each file, 0 all (None: --evaluation_items, else DEFAULT_ITEMS)."""
  if importlib.util.find_spec("seqio") is None:  # the GPU machine has no seqio or TensorFlow
    print("evaluation: skipped, seqio is not installed here", file=sys.stderr)
    return []
  if not os.path.isdir(SHARED_DATA):
    print(f"evaluation: skipped, the real data is not at {os.path.abspath(SHARED_DATA)}", file=sys.stderr)
    return []
  import gin  # pylint: disable=import-outside-toplevel
  import t5_tasks  # pylint: disable=import-outside-toplevel,unused-import  # registers the tasks
  console.quiet_libraries()  # seqio logs each dataset it builds at INFO
  if quick is None:  # benchmark.run sets matmul_size only with --quick (its QUICK_SHAPES)
    quick = bench.matmul_size is not None
  batch_size = QUICK["batch_size"] if quick else BATCH_SIZE
  counts = QUICK["item_counts"] if quick else ITEM_COUNTS
  if quick:
    items = QUICK["items"]
  else:
    if items is None:
      items = _ITEMS.value if flags.FLAGS.is_parsed() and _ITEMS.value is not None else DEFAULT_ITEMS.get(
          bench.meta.get("model"))
    if items:  # four batches or more: one batch of every item would pad each row to the longest
      batch_size, counts = max(1, min(batch_size, items // 4)), ()
      print(f"evaluation: the first {items} items of each file in batches of {batch_size} (--evaluation_items; "
            "0 for all); the item-count case is left out", file=sys.stderr)
  mesh = partitioning.create_mesh(1, 1, devices=jax.devices()[:1])
  score_fn = scorers.make_score_fn(bench.config, "likelihood", "token", partitioning.Partitioner.for_mesh(mesh))
  records = []
  with tempfile.TemporaryDirectory() as directory:
    try:
      for case, (task, files, file_items) in _files(directory, items).items():
        lengths = QUICK["lengths"] if quick else REAL_FILES[case][3]
        gin.clear_config()
        gin.bind_parameter("t5_tasks.tasks.data_files.files", files)
        name = case if quick or not items or items >= file_items else f"{case}_first{items}"
        records += _real_file_case(bench, name, task, lengths, batch_size, score_fn, mesh, file_items)
      gin.clear_config()
      lengths = QUICK["lengths"] if quick else REAL_FILES["timedial"][3]
      if counts:
        records += _item_count_case(bench, directory, counts, batch_size, lengths, score_fn, mesh)
    finally:
      gin.clear_config()
  return records
