"""Learning-to-summarize-from-human-feedback comparisons (JSON lines).

Each line: a post (`info`), two summaries with the policies that wrote them, the
labeller's `choice` (0 or 1), the labeller (`worker`) and a split (train / valid1 / valid2). CNN/DM
batches carry `info.article` instead of `info.post` and have no subreddit.
"""
import dataclasses

from t5_tasks.sources import records


@dataclasses.dataclass(frozen=True)
class SummaryComparison:
  id: str
  subreddit: str  # "" for news articles
  title: str
  post: str
  summaries: tuple[str, str]
  policies: tuple[str, str]
  choice: int  # index of the preferred summary
  split: str
  confidence: int | None  # the labeller's 1..9 confidence where recorded
  worker: str = ""  # the labeller's id; "" where not recorded


def _parse(where: records.Where, row) -> SummaryComparison:
  info = where.mapping(row, "info")
  is_article = "post" not in info and "article" in info
  summaries = where.sequence(row, "summaries", length=2)
  extra = row.get("extra") if isinstance(row, dict) else None
  confidence = None
  if extra is not None:
    if not isinstance(extra, dict):
      raise where.error("extra", f"expected an object, got {extra!r}")
    if extra.get("confidence") is not None:
      confidence = where.integer(extra, "confidence", "extra.confidence", choices=range(1, 10))
  has_worker = isinstance(row, dict) and row.get("worker") is not None
  return SummaryComparison(
      id=where.string(info, "id", "info.id"),
      subreddit="" if is_article else where.string(info, "subreddit", "info.subreddit"),
      title=where.string(info, "title", "info.title", allow_empty=is_article),
      post=where.string(info, "article" if is_article else "post",
                        "info.article" if is_article else "info.post"),
      summaries=tuple(where.string(s, "text", f"summaries[{i}].text") for i, s in enumerate(summaries)),
      policies=tuple(where.string(s, "policy", f"summaries[{i}].policy") for i, s in enumerate(summaries)),
      choice=where.integer(row, "choice", choices=(0, 1)),
      split=where.string(row, "split"),
      confidence=confidence,
      worker=where.string(row, "worker", allow_empty=True) if has_worker else "",
  )


def read_comparisons(path, *, skip_invalid: bool = False
                     ) -> tuple[list[SummaryComparison], records.ReadReport]:
  # Posts are compared many times over, so ids repeat by design and are not checked.
  return records.read_records(path, records.json_lines_rows(path), _parse, skip_invalid=skip_invalid)
