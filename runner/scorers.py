"""What a candidate's score is: the scorers (likelihood, reward) by their gin name SCORER.

A likelihood is `models.scoring.score_packed`'s sum over the tokens a candidate's score mask
marks, then normalised as `models.scoring.NORMALIZATIONS` lists (the gin setting NORMALIZATION);
a reward is `models.reward.reward_packed`'s one number per response. Offline evaluation and
evaluation during training score through `make_score_fn` alike.
"""
import jax
from jax.experimental import multihost_utils

from models import reward as reward_lib
from models import scoring
from models.config import T5Config
from runner import partitioning


def on_every_host(values):
  """A batch's results, whole, as numpy on every process: with several processes each holds only
  its rows of the global array the scorer returns."""
  return multihost_utils.process_allgather(values, tiled=True)


def _likelihood_scorer(config: T5Config, normalization: str):
  normalize, _ = scoring.NORMALIZATIONS[normalization]

  def score(params, arrays, lengths):
    def total(input_ids):
      return on_every_host(scoring.score_packed(config, params, input_ids, arrays["candidate_ids"],
                                                arrays["candidate_segments"], arrays["score_mask"],
                                                num_candidates=lengths["tokens"].shape[-1], length_normalize=False))
    summed = total(arrays["input_ids"])
    empty = None
    if normalization == "mutual_information":
      empty = total(jax.numpy.ones_like(arrays["input_ids"][:, :1]))  # the context [EOS] alone
    return {"scores": normalize(summed, empty, lengths), "log_likelihoods": summed,
            "tokens": lengths["tokens"]}
  return score


def _reward_scorer(config: T5Config, normalization: str):
  del normalization  # a reward is one number per response
  def score(params, arrays, lengths):
    if reward_lib.HEAD not in params:
      raise ValueError(f"SCORER='reward' needs a reward model; the checkpoint has no "
                       f"'{reward_lib.HEAD}' parameters")
    return {"scores": on_every_host(reward_lib.reward_packed(config, params, arrays["input_ids"],
                                                             arrays["candidate_ids"], arrays["candidate_segments"],
                                                             num_responses=lengths["tokens"].shape[-1]))}
  return score


# Every scorer, by its gin name (SCORER): make(config, normalization) -> fn(params, arrays,
# lengths) -> {"scores": [B, K], and per-candidate extras for predictions.jsonl}. `arrays` holds
# input_ids [B, L] and each row's K candidates packed end to end (`data.pack_candidates`):
# candidate_ids, candidate_segments and score_mask [B, S] (on the mesh); `lengths` the host's
# tokens, scored_chars and scored_bytes [B, K]. Adding one is adding an entry.
SCORERS = {"likelihood": _likelihood_scorer, "reward": _reward_scorer}
# The per-candidate extras each scorer records in predictions.jsonl, which some metrics read (a
# generation task's perplexity reads log_likelihoods and tokens; a metric function names what it
# reads as its `record_fields`, t5_tasks.tasks).
SCORER_RECORDS = {"likelihood": ("log_likelihoods", "tokens"), "reward": ()}


def check_scoring(scorer: str, normalization: str) -> None:
  if scorer not in SCORERS:
    raise ValueError(f"SCORER must be one of {sorted(SCORERS)}, got {scorer!r}")
  if normalization not in scoring.NORMALIZATIONS:
    raise ValueError(f"NORMALIZATION must be one of {sorted(scoring.NORMALIZATIONS)}, got {normalization!r}")


def check_metrics_scorable(tasks, scorer: str) -> None:
  """Stops, before anything is scored, when a task's metric reads what `scorer` does not record
  (a reward model has no perplexity for a generation task): the scores would be thrown away."""
  for task in tasks:
    for metric_fn in task.score_metric_fns:
      reads = getattr(metric_fn, "record_fields", ())
      missing = [field for field in reads if field not in SCORER_RECORDS[scorer]]
      if missing:
        able = [name for name, fields in SCORER_RECORDS.items() if set(reads) <= set(fields)]
        name = getattr(getattr(metric_fn, "func", metric_fn), "__name__", "metric")
        raise ValueError(f"SCORER={scorer!r} cannot evaluate {task.name}: its metric {name} reads each "
                         f"item's {' and '.join(missing)}, which only SCORER={' or '.join(map(repr, able))} "
                         f"records; evaluate a mixture without {task.name}, or with that scorer")


def make_score_fn(config: T5Config, scorer: str, normalization: str = "token",
                  partitioner: partitioning.Partitioner | None = None):
  """fn(params, arrays, lengths) -> {"scores": [B, K], ...} (numpy, the whole batch on every
  process), run on the partitioner's mesh (see SCORERS)."""
  check_scoring(scorer, normalization)
  score = SCORERS[scorer](config, normalization)
  if partitioner is None:
    return score

  def score_on_mesh(params, arrays, lengths):
    with partitioner.activate():
      return score(params, arrays, lengths)
  return score_on_mesh
