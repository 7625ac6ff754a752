"""TimeDial (Qin et al. 2021): which of four options fills a dialog's masked temporal expression,
and its weak supervision (masked expressions of unlabeled dialogs, `t5_tasks.temporal_tagger`)."""
import functools

from t5_tasks import metrics
from t5_tasks import preprocessors
from t5_tasks import temporal_tagger
from t5_tasks.families import base
from t5_tasks.sources import sutime_spans
from t5_tasks.sources import timedial


def _masked_dialog_example(d: temporal_tagger.MaskedDialog) -> dict:
  return dict(id=d.id, conversation=list(d.conversation), mask_turn=d.mask_turn,
              candidates=list(d.candidates), candidate_labels=list(d.candidate_labels),
              candidate_rules=list(d.candidate_rules))


def timedial_examples(files: base.Files) -> base.Examples:
  """Four candidates per item, the two correct first; each file's incorrect options are counted
  by rule on the console (the denominators of `error_rate/<rule>`)."""
  out = {}
  for split, path in files["timedial"].items():
    items = base.read(timedial.read_timedial, path)
    rules = ", ".join(f"{rule} {n['options']} ({n['items']} items)"
                      for rule, n in timedial.count_per_rule(items).items())
    print(f"{path}: {len(items)} TimeDial items; incorrect options by rule: {rules}", flush=True)
    out[split] = [_masked_dialog_example(temporal_tagger.MaskedDialog(
        id=item.id, conversation=item.conversation, mask_turn=item.mask_turn,
        candidates=item.correct + item.incorrect, candidate_labels=(1, 1, 0, 0),
        candidate_rules=("", "") + item.incorrect_rules))
        for item in items]
  return out


_ANNOUNCED_LEFT_OUT: set[str] = set()  # the weak-supervision file sets whose counts were printed

# The `dialogs` key that holds SUTime's spans (`t5_tasks.sources.sutime_spans`) rather than bare
# dialogs, which the project's regex tagger tags: {'dialogs': {'sutime': PATH}}.
SUTIME = "sutime"
REGEX_TAGGER = ("the project's regex tagger (t5_tasks.temporal_tagger), not SUTime as in the paper "
                f"(§4.1.1); bind {{'dialogs': {{'{SUTIME}': PATH}}}} to use SUTime's spans")


def _sutime_dialog(d: sutime_spans.TaggedDialog):
  """(id, conversation, spans) as `temporal_tagger` takes them; a span's category is its TIMEX3
  type, lower-cased (the negatives' rules read `weak/duration`, `weak/pool/date`, ...)."""
  return d.id, d.conversation, tuple(
      (s.turn, temporal_tagger.TemporalSpan(s.start, s.end, s.text, s.type.lower())) for s in d.spans)


def weak_supervision_examples(files: base.Files) -> base.Examples:
  """Every bound dialogs file pooled, the TimeDial test dialogs (the bound `timedial` files) left
  out, then split by dialog into train and validation (`temporal_tagger.weak_supervision_splits`).

  The spans are SUTime's when the dialogs are bound as {'sutime': PATH} (the paper's tagger,
  §4.1.1; one file, since one corpus is tagged by one tagger), else the regex tagger's; which
  tagger, and how many spans it gave, is printed once per file set.
  """
  bound = files["dialogs"]
  if SUTIME in bound and len(bound) > 1:
    raise ValueError(f"timedial_weak_supervision: 'dialogs' binds SUTime's spans ('{SUTIME}') with "
                     f"other files ({bound}); the paper tags its corpus with one tagger (§4.1.1): "
                     f"bind {{'{SUTIME}': PATH}} alone, or only files of bare dialogs")
  if SUTIME in bound:
    dialogs = [_sutime_dialog(d) for d in base.read(sutime_spans.read_tagged_dialogs, bound[SUTIME])]
    tagger = f"SUTime (the '{SUTIME}' file {bound[SUTIME]})"
  else:
    dialogs = [d for path in bound.values() for d in base.read(temporal_tagger.read_dialogs, path)]
    tagger = REGEX_TAGGER
  test = temporal_tagger.TimeDialTestDialogs(
      item.conversation for path in files["timedial"].values()
      for item in base.read(timedial.read_timedial, path))
  kept = [d for d in dialogs if d[1] not in test]
  if SUTIME not in bound:  # tagged once, after the test dialogs are left out
    kept = [(dialog_id, turns, temporal_tagger.dialog_spans(turns)) for dialog_id, turns in kept]
  key = repr(sorted((k, sorted(v.items())) for k, v in files.items()))
  if key not in _ANNOUNCED_LEFT_OUT:
    _ANNOUNCED_LEFT_OUT.add(key)
    print(f"timedial_weak_supervision: left out {len(dialogs) - len(kept)} of {len(dialogs)} "
          f"dialogs found in the TimeDial test set ({len(test)} test items: "
          f"{', '.join(files['timedial'].values())})", flush=True)
    # Table 4's in-domain corpus (DailyDialog): 14.5k + 2.4k spans masked, a pool of 2,153.
    print(f"timedial_weak_supervision: {sum(len(spans) for _, _, spans in kept)} temporal spans "
          f"in {len(kept)} dialogs (a pool of {len(temporal_tagger.span_pool(kept))} distinct), "
          f"tagged by {tagger}", flush=True)
  return {split: [_masked_dialog_example(d) for d in items]
          for split, items in temporal_tagger.weak_supervision_splits(kept).items()}


TIMEDIAL_CLOZE = base.TaskFamily(
    name="timedial_cloze",
    examples=timedial_examples,
    signature=base.SIGNATURES["dialog"],
    splits=("test",),
    quickstart_files={"timedial": {"test": "timedial_test.json"}},
    steps=(),  # each scope's own: its variant
    metric_fn=metrics.timedial_metric_fn,
    tfds=base.TfdsSource(
        "timedial:2.0.0",
        files={"timedial": {"test": ("**/timedial_test*.json", "**/timedial/test*.json")}},
        instructions=("Put TimeDial's test.json in manual_dir as timedial_test*.json or "
                      "timedial/test*.json."),
        release_notes={"1.0.0": "The released items as read.",
                       "1.1.0": "Normalised as read_timedial reads them: options stripped, a space "
                                "after each speaker tag, empty trailing turns dropped.",
                       "2.0.0": "The task's examples: the four options as candidates, labels and "
                                "rules."}),
    variants={scope: {"steps": (functools.partial(preprocessors.timedial_inputs, scope=scope),)}
              for scope in preprocessors.TIMEDIAL_SCOPES},
)
# Unlabeled dialogs have no TFDS builder: files only. The `timedial` files are read to leave
# their dialogs out of training.
TIMEDIAL_WEAK_SUPERVISION = base.TaskFamily(
    name="timedial_weak_supervision",
    examples=weak_supervision_examples,
    signature=base.SIGNATURES["dialog"],
    splits=("train", "validation"),
    # Hand-written dialogs for the demo; bind real ones (JSON lines of {"id", "conversation"}),
    # tagged by the regex tagger, or SUTime's spans as {'sutime': PATH} (`sources.sutime_spans`).
    quickstart_files={"dialogs": {"all": "timedial_unlabeled_dialogs.jsonl"},
                      "timedial": {"test": "timedial_test.json"}},
    steps=(functools.partial(preprocessors.timedial_inputs, scope="full"),),
    metric_fn=metrics.timedial_metric_fn,
)
