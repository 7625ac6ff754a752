"""Learning to summarize from human feedback (Stiennon et al. 2020): which of two TL;DR summaries
the labeller preferred, and supervised fine-tuning on the reference summaries."""
import collections
from typing import Mapping

import gin

from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks.families import base
from t5_tasks.sources import summarize_feedback
from t5_tasks.sources import summarize_references


# gin names these `t5_tasks.families.<name>`, as when every family was one module.
@gin.configurable(module="t5_tasks.families")
def comparison_filter(min_confidence: int | Mapping[str, int] | None = None,
                      splits: tuple[str, ...] = base.SPLITS):
  """(min_confidence, splits): the comparisons of `splits` kept are those the labeller rated at
  least `min_confidence` (1..9), or at least the labeller's own threshold when it is a {worker:
  threshold} mapping (a worker it does not name keeps none); None keeps every one, with or
  without a confidence.

  Stiennon et al. select reward models on validation labels above per-labeler high-confidence
  thresholds (C.1, step 4; `scripts.analyze agreement` estimates them), yet found that dropping
  low-confidence labels from training hurt (C.2). Asked when the dataset is built (the tasks
  register before gin parses).
  """
  thresholds = min_confidence.values() if isinstance(min_confidence, Mapping) else [min_confidence]
  if min_confidence is not None and any(t not in range(1, 10) for t in thresholds):
    raise ValueError(f"comparison_filter.min_confidence must be 1..9, {{worker: 1..9}} or None, "
                     f"got {min_confidence!r}")
  unknown = set(splits) - set(base.SPLITS)
  if unknown:
    raise ValueError(f"comparison_filter.splits names {sorted(unknown)}; the splits are {base.SPLITS}")
  return min_confidence, tuple(splits)


def summarize_examples(files: base.Files) -> base.Examples:
  """Preferred summary first; ids are the post's id and the comparison's rank for that post
  (counted before `comparison_filter`, so that an id names the same comparison either way)."""
  min_confidence, filtered_splits = comparison_filter()
  out = {split: [] for split in base.SPLITS}
  seen, dropped = collections.Counter(), collections.Counter()
  path = base.single_file(files, "summarize_feedback")
  for c in base.read(summarize_feedback.read_comparisons, path):
    seen[c.id] += 1
    split = base.RELEASED_SPLITS.get(c.split, "train")
    # 10 is above the 1-9 scale: a worker the mapping does not name keeps no label.
    threshold = min_confidence.get(c.worker, 10) if isinstance(min_confidence, Mapping) else min_confidence
    if (min_confidence is not None and split in filtered_splits
        and (c.confidence is None or c.confidence < threshold)):
      dropped[split] += 1
      continue
    out[split].append(dict(
        id=f"{c.id}#{seen[c.id]}", subreddit=c.subreddit, title=c.title, post=c.post,
        candidates=[c.summaries[c.choice], c.summaries[1 - c.choice]],
        candidate_labels=[1, 0], candidate_scores=[1.0, 0.0]))
  if min_confidence is not None:
    below = ("their labeler's threshold, of a labeler without one," if isinstance(min_confidence, Mapping)
             else min_confidence)
    print(f"summarize_feedback: dropped {sum(dropped.values())} comparisons of confidence below "
          f"{below} or none (" + ", ".join(f"{s} {dropped[s]}" for s in filtered_splits)
          + f"); kept {sum(map(len, out.values()))}", flush=True)
  return out


@gin.configurable(module="t5_tasks.families")
def reference_filter(max_post_tokens: int | None = None, min_summary_tokens: int | None = None,
                     max_summary_tokens: int | None = None):
  """(max_post_tokens, min_summary_tokens, max_summary_tokens) for the TL;DR references; None: no limit.

  The paper's TL;DR filters (appendix A) are 512, 24 and 48 GPT-2 BPE tokens; they are counted
  in the same unit whatever the tasks' vocabulary (`summarize_references.paper_token_count`).
  """
  return max_post_tokens, min_summary_tokens, max_summary_tokens


def _reference_rejection(count, post: str, summary: str, is_post: bool) -> str | None:
  """Which of `reference_filter`'s limits the pair breaks, or None. News articles have no post limit."""
  max_post, min_summary, max_summary = reference_filter()
  if is_post and max_post is not None and count(post) > max_post:
    return f"post over {max_post} tokens"
  if min_summary is None and max_summary is None:
    return None
  length = count(summary)
  if min_summary is not None and length < min_summary:
    return f"summary under {min_summary} tokens"
  if max_summary is not None and length > max_summary:
    return f"summary over {max_summary} tokens"
  return None


def sft_examples(files: base.Files) -> base.Examples:
  """One example per distinct (post id, reference summary): the comparisons' summaries by policy
  `ref` (a post is compared many times with its one reference) and the references files'.

  The target is the reference (the only candidate). A references file bound under a split key
  puts all its records in that split; under "all", each record's own `split`. Bind a dataset to
  {} to read none of it. `reference_filter` drops pairs, counted in one printed line.
  """
  pairs = {}  # (post id, summary) -> (split, post record)
  if files["summarize_feedback"]:
    path = base.single_file(files, "summarize_feedback")
    for c in base.read(summarize_feedback.read_comparisons, path):
      for text, policy in zip(c.summaries, c.policies):
        if policy == "ref":
          pairs.setdefault((c.id, text), (base.RELEASED_SPLITS.get(c.split, "train"), c))
  from_comparisons = len(pairs)
  for key, path in files["summarize_references"].items():
    for r in base.read(summarize_references.read_references, path):
      split = r.split if key == "all" else key
      split = base.RELEASED_SPLITS.get(split, split)
      if split not in base.SPLITS:
        raise ValueError(f"summarize_references is bound under {key!r}; use 'all' or one of {base.SPLITS}")
      pairs.setdefault((r.id, r.summary), (split, r))
  count = summarize_references.paper_token_count
  out = {split: [] for split in base.SPLITS}
  rejected = collections.Counter()
  for (post_id, summary), (split, r) in pairs.items():
    reason = _reference_rejection(count, r.post, summary, bool(r.subreddit))
    if reason:
      rejected[reason] += 1
      continue
    out[split].append(dict(id=post_id, subreddit=r.subreddit, title=r.title, post=r.post,
                           candidates=[summary], candidate_labels=[1], candidate_scores=[1.0]))
  counts = (f"{len(pairs)} references ({from_comparisons} from comparisons), filtered out "
            f"{sum(rejected.values())}" + "".join(f"; {reason}: {n}" for reason, n in sorted(rejected.items())))
  if pairs and rejected.total() == len(pairs):
    raise ValueError(f"summarize_feedback_sft: t5_tasks.families.reference_filter {reference_filter()} "
                     f"leaves no reference: {counts}")
  print(f"summarize_feedback_sft: {counts}", flush=True)
  return out


SUMMARIZE_FEEDBACK_PREFERENCE = base.TaskFamily(
    name="summarize_feedback_preference",
    examples=summarize_examples,
    signature=base.SIGNATURES["summary"],
    splits=base.SPLITS,
    quickstart_files={"summarize_feedback": {"all": "summarize_comparisons.jsonl"}},
    steps=(preprocessors.summary_inputs,),
    metric_fn=metrics.preference_metric_fn,
    # `comparison_filter` as bound when the dataset is prepared is the one it keeps.
    tfds=base.TfdsSource(
        "summarize_from_feedback:2.0.0",
        files={"summarize_feedback": {"all": ("**/summarize_comparisons*.jsonl", "**/comparisons/*.json")}},
        instructions=("Put the comparison JSON lines (summarize_comparisons*.jsonl or "
                      "comparisons/*.json) in manual_dir."),
        release_notes={"1.0.0": "The comparisons as read, in splits train, valid1 and valid2.",
                       "2.0.0": "The task's examples (ids '<post>#<rank>'), in its splits "
                                "train, validation (valid1) and test (valid2)."}),
)
# Supervised fine-tuning on TL;DR references (B.1: "supervised baselines"): a generation task,
# inputs the query, targets the reference. Files only (no TFDS builder).
SUMMARIZE_FEEDBACK_SFT = base.TaskFamily(
    name="summarize_feedback_sft",
    examples=sft_examples,
    signature=base.SIGNATURES["summary"],
    splits=base.SPLITS,
    quickstart_files={"summarize_feedback": {"all": "summarize_comparisons.jsonl"},
                      "summarize_references": {"all": "summarize_references.jsonl"}},
    steps=(preprocessors.summary_inputs,),
    metric_fn=metrics.perplexity_metric_fn,
)
