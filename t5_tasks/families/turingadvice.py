"""TuringAdvice (Zellers et al. 2021): advice generation over RedditAdvice2019, scored by the
likelihood of each upvoted comment."""
from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks.families import base
from t5_tasks.sources import reddit_advice


def advice_examples(files: base.Files) -> base.Examples:
  """One example per good comment of each RedditAdvice2019 situation."""
  out = {split: [] for split in base.SPLITS}
  path = base.single_file(files, "reddit_advice")
  for s in base.read(reddit_advice.read_reddit_advice, path):
    for i, comment in enumerate(s.good_comments):
      out[base.RELEASED_SPLITS[s.split]].append(dict(
          id=f"{s.id}/{i}", subreddit=s.subreddit, created_utc=s.created_utc, title=s.title,
          selftext=s.selftext, targets=comment.body, candidates=[comment.body],
          candidate_labels=[1]))
  return out


TURINGADVICE_GENERATION = base.TaskFamily(
    name="turingadvice_generation",
    examples=advice_examples,
    signature=base.SIGNATURES["advice"],
    splits=base.SPLITS,
    quickstart_files={"reddit_advice": {"all": "reddit_advice_2019.jsonl"}},
    steps=(preprocessors.advice_inputs,),
    # Evaluation scores each reference advice: loss and perplexity (TuringAdvice §3.2 selects
    # models by validation perplexity).
    metric_fn=metrics.perplexity_metric_fn,
    tfds=base.TfdsSource(
        "reddit_advice2019:2.0.0",
        files={"reddit_advice": {"all": ("**/reddit_advice*.jsonl", "**/redditadvice2019/*.jsonl")}},
        instructions="Put the RedditAdvice2019 JSON lines (reddit_advice*.jsonl) in manual_dir.",
        release_notes={"1.0.0": "The situations as read.",
                       "2.0.0": "The task's examples: one per good comment."}),
)
