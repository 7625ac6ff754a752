"""seqio tasks and mixtures for scoring models; importing this package registers them all.

Task and mixture names: `t5_tasks.tasks` and `t5_tasks.mixtures`; readers of the released
data formats: `t5_tasks.sources`.
"""
import contextlib
import os
import sys


@contextlib.contextmanager
def _silent_stderr():
  """Sends file descriptor 2 to /dev/null: TensorFlow's C++ start-up lines are written there,
  and setting TF_CPP_MIN_LOG_LEVEL from Python once the process runs does not stop them."""
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  try:
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


# What Keras imports only for features nothing here uses: scikit-learn for its estimator wrappers
# (~0.5 s of CPU), matplotlib's pyplot for its image plots (~0.2 s). A report imports pyplot itself.
KERAS_EXTRAS = ("sklearn", "matplotlib")


@contextlib.contextmanager
def _keras_without_extras():
  """TensorFlow imports all of Keras 3 at start-up (its SavedModel registry), and seqio's
  tensorflow_text needs it: every data command pays for it. Keras is told KERAS_EXTRAS are absent
  while seqio loads (it imports them in `try` blocks); a module that imports them later (the
  baselines, the report) gets them as usual."""
  hidden = [name for name in KERAS_EXTRAS if name not in sys.modules]
  for name in hidden:
    sys.modules[name] = None  # `import name` raises ImportError, which Keras expects
  try:
    yield
  finally:
    for name in hidden:
      if sys.modules.get(name, False) is None:
        del sys.modules[name]


# TensorFlow here runs only the input pipeline (string and integer ops, no float math); its oneDNN
# kernels print an absl error line on the console the first time an int64 op runs on a CPU whose
# AVX-512 they do not accept (`oneDNN supports DT_INT64 only on platforms with AVX-512`: in `make
# demo`'s training and evaluation alike on the 2-core CI machine). Read when TensorFlow first
# places an op, so it holds even where TensorFlow was imported before this package.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

_quiet = _silent_stderr() if "tensorflow" not in sys.modules else contextlib.nullcontext()
with _quiet, _keras_without_extras():
  import seqio  # pylint: disable=g-import-not-at-top,unused-import

from t5_tasks import mixtures  # pylint: disable=g-import-not-at-top
from t5_tasks import tasks  # pylint: disable=g-import-not-at-top

tasks.register_tasks()
mixtures.register_mixtures()
