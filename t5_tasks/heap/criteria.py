"""HEAP's 22 criteria as data (Mehri & Shwartz 2023): Table 1's abbreviations and sources, Table 4's
input layout and hyperparameters, Table 5's instructions, Table 3's clusters (and §6's)."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Criterion:
  abbreviation: str  # the paper's (Table 1)
  name: str
  source: str        # which released file it reads: a key of SOURCES
  label_input: bool  # Table 4 "Label Input": each field is preceded by its label
  ranked: bool       # Table 2 reports Spearman: the data ranks more than two outputs per context
  instruction: str   # Table 5's phrasing (verbatim, the paper's typos included)


def _criteria(*rows) -> dict[str, Criterion]:
  return {row[0]: Criterion(*row) for row in rows}


_STORY = ("given a story that consists of a premise, a second sentence, and an ending as well as a "
          "second story with the same premise is provided but the second sentence is replaced with a "
          "counterfactual sentence, and the ending is rewritten.")
_STORY_TASK = ("You have a story that consists of a premise, a second sentence, and an ending. A second "
               "story with the same premise is provided but the second sentence is replaced with a "
               "counterfactual sentence, and the ending is rewritten")
_HATE = "a hate speech, the target of the hate speech, and a counter narrative in response to the hate speech"
# Table 2's order. Label input: Table 4 (the single- and cross-task rows agree); ranked: the rows
# with a Spearman figure in Table 2; instruction: Table 5.
HEAP_CRITERIA = _criteria(
    ("AH", "advice helpfulness", "turingadvice", False, False,
     "Determine how helpful the advice is given a situation and advice."),
    ("AG", "answer grammaticality", "tellmewhy", True, True,
     "Determine the grammaticality of an answer given a narrative, a question and an answer to that question."),
    ("AV", "answer validity", "tellmewhy", True, True,
     "Determine the plausibility of the answer given a narrative, a question and an answer to that question."),
    ("QA", "question answerability", "tellmewhy", False, False,
     "Determine the comprehensibility of the question and whether the narrative contains the answer for "
     "the question given a narrative and a question."),
    ("HS", "HellaSwag ending appropriateness", "hellaswag", False, False,
     "Determine how appropriate the follow up sentence is for the context given a context and a follow up "
     "sentence."),
    ("CR", "commonsense plausibility (CommonGen)", "commongen", False, False,
     "Given a concept set, a reference sentence, and a sentence, determine the plausibility of the sentence."),
    ("BCN", "best counter narrative", "counter_narratives", True, False,
     f"Given {_HATE}, determine how good the counter narrative is."),
    ("CCN", "choose counter narrative", "counter_narratives", True, False,
     f"Given {_HATE}, determine how appropriate the counter narrative is in a real case scenario."),
    # Table 5's CNG row ends "...in response to the hate speech. Determine the grammaticality": the
    # sentence break is instructions.json's template 0; its `paper_table5` marker says 1 (no break).
    ("CNG", "counter-narrative grammaticality", "counter_narratives", True, True,
     f"You are given {_HATE}. Determine the grammaticality of the counter narrative."),
    ("CNSp", "counter-narrative specificity", "counter_narratives", False, True,
     f"Determine how specific the arguments brought by the counter narrative are in response to the hate "
     f"speech given {_HATE}."),
    ("CNSu", "counter-narrative suitability", "counter_narratives", True, True,
     f"Given {_HATE}, determine how suitable the counter narrative is to the hate speech in terms of "
     "semantic relatedness and in terms of not spreading hate."),
    ("CNI", "counter-narrative informativeness (CHASM)", "chasm", False, True,
     "Determine how informative the counter narrative is given a hate speech and a counter narrative in "
     "response to the hate speech."),
    ("CNO", "counter-narrative offensiveness (CHASM)", "chasm", True, True,
     "Given a hate speech and a counter narrative in response to the hate speech, determine how offensive "
     "the counter narrative is."),
    ("CNSt", "counter-narrative stance (CHASM)", "chasm", False, True,
     "Evaluate the stance of the counter narrative given a hate speech and a counter narrative in response "
     "to the hate speech."),
    ("HSO", "hate-speech offensiveness (CHASM)", "chasm", True, True,
     "You are given a hate speech. Determine how offensive the hate speech is."),
    ("SRC", "story rewriting: counterfactual", "story_rewriting", True, False,
     f"{_STORY_TASK}, determine how reasonable the rewritten ending is given the premise and "
     "counterfactual sentence provided."),
    ("SRE", "story rewriting: ending", "story_rewriting", True, False,
     f"{_STORY_TASK}. Determine how reasonably the rewritten ending outlines a sequence of events."),
    # Table 5 prints SRPl's instruction as below. instructions.json's nearest phrasing (template 3)
    # reads "how well the plot in the rewritten ending relates"; its `paper_table5` marker says 2
    # ("...related to the plot in the premise"), a phrasing Table 5 does not print.
    ("SRPl", "story rewriting: plot", "story_rewriting", True, False,
     "You are given a story, an original ending and a rewritten ending. Determine how well the rewritten "
     "ending relates to the plot of the original ending."),
    ("SRPr", "story rewriting: premise", "story_rewriting", False, False,
     "Determine how well the rewritten ending keeps in mind the details provided in the premise " + _STORY),
    ("SRS", "story rewriting: second sentence", "story_rewriting", False, False,
     "Determine how well the rewritten ending keeps in mind the details provided in the counterfactual "
     + _STORY),
    ("DIA", "defeasible inference: attenuator", "defeasible", False, True,
     "You are given a premise, a hypothesis, and an update sentence. Determine how much the much the update "
     "sentence weakens the hypothesis."),
    ("DII", "defeasible inference: intensifier", "defeasible", False, True,
     "Given a premise, a hypothesis, and an update sentence, determine how much the much the update sentence "
     "strengthens the hypothesis."),
)

# The phrasing of instructions.json that Table 5 prints, where it is not the file's `paper_table5`
# marker (the marker is not trusted: it points at phrasings Table 5 does not print). SRPl: the
# nearest phrasing, with "the plot in" that Table 5's instruction lacks.
TABLE_5_TEMPLATE_NOT_MARKED = {"CNG": 0, "SRPl": 3}

# Table 3's clusters (they overlap), then §6's clusters of criteria from one dataset.
CLUSTERS: dict[str, tuple[str, ...]] = {
    "context": ("AH", "AV", "QA", "HS", "CR", "BCN", "SRC", "DIA", "DII"),  # "require understanding the context C"
    "no_context": ("AG", "CNG", "CNSp", "CNSu", "CNI", "CNO", "CNSt", "HSO", "SRPl", "SRPr"),
    "hate_speech": ("BCN", "CCN", "CNG", "CNSp", "CNSu", "CNI", "CNO", "CNSt", "HSO"),
    "tellmewhy": ("AG", "AV", "QA"),
    "defeasible_inference": ("DIA", "DII"),
    "story_rewriting": ("SRC", "SRE", "SRPl", "SRPr", "SRS"),
}


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
  """One row of Table 4: BART-base's tuned settings for a target criterion in one setup."""
  gradient_accumulation: int
  learning_rate: float
  epochs: int


def _table_4(rows: str) -> dict[str, Hyperparameters]:
  out = {}
  for row in rows.split(";"):
    abbreviation, accumulation, learning_rate, epochs = row.split()
    out[abbreviation] = Hyperparameters(int(accumulation), float(learning_rate), int(epochs))
  return out


# Table 4 (Appendix A), "Gradient Accumulation, Learning Rate, #Epochs" per target criterion. The
# multi-task row is one model for all 22; the paper gives no cross-cluster rows (the recipes use
# the cross-task row of the target).
TABLE_4 = {
    "single_task": _table_4(
        "AH 4 2e-5 17; AG 8 2e-5 15; AV 32 3e-4 10; QA 4 2e-4 20; HS 64 2e-5 17; CR 16 2e-4 18; "
        "BCN 4 3e-4 3; CCN 32 2e-4 15; CNG 32 2e-4 12; CNSp 8 2e-4 12; CNSu 128 3e-4 13; "
        "CNI 32 2e-4 15; CNO 64 3e-4 5; CNSt 4 2e-5 13; HSO 128 3e-4 2; SRC 64 2e-4 7; SRE 16 3e-4 2; "
        "SRPl 32 2e-4 15; SRPr 8 3e-4 4; SRS 8 2e-5 18; DIA 32 2e-4 15; DII 64 2e-5 17"),
    "multitask": Hyperparameters(8, 2e-5, 16),
    "cross_task": _table_4(
        "AH 4 2e-5 16; AG 8 2e-5 19; AV 16 3e-4 17; QA 32 2e-5 9; HS 32 2e-5 6; CR 8 2e-5 20; "
        "BCN 8 2e-5 15; CCN 16 2e-5 17; CNG 32 2e-5 20; CNSp 16 2e-5 5; CNSu 32 2e-5 15; "
        "CNI 16 2e-5 19; CNO 16 3e-4 12; CNSt 32 2e-5 16; HSO 32 3e-4 1; SRC 4 2e-5 15; SRE 32 2e-5 8; "
        "SRPl 8 2e-5 1; SRPr 4 2e-5 4; SRS 32 2e-5 4; DIA 8 2e-5 14; DII 32 2e-5 18"),
}


def task_name(abbreviation: str) -> str:
  """The seqio task of a criterion: `heap_` and its abbreviation in lower case (`heap_srpl`)."""
  return f"heap_{abbreviation.lower()}"


def criterion_of(name: str) -> str:
  """The abbreviation a criterion is known by, from its abbreviation in any case or its task name."""
  key = name[len("heap_"):] if name.startswith("heap_") else name
  for abbreviation in HEAP_CRITERIA:
    if abbreviation.lower() == key.lower():
      return abbreviation
  raise ValueError(f"unknown HEAP criterion {name!r}; known: {', '.join(HEAP_CRITERIA)}")
