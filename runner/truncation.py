"""What the feature lengths cut: per task, the inputs and candidates (or targets) longer than
their length, counted item by item and reported (issue 48: nothing is cut without a word).

seqio cuts a feature to its length less one and appends EOS (`append_eos_after_trim`, the tasks'
last preprocessor), so a cut feature and one that fits exactly both arrive at the length. Only
those are measured again, from the text the example carries (`<feature>_pretokenized`, which the
tasks' tokenizer keeps): the count is exact (untrimmed tokens, EOS included as seqio appends it)
and costs one more tokenization of the items at the length. Tokens that arrive without their text
(examples made by hand) count as they are, as `arrays.candidate_arrays` would cut them.

A count is a record (`TaskCounter.record`, what metrics.json, eval_metrics.jsonl and
data_files.json keep), and every line here is made from a record.
"""
import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Sequence

from runner.arrays import candidate_rows

# TRUNCATED_CANDIDATES: 'score' scores cut candidates as cut (counted, reported); 'refuse' stops first.
POLICIES = ("score", "refuse")


def check_policy(policy: str) -> None:
  if policy not in POLICIES:
    raise ValueError(f"TRUNCATED_CANDIDATES must be one of {POLICIES}, got {policy!r}")


def length_key(feature_lengths: Mapping[str, int], feature: str) -> str:
  """The TASK_FEATURE_LENGTHS key that bounds `feature`: candidates take 'targets' unless
  'candidates' is given (t5_tasks.preprocessors.append_eos_after_trim)."""
  return "targets" if feature == "candidates" and "candidates" not in feature_lengths else feature


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclasses.dataclass
class FeatureCount:
  """One feature of a task's items: sequences seen, those cut, the items with one cut, the
  longest untrimmed sequence (EOS included) and the first item, in the task's order, with a cut."""
  length: int
  vocabulary: Any = None
  add_eos: bool = True
  count: int = 0
  cut: int = 0
  items_cut: int = 0
  longest: int = 0
  first_cut: str | None = None

  def untrimmed(self, tokens, text) -> int:
    """The sequence's tokens before seqio cut it, EOS included."""
    if len(tokens) < self.length or text is None or self.vocabulary is None:
      return len(tokens)
    return len(self.vocabulary.encode(_text(text))) + int(self.add_eos)

  def add(self, item_id: str, sequences: Sequence, texts: Sequence) -> None:
    lengths = [self.untrimmed(tokens, text) for tokens, text in zip(sequences, texts, strict=True)]
    cut = sum(length > self.length for length in lengths)
    self.count += len(lengths)
    self.cut += cut
    self.longest = max([self.longest, *lengths])
    if cut:
      self.items_cut += 1
      self.first_cut = item_id if self.first_cut is None else self.first_cut

  def record(self) -> dict:
    return {"length": self.length, "count": self.count, "cut": self.cut, "items_cut": self.items_cut,
            "longest": self.longest, "first_cut": self.first_cut}


class TaskCounter:
  """Counts, item by item, what `feature_lengths` cut of a task's `features` ('inputs',
  'targets', 'candidates'); `reading` gives each one's vocabulary and EOS (the task's)."""

  def __init__(self, task: str, feature_lengths: Mapping[str, int], features: Sequence[str] = ("inputs", "candidates")):
    self.task, self.feature_lengths, self.items = task, dict(feature_lengths), 0
    self.features = {name: FeatureCount(self.feature_lengths[length_key(self.feature_lengths, name)])
                     for name in features}

  def reading(self, output_features: Mapping[str, Any]) -> "TaskCounter":
    """Measures each feature with the task's vocabulary and EOS (`output_features`, seqio's)."""
    for name, count in self.features.items():
      feature = output_features.get(name)
      count.vocabulary, count.add_eos = getattr(feature, "vocabulary", None), getattr(feature, "add_eos", True)
    return self

  def add(self, example: Mapping[str, Any]) -> None:
    item_id = _text(example.get("id", self.items))
    self.items += 1
    for name, count in self.features.items():
      if name == "candidates":
        rows = candidate_rows(example["candidates"])
        texts = example.get("candidates_pretokenized")
        count.add(item_id, rows, [None] * len(rows) if texts is None else list(texts))
      else:
        count.add(item_id, [example[name]], [example.get(f"{name}_pretokenized")])

  def counted(self, examples: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """`examples`, each counted as it passes."""
    for example in examples:
      self.add(example)
      yield example

  def record(self) -> dict:
    """{"items", "feature_lengths", <feature>: {"length", "count", "cut", "items_cut", "longest",
    "first_cut"}}: what metrics.json and data_files.json keep under "truncation"."""
    return {"items": self.items, "feature_lengths": self.feature_lengths,
            **{name: count.record() for name, count in self.features.items()}}


def _features(record: Mapping) -> dict:
  return {name: value for name, value in record.items() if isinstance(value, Mapping) and "cut" in value}


def any_cut(record: Mapping) -> bool:
  return any(feature["cut"] for feature in _features(record).values())


def line(task: str, record: Mapping) -> str:
  """One line of what the lengths cut of a task (the console's and the report's)."""
  parts = []
  for name, feature in _features(record).items():
    if not feature["cut"]:
      continue
    key = length_key(record["feature_lengths"], name)
    within = (f" in {feature['items_cut']:,} items" if feature["count"] != record["items"] else "")
    parts.append(f"{feature['cut']:,} of {feature['count']:,} {name}{within} longer than {key!r} {feature['length']} "
                 f"(the longest {feature['longest']:,}, first in item {feature['first_cut']!r})")
  return f"{task}: cut by the feature lengths (tokens with EOS): {'; '.join(parts)}"


def lines(records: Mapping[str, Mapping]) -> list[str]:
  """`line` of each task with anything cut."""
  return [line(task, record) for task, record in records.items() if any_cut(record)]


def refusal(task: str, record: Mapping) -> str:
  """TRUNCATED_CANDIDATES = 'refuse''s one line: the task, the count, an item, the length that fits."""
  feature = record["candidates"]
  key = length_key(record["feature_lengths"], "candidates")
  return (f"TRUNCATED_CANDIDATES = 'refuse': {task} has {feature['cut']:,} of {feature['count']:,} candidates "
          f"(in {feature['items_cut']:,} of {record['items']:,} items, first in item {feature['first_cut']!r}) longer "
          f"than TASK_FEATURE_LENGTHS[{key!r}] = {feature['length']} tokens with EOS; {key!r}: {feature['longest']} "
          "would hold them all (or TRUNCATED_CANDIDATES = 'score' scores them cut, counted)")


def report_lines(records: Mapping[str, Mapping]) -> list[str]:
  """The report header's lines: each task with anything cut, or that nothing was."""
  if not records:
    return []
  return lines(records) or [f"Nothing was cut by the feature lengths in the {len(records)} tasks' items "
                            "(inputs and candidates counted with EOS)"]
