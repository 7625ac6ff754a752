"""HEAP (Mehri & Shwartz 2023): released human judgments turned into preference comparisons, one
task per criterion (`t5_tasks.families.heap` declares them).

- `criteria`: the 22 criteria, Table 4's layout and hyperparameters, Table 5's instructions and
  Table 3's clusters, as data.
- `readers`, `hate_speech_readers`: the validating readers of each source's released files.
- `comparisons`: each source's records -> (good, bad) comparisons; Table 5's inputs; the splits.
- `mixtures`: the training protocols of §4.2 as mixtures.

Everything public of the first four is also a name of this package (`heap.HEAP_CRITERIA`,
`heap.read_heap_comparisons`), as it was of the single module it replaces.
"""
# pylint: disable=wildcard-import,unused-wildcard-import
from t5_tasks.heap.comparisons import *
from t5_tasks.heap.criteria import *
from t5_tasks.heap.hate_speech_readers import *
from t5_tasks.heap.readers import *
