"""ASQ: which of two advice-seeking questions did the narrator ask? (JSON arrays.)

Question types in the human annotation files (Fu et al., 2019):
  0 G  very general            1 L  compatible and likely    2 U  compatible but unlikely
  3 E  incompatible, explicit  4 I  incompatible, implicit
"C" (compatible) is L or U. The paper breaks accuracy down by the type of the
narrator's true question and of the paired question; the groups overlap:
  "C+E"      true compatible, paired explicitly incompatible (readable off the text)
  "C+{C,I}"  true compatible, paired compatible or implicitly incompatible (needs intuition)
  "C+C"      true compatible, paired compatible (a subset of C+{C,I})
  "L+{U,I}"  true likely, paired unlikely or implicitly incompatible (a subset of C+{C,I})
"""
import dataclasses
from typing import Iterable

from t5_tasks.sources import records

GENERAL, LIKELY, UNLIKELY, EXPLICIT, IMPLICIT = range(5)
QN_TYPES = {GENERAL: "G", LIKELY: "L", UNLIKELY: "U", EXPLICIT: "E", IMPLICIT: "I"}
COMPATIBLE = (LIKELY, UNLIKELY)

PAIR_GROUPS = {
    "C+E": lambda t, p: t in COMPATIBLE and p == EXPLICIT,
    "C+{C,I}": lambda t, p: t in COMPATIBLE and p in (LIKELY, UNLIKELY, IMPLICIT),
    "C+C": lambda t, p: t in COMPATIBLE and p in COMPATIBLE,
    "L+{U,I}": lambda t, p: t == LIKELY and p in (UNLIKELY, IMPLICIT),
}
# pair_type names the narrowest group; ties between the two subsets go to L+{U,I}.
_NARROWEST_FIRST = ("C+E", "L+{U,I}", "C+C", "C+{C,I}")


@dataclasses.dataclass(frozen=True)
class AsqItem:
  id: str
  narrative: str
  questions: tuple[str, str]
  label: int  # index into questions of the question the narrator asked


@dataclasses.dataclass(frozen=True)
class AsqAnnotation:
  id: str
  true_label: int
  annotated_label: int  # the annotator's guess of the asked question
  true_qn_type: int
  paired_qn_type: int


def pair_groups(true_qn_type: int, paired_qn_type: int) -> tuple[str, ...]:
  """Every group of PAIR_GROUPS the pair belongs to, in PAIR_GROUPS order."""
  return tuple(name for name, member in PAIR_GROUPS.items() if member(true_qn_type, paired_qn_type))


def pair_type(true_qn_type: int, paired_qn_type: int) -> str | None:
  """The narrowest group of the pair, or None when the true question is not compatible."""
  groups = pair_groups(true_qn_type, paired_qn_type)
  return next((name for name in _NARROWEST_FIRST if name in groups), None)


def pair_types_by_id(*rounds: Iterable[AsqAnnotation]) -> dict[str, str]:
  """{item id: pair type, "" for a pair in no group} over annotation rounds: the first round that
  annotated an item wins, as its pair groups do (ASQ Table 4's rows are the first round's; a
  later round that types an item the first left untyped would put it in another row)."""
  types: dict[str, str] = {}
  for annotations in rounds:
    for a in annotations:
      types.setdefault(a.id, pair_type(a.true_qn_type, a.paired_qn_type) or "")
  return types


def _parse_item(where: records.Where, row) -> AsqItem:
  return AsqItem(
      id=where.string(row, "id"),
      narrative=where.string(row, "narrative"),
      questions=(where.string(row, "qn1"), where.string(row, "qn2")),
      label=where.integer(row, "label", choices=(0, 1)),
  )


def _parse_annotation(where: records.Where, row) -> AsqAnnotation:
  # The release writes every number as a string ("1"); plain integers are accepted too.
  def number(key, choices):
    return where.integer(row, key, choices=choices, from_string=True)
  return AsqAnnotation(
      id=where.string(row, "id"),
      true_label=number("true_label", (0, 1)),
      annotated_label=number("annotated_label", (0, 1)),
      true_qn_type=number("true_qn_type", tuple(QN_TYPES)),
      paired_qn_type=number("paired_qn_type", tuple(QN_TYPES)),
  )


def read_asq(path, *, skip_invalid: bool = False) -> tuple[list[AsqItem], records.ReadReport]:
  return records.read_records(path, records.json_array_rows(path), _parse_item,
                              skip_invalid=skip_invalid, unique_id=lambda item: item.id)


def read_asq_annotations(path, *, skip_invalid: bool = False
                         ) -> tuple[list[AsqAnnotation], records.ReadReport]:
  return records.read_records(path, records.json_array_rows(path), _parse_annotation,
                              skip_invalid=skip_invalid, unique_id=lambda a: a.id)
