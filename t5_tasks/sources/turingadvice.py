"""TuringAdvice human evaluation results: one situation per JSON line.

Each situation carries its top Reddit advice, the advice of several systems, and
for each system the Mechanical Turk verdict of its advice against the Reddit advice.
"""
import dataclasses

from t5_tasks.sources import records

HELPFULNESS = ("helpful", "slightlyhelpful", "nothelpful", "dangerous")
JUSTIFICATIONS = ("meaning", "writing", "contradiction", "neutral")
# A majority worker's "definitely" (2) counts 1.0 and "slightly" (1) 0.5 (the paper's appendix).
INTENSIFIER_WEIGHT = {2: 1.0, 1: 0.5}


@dataclasses.dataclass(frozen=True)
class Diagnostic:
  q1_intensifier: int     # 2 "definitely", 1 "slightly"
  q2_helpful_or_not: str  # one of HELPFULNESS
  q3_justification: str   # one of JUSTIFICATIONS


@dataclasses.dataclass(frozen=True)
class TurkRating:
  is_preferred: bool  # at least 2 of 3 workers preferred the system's advice
  is_preferred_continuous: float | None
  diagnostics: tuple[Diagnostic, ...]  # one per worker in the majority

  def preference_score(self) -> float:
    """The paper's continuous score: mean of +-1.0 / +-0.5 over the majority workers."""
    sign = 1.0 if self.is_preferred else -1.0
    return sign * sum(INTENSIFIER_WEIGHT[d.q1_intensifier] for d in self.diagnostics) / len(self.diagnostics)


@dataclasses.dataclass(frozen=True)
class TuringAdviceSituation:
  id: str
  subreddit: str
  title: str
  selftext: str
  submitted_time: int
  best_advice: str
  model_advice: dict[str, str]
  ratings: dict[str, TurkRating]


def _parse_rating(where: records.Where, ratings: dict, system: str) -> TurkRating:
  field = f"turk_ratings.{system}"
  rating = where.mapping(ratings, system, field)
  continuous = None
  if rating.get("is_preferred_continuous") is not None:
    continuous = where.number(rating, "is_preferred_continuous", f"{field}.is_preferred_continuous")
  diagnostics = where.sequence(rating, "diagnostics", f"{field}.diagnostics", min_length=1)
  parsed = []
  for i, d in enumerate(diagnostics):
    prefix = f"{field}.diagnostics[{i}]"
    parsed.append(Diagnostic(
        q1_intensifier=where.integer(d, "q1_intensifier", f"{prefix}.q1_intensifier",
                                     choices=tuple(INTENSIFIER_WEIGHT)),
        q2_helpful_or_not=where.choice(d, "q2_helpful_or_not", HELPFULNESS, f"{prefix}.q2_helpful_or_not"),
        q3_justification=where.choice(d, "q3_justification", JUSTIFICATIONS, f"{prefix}.q3_justification"),
    ))
  return TurkRating(is_preferred=where.boolean(rating, "is_preferred", f"{field}.is_preferred"),
                    is_preferred_continuous=continuous, diagnostics=tuple(parsed))


def _parse(where: records.Where, row) -> TuringAdviceSituation:
  situation = where.mapping(row, "situation")
  best = where.mapping(row, "best_advice")
  advice = where.mapping(row, "model_advice")
  ratings = where.mapping(row, "turk_ratings")
  if set(advice) != set(ratings):
    raise where.error("turk_ratings", f"systems {sorted(ratings)} differ from model_advice {sorted(advice)}")
  return TuringAdviceSituation(
      id=where.string(situation, "id", "situation.id"),
      subreddit=where.string(situation, "subreddit", "situation.subreddit"),
      title=where.string(situation, "title", "situation.title"),
      selftext=where.string(situation, "selftext", "situation.selftext"),
      submitted_time=where.integer(situation, "submitted_time", "situation.submitted_time"),
      best_advice=where.string(best, "bestadvice_body", "best_advice.bestadvice_body"),
      model_advice={s: where.string(advice, s, f"model_advice.{s}") for s in advice},
      ratings={s: _parse_rating(where, ratings, s) for s in advice},
  )


def read_turingadvice_eval(path, *, skip_invalid: bool = False
                           ) -> tuple[list[TuringAdviceSituation], records.ReadReport]:
  return records.read_records(path, records.json_lines_rows(path), _parse,
                              skip_invalid=skip_invalid, unique_id=lambda s: s.id)
