"""The console of every script: the project's own lines (progress, results, paths), and `run`,
the absl `app.run` every script's `__main__` calls.

orbax, seqio, TFDS and the HTTP server log every file and request at INFO through absl;
`--verbosity=0` (or higher) on any script's command line brings those lines back.
"""
import logging as std_logging
import sys
import traceback
from typing import Callable, Sequence

from absl import app
from absl import flags
from absl import logging

# seqio's warnings, once per task and dataset build, about what this project does on purpose:
# tasks read from files (not a seqio cache) and test-only tasks in a training mixture. The
# run's own "training on ..." line says which tasks train and with what share.
_EXPECTED_WARNINGS = ("not cached so using number of input examples",
                      "Using an uncached FunctionDataset for training",
                      "split, skipping.")


def _unexpected(record) -> bool:
  return not any(text in record.getMessage() for text in _EXPECTED_WARNINGS)


def _not_gins_probe(record) -> bool:
  """gin looks for an included file on Python's path before its search paths (the project root),
  logging an error for each miss when a process runs outside the project (a pod host's folder)."""
  return not (record.filename == "resource_reader.py" and record.getMessage().startswith("Path not found: "))


def _not_orbax_write_failure(record) -> bool:
  """orbax logs a failed write with its traceback from each of its threads, the error in the
  message or in the record's exception; the main thread then says it in one line
  (runner.checkpoints.CheckpointWriteError)."""
  if "/orbax/" not in record.pathname:
    return True
  from runner import checkpoint_integrity  # pylint: disable=g-import-not-at-top  # orbax (and jax) run by now
  said = record.getMessage() + ("" if not record.exc_info else f" {record.exc_info[1]}")
  return not checkpoint_integrity.says_no_space(said)


def _without_closed_loop_callbacks(report=sys.unraisablehook):
  """An unraisable-exception hook that drops one: a failed orbax save (a full disk) closes its
  threads' event loops while TensorStore still completes the other writes, each completion's
  callback then finds its loop closed. The save's failure is the main thread's one line."""
  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError) and str(unraisable.exc_value) == "Event loop is closed"):
      report(unraisable)
  return hook


def quiet_libraries() -> None:
  """Shows the libraries' warnings and errors only, unless --verbosity was given."""
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
    logging.get_absl_logger().addFilter(_unexpected)
    logging.get_absl_logger().addFilter(_not_orbax_write_failure)
    logging.get_absl_handler().addFilter(_not_gins_probe)  # gin logs through the root logger
    # gcsfs logs each failed request with its traceback; storage.StorageError says it in one line.
    std_logging.getLogger("gcsfs").setLevel(std_logging.CRITICAL)
    sys.unraisablehook = _without_closed_loop_callbacks()


# absl's help flags (--helpshort is a HelpFlag): each prints the help to stdout, then exits 1.
_HELP_FLAGS = (app.HelpFlag, app.HelpfullFlag, app.HelpXMLFlag)


def _asked_for_help(exit_: SystemExit) -> bool:
  """Whether `exit_` is a help flag's own, raised while the flags were parsed."""
  return any(isinstance(frame.f_locals.get("self"), _HELP_FLAGS) for frame, _ in traceback.walk_tb(exit_.__traceback__))


def run(main: Callable[[Sequence[str]], None],
        rewrite_args: Callable[[Sequence[str]], list[str]] | None = None) -> None:
  """absl's `app.run(main)`, as every script's `__main__` runs it, with the command line's
  arguments `rewrite_args` first (gin_cli's --gin.NAME shorthand). Asking for help (--help,
  --helpshort, --helpfull, --helpxml) prints it and exits 0, where absl exits 1 as for an error; a
  flag absl cannot parse (unknown, or a value of the wrong kind) is absl's two lines, exit 1; the
  usage text is shown for --help and for main's app.UsageError (a command line of the wrong shape)."""
  def parse_flags(argv):
    try:
      return app.parse_flags_with_usage(rewrite_args(argv) if rewrite_args else argv)
    except SystemExit as exit_:
      if exit_.code == 1 and _asked_for_help(exit_):
        sys.exit(0)
      raise
  app.run(main, flags_parser=parse_flags)
