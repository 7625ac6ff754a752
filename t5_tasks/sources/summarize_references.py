"""Reference summaries for supervised fine-tuning on TL;DR (JSON lines, the project's own format).

Each line is one post and one human-written summary:

    {"id": "t3_abc", "subreddit": "relationships", "title": "...", "post": "...",
     "summary": "...", "split": "train"}

`split` is optional (train / valid1 / valid2, or train / validation / test; default train). A
CNN/DM article has `article` instead of `post` and no `subreddit` or `title`, as in the
comparisons (`summarize_feedback`). The comparisons' own `ref` summaries need no such file.
"""
import dataclasses

from t5_tasks.sources import records

SPLITS = ("train", "valid1", "valid2", "validation", "test")


@dataclasses.dataclass(frozen=True)
class ReferenceSummary:
  id: str
  subreddit: str  # "" for news articles
  title: str
  post: str
  summary: str
  split: str


def _parse(where: records.Where, row) -> ReferenceSummary:
  if not isinstance(row, dict):
    raise where.error(None, "expected a JSON object")
  is_article = "post" not in row and "article" in row
  return ReferenceSummary(
      id=where.string(row, "id"),
      subreddit="" if is_article else where.string(row, "subreddit"),
      title="" if is_article else where.string(row, "title"),
      post=where.string(row, "article" if is_article else "post"),
      summary=where.string(row, "summary"),
      split=where.choice(row, "split", SPLITS) if "split" in row else "train",
  )


def read_references(path, *, skip_invalid: bool = False
                    ) -> tuple[list[ReferenceSummary], records.ReadReport]:
  # One summary per post: a repeated id would be a second reference for the same post.
  return records.read_records(path, records.json_lines_rows(path), _parse,
                              skip_invalid=skip_invalid, unique_id=lambda r: r.id)
