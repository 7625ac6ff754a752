r"""Trains a model with gin, on the command line t5x uses.

  python -m scripts.train --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/finetune.gin \
      --gin_file=gin/mixtures/quickstart.gin --gin.MODEL_DIR="'/tmp/run'" --gin.TRAIN_STEPS=200

`--gin.NAME=value` is shorthand for `--gin_bindings='NAME = value'`; a macro set so that no
configuration reads it (a misspelled name) is warned about, or refused with --strict_gin.
Importing t5_tasks registers every task and mixture. Rerunning the same command resumes from the
latest checkpoint in MODEL_DIR.

Exit codes: 0 when TRAIN_STEPS are done; 1 for a setting or input the run cannot use (one line
says which); 130 after Ctrl-C (SIGINT) and 143 after SIGTERM (a preemption, `kill`), both having
saved a checkpoint at the step reached, so that the same command resumes.
"""
import pathlib
import re
import signal
import sys
from typing import Callable, Sequence

import gin
from absl import app
from absl import flags

from runner import train as train_lib
from scripts import console

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
EXIT_SIGINT = 128 + signal.SIGINT  # 130, the shell's code for a command stopped by Ctrl-C
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143, the shell's code for a command stopped by SIGTERM


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  flags.DEFINE_multi_string("gin_file", [], "Gin files, parsed in order (model, run, mixture).", flag_values=fv)
  flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings applied after the files, e.g. 'TRAIN_STEPS = 10'.",
                            flag_values=fv)
  flags.DEFINE_multi_string("gin_search_paths", [str(PROJECT_ROOT)], "Folders gin file names are relative to.",
                            flag_values=fv)
  flags.DEFINE_bool("strict_gin", False, "Refuse (rather than warn about) a --gin.NAME macro that no "
                    "configuration reads.", flag_values=fv)


def rewrite_gin_args(argv: Sequence[str]) -> list[str]:
  """t5x's `--gin.NAME=value` -> `--gin_bindings=NAME = value`; other arguments unchanged."""
  rewritten = []
  for arg in argv:
    if arg.startswith("--gin.") and "=" in arg:
      name, value = arg[len("--gin."):].split("=", 1)
      arg = f"--gin_bindings={name} = {value}"
    rewritten.append(arg)
  return rewritten


def parse_gin(gin_files, gin_bindings, search_paths) -> None:
  for path in search_paths:
    gin.add_config_file_search_path(path)
  gin.parse_config_files_and_bindings(gin_files, gin_bindings, finalize_config=False)


_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")  # `NAME = value`, not `fn.param = value`


def unread_macros(gin_bindings) -> list[str]:
  """Macros set by `NAME = value` bindings that no `%NAME` of the parsed configuration reads."""
  from gin import config as gin_config  # pylint: disable=g-import-not-at-top  # gin's parsed state
  read = {ref.scoped_selector.rsplit("/", 1)[0]
          for ref in gin_config.iterate_references(gin_config._CONFIG)  # pylint: disable=protected-access
          if ref.selector == "gin.macro"}
  bound = [match.group(1) for match in map(_MACRO_BINDING.match, gin_bindings) if match]
  return sorted(set(bound) - read)


def check_macros(gin_bindings, strict: bool) -> None:
  """Warns (strict: refuses) when a command-line macro is read by no configuration."""
  unread = unread_macros(gin_bindings)
  if not unread:
    return
  message = (f"--gin.{', --gin.'.join(unread)}: no configuration reads "
             f"{'this macro' if len(unread) == 1 else 'these macros'} (misspelled?)")
  if strict:
    raise ValueError(message + "; --strict_gin refuses it")
  print(f"WARNING: {message}; the binding has no effect", file=sys.stderr, flush=True)


def start(argv: Sequence[str]) -> None:
  """What every gin script does first: check the arguments, quiet the libraries, register the
  tasks, parse the gin files and bindings."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  check_macros(flags.FLAGS.gin_bindings, flags.FLAGS.strict_gin)


def one_line_errors(main: Callable[[Sequence[str]], None]) -> Callable[[Sequence[str]], None]:
  """`main` whose user-caused failures end the process with their message, not a traceback:
  a setting or input it cannot use exits 1, Ctrl-C exits 130."""
  def guarded(argv):
    try:
      main(argv)
    except KeyboardInterrupt:
      print("interrupted (Ctrl-C); rerun the same command to resume", file=sys.stderr, flush=True)
      sys.exit(EXIT_SIGINT)
    except (ValueError, FileNotFoundError) as error:
      print(f"error: {error}", file=sys.stderr, flush=True)
      sys.exit(1)
  return guarded


def main(argv: Sequence[str]) -> None:
  start(argv)
  from t5_tasks import vocab  # pylint: disable=g-import-not-at-top  # after gin: the run's vocabulary
  result = gin.get_configurable(train_lib.train)(run_config=gin.config_str(),
                                                 vocabulary_size=vocab.get_vocabulary().vocab_size)
  if result.signal_number is None:
    print(f"stopped at step {result.step}", flush=True)
    return
  name = signal.Signals(result.signal_number).name
  print(f"{name}: saved the checkpoint of step {result.step} in {gin.query_parameter('%MODEL_DIR')}; "
        "rerun the same command to resume", flush=True)
  sys.exit(EXIT_SIGINT if result.signal_number == signal.SIGINT else EXIT_SIGTERM)


if __name__ == "__main__":
  define_flags()
  app.run(one_line_errors(main), flags_parser=lambda argv: flags.FLAGS(rewrite_gin_args(argv)))
