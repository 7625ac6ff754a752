"""The task families: one module each, declaring its `TaskFamily` with its example builder and its
gin settings; `t5_tasks.tasks` registers them.

A family is the tasks over one dataset that share a reader, an example signature, splits,
preprocessing and a metric. Its `examples` function turns the files bound to its datasets
into example dicts through the dataset's validating reader (`t5_tasks.sources`); each of its
tasks is registered as `<name>` over those files and, where it declares a `TfdsSource`, as
`<name>_tfds` over the same example dicts prepared by `t5_tasks.sources.tfds_builders`.
Variants (TimeDial's scopes, HEAP's criteria) are tasks that replace a few of their family's
fields.

Every module of this package but `base` is imported here and each `TaskFamily` it holds is
collected into `FAMILIES`: adding a family is adding its module (and its reader).
"""
import importlib
import pkgutil

# pylint: disable=unused-import  (the shared names, for the family modules' users)
from t5_tasks.families.base import CLOZE_SIGNATURE
from t5_tasks.families.base import Examples
from t5_tasks.families.base import file_key
from t5_tasks.families.base import Files
from t5_tasks.families.base import READ_REPORTS
from t5_tasks.families.base import SIGNATURES
from t5_tasks.families.base import SPLITS
from t5_tasks.families.base import TaskFamily
from t5_tasks.families.base import TfdsSource
from t5_tasks.families.asq import ASQ_INTENT_CLOZE
from t5_tasks.families.asq import asq_examples
from t5_tasks.families.heap import HEAP
from t5_tasks.families.heap import heap_examples
from t5_tasks.families.heap import heap_instruction
from t5_tasks.families.heap import heap_split
from t5_tasks.families.summarize import comparison_filter
from t5_tasks.families.summarize import reference_filter
from t5_tasks.families.summarize import sft_examples
from t5_tasks.families.summarize import summarize_examples
from t5_tasks.families.summarize import SUMMARIZE_FEEDBACK_PREFERENCE
from t5_tasks.families.summarize import SUMMARIZE_FEEDBACK_SFT
from t5_tasks.families.timedial import TIMEDIAL_CLOZE
from t5_tasks.families.timedial import TIMEDIAL_WEAK_SUPERVISION
from t5_tasks.families.timedial import timedial_examples
from t5_tasks.families.turingadvice import TURINGADVICE_GENERATION


# The order the tasks have always been registered (and listed) in; a module not named here follows,
# by name.
_FIRST = ("turingadvice", "timedial", "asq", "summarize", "heap")


def _declared_families() -> tuple[TaskFamily, ...]:
  """Each module's `TaskFamily` declarations, declarations in module order."""
  names = sorted((m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"),
                 key=lambda name: (_FIRST.index(name) if name in _FIRST else len(_FIRST), name))
  modules = [importlib.import_module(f"{__name__}.{name}") for name in names]
  declared = {id(value): value for module in modules for value in vars(module).values()
              if isinstance(value, TaskFamily)}  # by identity: a module may import another's
  return tuple(declared.values())


FAMILIES = _declared_families()
