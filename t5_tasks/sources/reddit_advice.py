"""RedditAdvice2019: situations and their upvoted advice (JSON lines, date-based split)."""
import dataclasses

from t5_tasks.sources import records

SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class Comment:
  body: str
  score: int


@dataclasses.dataclass(frozen=True)
class AdviceSituation:
  id: str
  subreddit: str
  created_utc: int
  title: str
  selftext: str
  split: str
  good_comments: tuple[Comment, ...]


def _parse(where: records.Where, row) -> AdviceSituation:
  # Older dumps leave out the post id; the line number then stands in for it.
  item_id = where.string(row, "id") if isinstance(row, dict) and "id" in row else f"line{where.line}"
  comments = where.sequence(row, "good_comments", min_length=1)
  return AdviceSituation(
      id=item_id,
      subreddit=where.string(row, "subreddit"),
      created_utc=where.integer(row, "created_utc"),
      title=where.string(row, "title"),
      selftext=where.string(row, "selftext"),
      split=where.choice(row, "split", SPLITS),
      good_comments=tuple(
          Comment(body=where.string(c, "body", f"good_comments[{i}].body"),
                  score=where.integer(c, "score", f"good_comments[{i}].score"))
          for i, c in enumerate(comments)),
  )


def read_reddit_advice(path, *, skip_invalid: bool = False
                       ) -> tuple[list[AdviceSituation], records.ReadReport]:
  return records.read_records(path, records.json_lines_rows(path), _parse,
                              skip_invalid=skip_invalid, unique_id=lambda s: s.id)
