"""Inference: advice generated with nucleus sampling, to JSON lines or through a Python callable.

With a reward model (`SamplingConfig.reward_checkpoint_path`), each input gets best-of-N: N samples, each
scored by the reward model, the best kept (Stiennon et al. 2020, §4.1 and appendix Table 10:
N samples at temperature 0.7 from the supervised policy, KL = log N − (N−1)/N); `infer` then
prints the KL and the mean reward of the chosen samples against that of all samples
(`best_of_n_summary`). gin/recipes/summarize_from_feedback/best_of_n.gin sets it up for TL;DR.

Inputs come either from a generation task (its seqio preprocessors build the model inputs) or
from a JSON lines file of situations (`title`, `selftext`, `subreddit`, optional `id` and
`created_utc`). Situations become text through `format_inputs`, a function handed in by the
scripts layer (runner cannot import t5_tasks): `scripts.generate.situation_formatter` wraps the
advice task's own formatting, so served and evaluated inputs look alike.
"""
import dataclasses
import json
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from models import decoding
from models.config import T5Config
from runner import checkpoints
from runner import configs
from runner import data
from runner import host_memory
from runner import model_inputs
from runner import partitioning
from runner.progress import Progress
import storage

SITUATION_FIELDS = ("title", "selftext", "subreddit")


def encode_inputs(vocabulary, texts: Sequence[str], input_length: int) -> np.ndarray:
  """[B, input_length] ids: each text encoded, cut to leave room for EOS, EOS appended (as seqio)."""
  ids = np.zeros((len(texts), input_length), np.int32)
  for row, text in enumerate(texts):
    tokens = list(vocabulary.encode(text))[:input_length - 1] + [vocabulary.eos_id]
    ids[row, :len(tokens)] = tokens
  return ids


def decode_tokens(vocabulary, tokens: np.ndarray) -> str:
  """Text of one sampled row: the tokens before the first EOS (or padding)."""
  tokens = [int(t) for t in tokens]
  for stop in (vocabulary.eos_id, 0):
    if stop in tokens:
      tokens = tokens[:tokens.index(stop)]
  return vocabulary.decode(tokens)


def generate(config: T5Config, params, vocabulary, input_ids: np.ndarray, rng, *, max_length: int,
             batch_size: int, partitioner: partitioning.Partitioner, num_samples: int = 1,
             top_p: float = 0.95, temperature: float = 1.0, reward_model: tuple[T5Config, dict] | None = None,
             should_stop: Callable[[], bool] = lambda: False) -> list[dict]:
  """Per row of input_ids [N, L]: `predictions` (num_samples texts), sampled in batches of batch_size.

  With `reward_model` (config, params) the row also gets `rewards` (one per sample), `best` (the
  index of the highest) and `kl` (of best-of-N from the sampling policy). A last batch shorter
  than batch_size is sampled at the fewest rows that hold it, a power of two of the mesh's row
  blocks (`data.batch_rows`): a served request for one situation takes one row, not batch_size
  (small model, batch_size 8, 32 tokens: 1.36 s -> 0.39 s). A row's random draws do not depend on
  the rows after it, so the texts are those of the padded batch. Batch i samples with
  fold_in(rng, i), so the output depends only on rng, batch_size and the rows' order. Sampling
  runs on the partitioner's mesh inside its rules. With several processes every one passes the
  same input_ids, places on its devices the rows they hold (`Partitioner.global_batch`) and gets
  every row back.
  `should_stop()` is asked before each batch; when it says so, the rows sampled so far are returned.
  """
  rows_out = []
  progress = Progress("generated", len(input_ids), "inputs")
  options = dict(max_length=max_length, top_p=top_p, temperature=temperature, eos_id=vocabulary.eos_id)
  row_multiple = partitioner.batch_blocks()
  with partitioner.activate():
    for index, first in enumerate(range(0, len(input_ids), batch_size)):
      if should_stop():
        break
      rows = input_ids[first:first + batch_size]
      padded = np.zeros((data.batch_rows(len(rows), batch_size, row_multiple, powers_of_two=True),
                         input_ids.shape[1]), np.int32)
      padded[:len(rows)] = rows
      batch = partitioner.global_batch({"input_ids": padded})["input_ids"]
      # numpy: the same value on every process, which jit replicates over the mesh.
      key = np.asarray(jax.random.fold_in(rng, index))
      if reward_model is None:
        out = {"samples": decoding.sample(config, params, batch, key, num_samples=num_samples, **options)}
      else:
        chosen = decoding.best_of_n(config, params, *reward_model, batch, key, n=num_samples, **options)
        out = {name: chosen[name] for name in ("samples", "rewards", "best")}
      # Every process gets the whole batch: the rows other processes fed live on their devices.
      out = multihost_utils.process_allgather(out, tiled=True)
      for row in range(len(rows)):
        record = {"predictions": [decode_tokens(vocabulary, sample) for sample in out["samples"][row]]}
        if reward_model is not None:
          record.update(rewards=[float(r) for r in out["rewards"][row]], best=int(out["best"][row]),
                        kl=decoding.best_of_n_kl(num_samples))
        rows_out.append(record)
      progress.advance(len(rows), int(np.count_nonzero(rows)))
      # The first batch's line shows that sampling runs (and what compiling cost), then every 10 s.
      if index == 0 or progress.seconds_since_report() >= 10 or len(rows_out) == len(input_ids):
        progress.report()
  return rows_out


def check_situation(situation, where: str) -> None:
  if not isinstance(situation, dict):
    raise ValueError(f"{where}: expected a JSON object, got {type(situation).__name__}")
  for field in SITUATION_FIELDS:
    if not isinstance(situation.get(field), str):
      raise ValueError(f"{where}: field '{field}': expected a string, got {situation.get(field)!r}")


def read_situations(path: str) -> list[dict]:
  """Situations of a JSON lines file; a bad line is an error naming file, line and field."""
  situations = []
  with storage.open_file(path) as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        situation = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{number}: invalid JSON ({e.msg})") from None
      check_situation(situation, f"{path}:{number}")
      situations.append(situation)
  return situations


def _load(checkpoint_path, model_config, reward_checkpoint_path, partitioner: partitioning.Partitioner,
          batch_size: int):
  """((config, params), reward model or None) on the partitioner's mesh (every process's devices)."""
  partitioner.check_batch_size(batch_size)
  model = checkpoints.load_params(checkpoint_path, model_config, partitioner)
  reward_model = (checkpoints.load_reward_model(reward_checkpoint_path, "REWARD_CHECKPOINT_PATH", partitioner)
                  if reward_checkpoint_path else None)
  return model, reward_model


def best_of_n_summary(records: Sequence[dict]) -> dict | None:
  """`n`, `kl` (of best-of-n from the sampling policy), `inputs`, and the mean reward of the
  chosen samples and of all samples, over records with rewards; None when there are none."""
  scored = [record for record in records if "rewards" in record]
  if not scored:
    return None
  n = len(scored[0]["rewards"])
  return {"n": n, "kl": decoding.best_of_n_kl(n), "inputs": len(scored),
          "mean_reward_chosen": float(np.mean([r["rewards"][r["best"]] for r in scored])),
          "mean_reward_all": float(np.mean([x for r in scored for x in r["rewards"]]))}


def _chosen(record: dict) -> str:
  return record["predictions"][record.get("best", 0)]


def load_generator(checkpoint_path: str, *, format_inputs: Callable[[dict], str], vocabulary,
                   model_config: T5Config | None = None, input_length: int = 512, max_length: int = 256,
                   batch_size: int = 8, sampling: configs.SamplingConfig | None = None,
                   partitioner: partitioning.Partitioner | None = None) -> Callable[[list[dict]], list[str]]:
  """A callable from situations (`title`, `selftext`, `subreddit`) to one advice text each.

  `format_inputs(situation) -> str` builds the model's input text; `vocabulary` (a seqio
  vocabulary) encodes it and decodes the samples. Call n samples with fold_in(PRNGKey(seed), n)
  (`sampling`, default `configs.SamplingConfig()`). With its reward model, each answer is the
  best of `num_samples`. `partitioner` None: `Partitioner()`.
  """
  sampling = configs.SamplingConfig() if sampling is None else sampling
  partitioner = partitioning.Partitioner() if partitioner is None else partitioner
  (config, params), reward_model = _load(checkpoint_path, model_config, sampling.reward_checkpoint_path,
                                         partitioner, batch_size)
  rng = jax.random.PRNGKey(sampling.seed)
  calls = [0]

  def generator(situations: list[dict]) -> list[str]:
    for i, situation in enumerate(situations):
      check_situation(situation, f"situations[{i}]")
    if not situations:
      return []
    ids = encode_inputs(vocabulary, [format_inputs(s) for s in situations], input_length)
    records = generate(config, params, vocabulary, ids, jax.random.fold_in(rng, calls[0]),
                       max_length=max_length, batch_size=batch_size, top_p=sampling.top_p,
                       temperature=sampling.temperature, num_samples=sampling.num_samples,
                       reward_model=reward_model, partitioner=partitioner)
    calls[0] += 1
    return [_chosen(record) for record in records]

  return generator


def task_inputs(task_name: str, split: str, feature_lengths) -> tuple[list[dict], np.ndarray, object]:
  """(rows, input_ids, vocabulary) of a generation task: one row per distinct input text.

  Examples sharing an input (one per reference advice) are merged; their targets become the
  row's `references`.
  """
  import seqio  # pylint: disable=g-import-not-at-top  # runner must import without TensorFlow

  task = seqio.get_mixture_or_task(task_name)
  if not isinstance(task, seqio.Task):
    raise ValueError(f"infer: {task_name!r} is a mixture; name one generation task")
  with data.graph_mode_maps():
    dataset = task.get_dataset(dict(feature_lengths), split=split, shuffle=False, use_cached=False)
  rows, ids, index = [], [], {}
  for example in dataset.as_numpy_iterator():
    text = example["inputs_pretokenized"].decode("utf-8")
    reference = example["targets_pretokenized"].decode("utf-8") if "targets_pretokenized" in example else None
    if text not in index:
      index[text] = len(rows)
      example_id = example["id"].decode("utf-8") if "id" in example else str(len(rows))
      rows.append({"id": example_id, "inputs": text, "references": []})
      ids.append(example["inputs"])
    if reference is not None:
      rows[index[text]]["references"].append(reference)
  input_ids = np.zeros((len(ids), feature_lengths["inputs"]), np.int32)
  for i, tokens in enumerate(ids):
    input_ids[i, :len(tokens)] = tokens
  return rows, input_ids, task.output_features["targets"].vocabulary


@dataclasses.dataclass(frozen=True)
class Situations:
  """A JSON lines file of situations to generate for, instead of a task's inputs.

  Attributes:
    input_file: the file (INPUT_FILE; `read_situations`); None: the task's inputs.
    format_inputs: a situation's model input text (scripts/generate.py passes the advice task's
      formatting, `situation_formatter`: runner cannot import t5_tasks).
    vocabulary: the seqio vocabulary that encodes the inputs and decodes the samples.
  """
  input_file: str | None = None
  format_inputs: Callable[[dict], str] | None = None
  vocabulary: Any = None


def infer(*, model_config: T5Config | None = None, checkpoint_path: str, output_file: str,
          dataset: configs.DatasetConfig, sampling: configs.SamplingConfig | None = None,
          partitioner: partitioning.Partitioner | None = None, situations: Situations | None = None) -> str:
  """Samples advice for a generation task's inputs or a file of situations; writes JSON lines.

  With `situations` holding an input file, the situations of that file are used (and need its
  `format_inputs` and `vocabulary`), else the inputs of `dataset`'s task (its split; one
  generation task, not a mixture). One line per input: `id`, `inputs` (the model's input text),
  `predictions` (num_samples texts) and, for a task, `references`. `dataset.task_feature_lengths`
  (None: those the checkpoint recorded, `runner.model_inputs`) gives the input length and
  (`targets`) the longest sample; a vocabulary other than the checkpoint's recorded one is refused; `dataset.batch_size` the rows
  sampled at once (its seed and use_cached are unused). `sampling` (default
  `configs.SamplingConfig()`) gives NUM_SAMPLES, TOP_P, TEMPERATURE and SEED; with its
  `reward_checkpoint_path` a line also holds `rewards`, `best` and `kl` (best-of-N over the
  num_samples). Runs on `partitioner`'s mesh (default `Partitioner()`: every process's devices).
  Returns the output path; scripts/generate.py calls it through gin (gin/runs/infer.gin).

  With several processes (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID, as
  scripts/launch_local.py sets them; `partitioning.initialize_distributed`), every process reads
  the same inputs in the same order and feeds its own rows of each batch; the outputs are gathered
  and process 0 alone writes the file, the one a single process writes.

  The file is written whole (atomically) when sampling ends. On SIGINT or SIGTERM sampling stops
  after the batch in progress, the lines of the inputs sampled so far are written the same way,
  and `checkpoints.PreemptionGuard.Interrupted` is raised; calling it again starts over (the
  same seed samples the same texts). With several processes none handles the signals (each would
  stop at its own batch while the others waited for it): they stop where they are.
  """
  sampling = configs.SamplingConfig() if sampling is None else sampling
  partitioner = partitioning.Partitioner() if partitioner is None else partitioner
  situations = Situations() if situations is None else situations
  recorded = model_inputs.read(checkpoint_path)
  lengths = model_inputs.feature_lengths(recorded, dataset.task_feature_lengths, f"CHECKPOINT_PATH {checkpoint_path}")
  task_name, split, batch_size = dataset.mixture_or_task_name, dataset.split, dataset.batch_size
  input_file, vocabulary = situations.input_file, situations.vocabulary
  storage.check_reachable(output_file, "INFER_OUTPUT_FILE")
  partitioner.initialize()  # before anything touches a device
  host_memory.reuse_freed_memory()
  if input_file is not None:
    if situations.format_inputs is None or vocabulary is None:
      raise ValueError("infer: a situations file needs format_inputs and vocabulary "
                       "(scripts/generate.py passes the advice task's)")
    read = read_situations(input_file)
    rows = [{"id": str(s.get("id", i)), "inputs": situations.format_inputs(s)} for i, s in enumerate(read)]
    input_ids = encode_inputs(vocabulary, [r["inputs"] for r in rows], lengths["inputs"])
  elif task_name is not None:
    rows, input_ids, vocabulary = task_inputs(task_name, split, lengths)
  else:
    raise ValueError("infer: give a generation task (MIXTURE_OR_TASK_NAME) or an input_file of situations")
  described = model_inputs.describe_vocabulary(vocabulary)
  model_inputs.check_vocabulary(recorded, described, f"CHECKPOINT_PATH {checkpoint_path}")
  if sampling.reward_checkpoint_path:  # best-of-N: the reward model reads the samples' ids too
    model_inputs.check_vocabulary(model_inputs.read(sampling.reward_checkpoint_path), described,
                                  f"REWARD_CHECKPOINT_PATH {sampling.reward_checkpoint_path}")
  if not rows:  # an empty output file would read as a finished run
    raise ValueError(f"infer: nothing to generate for: {input_file} holds no situations" if input_file is not None
                     else f"infer: nothing to generate for: task {task_name} has no {split!r} inputs")
  (config, params), reward_model = _load(checkpoint_path, model_config, sampling.reward_checkpoint_path,
                                         partitioner, batch_size)
  print(f"generating for {len(rows)} inputs, {batch_size} per batch, into {output_file}", flush=True)
  with checkpoints.PreemptionGuard(stopping="finishing the batch being sampled, then stopping") as guard:
    records = generate(config, params, vocabulary, input_ids, jax.random.PRNGKey(sampling.seed),
                       max_length=lengths["targets"], batch_size=batch_size,
                       num_samples=sampling.num_samples, top_p=sampling.top_p, temperature=sampling.temperature,
                       reward_model=reward_model, partitioner=partitioner, should_stop=guard.should_stop)
  lines = [json.dumps({**row, **record}, ensure_ascii=False) + "\n" for row, record in zip(rows, records)]
  if jax.process_index() == 0:  # every process holds every line
    storage.write_text(output_file, "".join(lines))
  summary = best_of_n_summary(records)
  if summary is not None:
    print(f"best-of-{summary['n']}: KL {summary['kl']:.6f} nats from the sampling policy "
          f"(log N - (N-1)/N); mean reward of the chosen samples {summary['mean_reward_chosen']:+.4f}, "
          f"of all samples {summary['mean_reward_all']:+.4f} ({summary['inputs']} inputs)", flush=True)
  if guard.signal_number is not None and len(records) < len(rows):
    raise guard.interrupted(f"interrupted after {len(records)}/{len(rows)} inputs, their lines written "
                            f"to {output_file}; rerunning the same command starts over")
  return output_file
