"""Reference summaries for supervised fine-tuning on TL;DR (JSON lines, the project's own format).

Each line is one post and one human-written summary:

    {"id": "t3_abc", "subreddit": "relationships", "title": "...", "post": "...",
     "summary": "...", "split": "train"}

`split` is optional (train / valid1 / valid2, or train / validation / test; default train). A
CNN/DM article has `article` instead of `post` and no `subreddit` or `title`, as in the
comparisons (`summarize_feedback`). The comparisons' own `ref` summaries need no such file.
"""
import dataclasses
import re

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


# Appendix A filters TL;DR posts (over 512 tokens) and references (under 24 or over 48 tokens) in
# GPT-2 BPE tokens. That vocabulary is not shipped, and the tasks' own (bytes, SentencePiece) would
# make the same limits mean different texts (24 bytes is a few words), so the filters count the
# pieces GPT-2 splits text into before BPE, which never merges across letters, digits and other
# symbols (Radford et al. 2019, §2.2): contractions, runs of letters, of digits, of other symbols.
# BPE makes each piece at least one token and a common English word exactly one, so the count is
# the paper's from below, and close to it on everyday English. It needs no vocabulary file.
_BPE_PIECES = re.compile(r"'(?:s|t|re|ve|m|ll|d)|[^\W\d_]+|\d+|(?:[^\s\w]|_)+")


def paper_token_count(text: str) -> int:
  """Appendix A's length of `text`: its GPT-2 pre-tokenization pieces (see `_BPE_PIECES`)."""
  return len(_BPE_PIECES.findall(text))


def read_references(path, *, skip_invalid: bool = False
                    ) -> tuple[list[ReferenceSummary], records.ReadReport]:
  # One summary per post: a repeated id would be a second reference for the same post.
  return records.read_records(path, records.json_lines_rows(path), _parse,
                              skip_invalid=skip_invalid, unique_id=lambda r: r.id)
