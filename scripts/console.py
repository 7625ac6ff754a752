"""The console of every script: the project's own lines (progress, results, paths).

orbax, seqio, TFDS and the HTTP server log every file and request at INFO through absl;
`--verbosity=0` (or higher) on any script's command line brings those lines back.
"""
from absl import flags
from absl import logging


def quiet_libraries() -> None:
  """Shows the libraries' warnings and errors only, unless --verbosity was given."""
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
