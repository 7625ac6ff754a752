r"""The gin command line every gin script shares (t5x's): the flags, the `--gin.NAME=value` shorthand,
gin files found on the search paths, parse and kind checks that name the binding at fault, and
`one_line_errors`, which turns a user's error into one paragraph and an exit code.

A script's `__main__` is `gin_cli.run(main)` (`gin_cli.run(main, define_flags)` with flags of its own).
`--gin.NAME=value` is shorthand for `--gin_bindings='NAME = value'`; a macro set so that no
configuration reads it (a misspelled name) is warned about, or refused with --strict_gin. A binding
gin cannot parse, a %NAME that nothing defines and a macro bound to the wrong kind of value (a
string for TRAIN_STEPS: MACRO_KINDS below) are refused before anything runs, naming the binding.
"""
import io
import os
import pathlib
import re
import signal
import sys
import tokenize
import traceback
from typing import Callable, Sequence

import gin
from absl import app
from absl import flags

from runner import checkpoints
from runner import lease as lease_lib
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


def _shown(text: str, limit: int = 80) -> str:
  """`text` as a message quotes it: on one line, a long one cut short."""
  text = " ".join(str(text).split())
  return text if len(text) <= limit else text[:limit - 3] + "..."


def _as_flag(binding: str) -> str:
  """`NAME = value` as the command line wrote it, `--gin.NAME=value`."""
  name, equals, value = binding.partition("=")
  return _shown(f"--gin.{name.strip()}={value.strip()}" if equals else f"--gin_bindings={binding}")


def _found(gin_file: str, search_paths) -> str:
  """`gin_file` as given when it exists, else under the first search path that holds it: gin
  would log an error line for each place it looked in vain (a pod host runs in its own folder)."""
  if os.path.isabs(gin_file) or os.path.exists(gin_file):
    return gin_file
  return next((os.path.join(path, gin_file) for path in search_paths
               if os.path.exists(os.path.join(path, gin_file))), gin_file)


def parse_gin(gin_files, gin_bindings, search_paths) -> None:
  """Parses the gin files, then each binding. What gin refuses while parsing (a file it cannot
  open or read, a binding it cannot parse, a reference to no configurable) is the command line's
  fault, never the code's: it becomes a ValueError that names the file or the binding. The
  bindings are parsed one at a time (as gin would parse them joined) to know which one it was."""
  for path in search_paths:
    gin.add_config_file_search_path(path)
  for gin_file in gin_files:
    try:
      gin.parse_config_file(_found(gin_file, search_paths))
    except SyntaxError as error:
      raise ValueError(f"--gin_file={gin_file}: gin cannot parse line {error.lineno} of "
                       f"{error.filename or gin_file}: {error.msg}") from None
    except tokenize.TokenError as error:  # an unclosed bracket or ''' string, met at the end of the file
      name = _tokenized_file(error) or _found(gin_file, search_paths)
      line, what = _left_open(error, _text_of(name))
      raise ValueError(f"--gin_file={gin_file}: gin cannot parse line {line} of {name}: {what}") from None
    except (ValueError, ImportError, OSError) as error:  # OSError: gin's "Unable to open file"
      raise ValueError(f"--gin_file={gin_file}: {_gin_reason(error)}") from None
  for binding in gin_bindings:
    try:
      gin.parse_config(binding)
    except (SyntaxError, tokenize.TokenError) as error:  # TokenError: an unclosed bracket
      reason = error.msg if isinstance(error, SyntaxError) else _left_open(error, binding)[1]
      raise ValueError(f"{_as_flag(binding)}: gin cannot parse this binding ({reason.rstrip('.')}); "
                       "a value is a Python literal, a string in quotes (--gin.MODEL_DIR=\"'/tmp/run'\"), "
                       "a %MACRO or an @configurable") from None
    except (ValueError, ImportError) as error:
      raise ValueError(f"{_as_flag(binding)}: {_gin_reason(error)}") from None


def _tokenized_file(error: tokenize.TokenError) -> str | None:
  """The gin file whose text raised `error`: gin parses an `include`d file with a parser of its
  own, and the tokenizer's error names no file, so the innermost parser in the traceback says."""
  from gin import config_parser  # pylint: disable=g-import-not-at-top  # gin's parser, for its file name
  parsers = [frame.f_locals["self"] for frame, _ in traceback.walk_tb(error.__traceback__)
             if isinstance(frame.f_locals.get("self"), config_parser.ConfigParser)]
  return getattr(parsers[-1], "_filename", None) if parsers else None


def _text_of(gin_file: str) -> str | None:
  """The file's text, read again to find the bracket it leaves open; None if it cannot be read."""
  try:
    return pathlib.Path(gin_file).read_text(encoding="utf-8")
  except (OSError, ValueError):
    return None


def _left_open(error: tokenize.TokenError, text: str | None) -> tuple[int, str]:
  """(line, what) of what `text` leaves open at its end, for the TokenError gin let through: the
  innermost bracket never closed (the line it opens on: the tokenizer's own line is the end of the
  text), else the triple-quoted string where the tokenizer says it starts."""
  seen = error
  while len(seen.args) != 2 and seen.__context__ is not None:
    seen = seen.__context__  # gin's proxy for an error in an `include`d file has no args; it wraps this
  message, (line, _) = seen.args if len(seen.args) == 2 else ("", (1, 0))
  opened = []
  try:
    for token in tokenize.generate_tokens(io.StringIO(text or "").readline):
      if token.type == tokenize.OP and token.string in "([{":
        opened.append(token)
      elif token.type == tokenize.OP and token.string in ")]}" and opened:
        opened.pop()
  except tokenize.TokenError:
    pass
  if opened:
    return opened[-1].start[0], f"'{opened[-1].string}' was never closed"
  if "string" in message:
    return line, "a triple-quoted string was never closed"
  return line, f"the text ends inside a bracket ({message})"


def _gin_reason(error: Exception) -> str:
  """gin's message without the lines it adds (where in the text, a caret, the configurable called)."""
  return _shown(str(error).split("\n", 1)[0], limit=300)


_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")  # `NAME = value`, not `fn.param = value`


def read_macros() -> set[str]:
  """The macros some `%NAME` of the parsed configuration reads."""
  from gin import config as gin_config  # pylint: disable=g-import-not-at-top  # gin's parsed state
  return {ref.scoped_selector.rsplit("/", 1)[0]
          for ref in gin_config.iterate_references(gin_config._CONFIG)  # pylint: disable=protected-access
          if ref.selector == "gin.macro"}


def unread_macros(gin_bindings) -> list[str]:
  """Macros set by `NAME = value` bindings that no `%NAME` of the parsed configuration reads."""
  bound = [match.group(1) for match in map(_MACRO_BINDING.match, gin_bindings) if match]
  return sorted(set(bound) - read_macros())


def check_required_macros() -> None:
  """Refuses a macro the configuration reads but leaves at `%gin.REQUIRED` (gin would pass its
  placeholder object on, to fail far away as a TypeError), naming the flag that sets it."""
  required = sorted(name for name, value in macro_bindings().items()
                    if isinstance(value, gin.config.ConfigurableReference)
                    and value.scoped_selector == "gin.REQUIRED/gin.constant" and name in read_macros())
  if required:
    raise ValueError(f"{', '.join(required)} must be set (the gin files leave "
                     f"{'it' if len(required) == 1 else 'them'} %gin.REQUIRED): add "
                     + " ".join(f"--gin.{name}=..." for name in required))


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


def macro_bindings() -> dict:
  """Every macro the parsed configuration binds, with its value (a gin reference, as
  `@config.T5Config()` or `%MODEL_DIR`, stays unevaluated)."""
  from gin import config as gin_config  # pylint: disable=g-import-not-at-top  # gin's parsed state
  return {scope: gin.query_parameter(f"%{scope}")
          for scope, selector in list(gin_config._CONFIG)  # pylint: disable=protected-access
          if selector == "gin.macro" and scope}


def _whole(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value) -> bool:
  return isinstance(value, str)


def _text_or_none(value) -> bool:
  return value is None or isinstance(value, str)


def _flag(value) -> bool:
  return isinstance(value, bool)


def _flag_or_none(value) -> bool:
  return value is None or isinstance(value, bool)


def _positive_number_or_none(value) -> bool:
  return value is None or (_number(value) and value > 0)


def _lengths(value) -> bool:
  return value is None or (isinstance(value, dict) and {"inputs", "targets"} <= set(value)
          and all(isinstance(k, str) and _whole(v) and v > 0 for k, v in value.items()))


def _fraction(value) -> bool:
  return _number(value) and 0 <= value <= 1


def _mesh(value) -> bool:
  return (isinstance(value, (tuple, list)) and len(value) == 2 and all(_whole(v) and (v > 0 or v == -1) for v in value)
          and tuple(value) != (-1, -1))


def _rules(value) -> bool:
  return isinstance(value, (tuple, list)) and all(
      isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], str)
      and (rule[1] is None or isinstance(rule[1], (str, tuple, list))) for rule in value)


def _reference_only(value) -> bool:
  return False  # a literal: only a gin reference (checked before) will do


# The kind of value each of the gin files' macros takes (t5x's names), checked when the command
# line is parsed: a wrong kind is refused in one line naming the macro, before a configurable is
# called with it (and fails somewhere inside it, as a TypeError far from the binding).
MACRO_KINDS = {
    **dict.fromkeys(("TRAIN_STEPS", "BATCH_SIZE", "ACCUMULATION_STEPS", "WARMUP_STEPS", "MIXTURE_RATE_CAP",
                     "SEED", "NUM_SAMPLES", "EVAL_EVERY", "KL_HORIZON", "PPO_EPOCHS", "PPO_MINIBATCHES",
                     "BEST_OF_N_MAX"), (_whole, "a whole number")),
    **dict.fromkeys(("LEARNING_RATE", "WEIGHT_DECAY", "Z_LOSS", "TEMPERATURE", "KL_COEFFICIENT", "CLIP_RANGE",
                     "VALUE_CLIP_RANGE", "VALUE_COEFFICIENT"), (_number, "a number")),
    **dict.fromkeys(("DROPOUT_RATE", "TOP_P", "GAMMA", "LAMBDA"), (_fraction, "a number from 0 to 1")),
    "KL_TARGET": (_positive_number_or_none, "a positive number of nats, or None (a fixed KL_COEFFICIENT)"),
    **dict.fromkeys(("MODEL_DIR", "CHECKPOINT_PATH", "POLICY_CHECKPOINT_PATH", "EVAL_OUTPUT_DIR", "INFER_OUTPUT_FILE",
                     "MIXTURE_OR_TASK_NAME", "OBJECTIVE", "OPTIMIZER", "SCHEDULE", "SPLIT", "SCORER",
                     "NORMALIZATION", "EVAL_MIXTURE_OR_TASK_NAME", "EVAL_SPLIT", "BEST_MODE",
                     "ACTIVATION_DTYPE", "TRUNCATED_CANDIDATES"),
                    (_text, "a string in quotes, e.g. --gin.NAME=\"'text'\"")),
    **dict.fromkeys(("INITIAL_CHECKPOINT_PATH", "REWARD_CHECKPOINT_PATH", "INPUT_FILE", "VALUE_CHECKPOINT_PATH",
                     "NORMALIZED_CHECKPOINT_PATH", "BEST_METRIC", "COMPARISON_SPLIT"),
                    (_text_or_none, "a string in quotes (a path) or None")),
    **dict.fromkeys(("USE_CACHED_TASKS", "REMAT"), (_flag, "True or False")),
    "MULTI_HOST": (_flag_or_none, "True, False or None"),
    "DEVICE_MEMORY_GIB": (_positive_number_or_none, "a positive number of GiB, or None (what the device reports)"),
    "TASK_FEATURE_LENGTHS": (_lengths, "a dict of positive lengths with 'inputs' and 'targets', "
                                       "e.g. {'inputs': 512, 'targets': 128}, or None (evaluation "
                                       "and inference: the checkpoint's recorded ones)"),
    "MESH_SHAPE": (_mesh, "a (data, model) pair of device counts, one of them -1 at most (the devices the "
                          "other leaves), e.g. (-1, 1)"),
    "LOGICAL_AXIS_RULES": (_rules, "a list of (logical axis, mesh axis) pairs"),
    "MODEL_CONFIG": (_reference_only, "a model, @config.T5Config() as a gin/models file binds it"),
}


def _holds_reference(value) -> bool:
  """Whether `value` is, or holds, a gin reference (`%NAME`, `@fn()`): known only when called."""
  if isinstance(value, gin.config.ConfigurableReference):
    return True
  if isinstance(value, dict):
    return any(map(_holds_reference, (*value.keys(), *value.values())))
  return isinstance(value, (list, tuple)) and any(map(_holds_reference, value))


def check_macro_kinds() -> None:
  """Refuses a macro bound to a value of the wrong kind (a string for TRAIN_STEPS, ...)."""
  for name, value in macro_bindings().items():
    if name not in MACRO_KINDS or _holds_reference(value):
      continue
    accepts, kind = MACRO_KINDS[name]
    if not accepts(value):
      raise ValueError(f"{name} must be {kind.replace('NAME', name)}; got {_shown(repr(value), 60)} "
                       f"({type(value).__name__})")


def check_macro_references(gin_bindings) -> None:
  """Refuses a `%NAME` that no binding defines (gin would fail, with a TypeError about its own
  `macro()`, when it calls the configurable that reads it)."""
  from gin import config as gin_config  # pylint: disable=g-import-not-at-top
  undefined = sorted({ref.scoped_selector.rsplit("/", 1)[0]
                      for ref in gin_config.iterate_references(gin_config._CONFIG)  # pylint: disable=protected-access
                      if ref.selector == "gin.macro"} - set(macro_bindings()))
  if undefined:
    readers = [_as_flag(b) for b in gin_bindings if any(f"%{name}" in b for name in undefined)]
    raise ValueError(f"{'; '.join(readers) + ': ' if readers else ''}%{', %'.join(undefined)} is "
                     "defined by no binding (misspelled?)")


def start(argv: Sequence[str]) -> None:
  """What every gin script does first: check the arguments, quiet the libraries, register the
  tasks, parse the gin files and bindings."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  console.quiet_libraries()
  import t5_tasks  # pylint: disable=g-import-not-at-top,unused-import  # registers the tasks
  parse_gin(flags.FLAGS.gin_file, flags.FLAGS.gin_bindings, flags.FLAGS.gin_search_paths)
  check_macros(flags.FLAGS.gin_bindings, flags.FLAGS.strict_gin)
  check_macro_references(flags.FLAGS.gin_bindings)
  check_required_macros()
  check_macro_kinds()


def one_line_errors(main: Callable[[Sequence[str]], None]) -> Callable[[Sequence[str]], None]:
  """`main` whose user-caused failures end the process with their message (one paragraph), not a
  traceback: a setting or input it cannot use exits 1; a run that SIGINT or SIGTERM stopped at an
  item boundary (evaluation, generation) prints its line and exits 130 or 143, as training does;
  Ctrl-C before that exits 130."""
  def guarded(argv):
    try:
      main(argv)
    except checkpoints.PreemptionGuard.Interrupted as stopped:
      print(stopped.line, flush=True)
      sys.exit(EXIT_SIGINT if stopped.signal_number == signal.SIGINT else EXIT_SIGTERM)
    except KeyboardInterrupt:
      print("interrupted (Ctrl-C); rerun the same command to resume", file=sys.stderr, flush=True)
      sys.exit(EXIT_SIGINT)
    # ValueError: a setting the run cannot use (the scripts' and runner's checks, gin's parse errors
    # as parse_gin words them, a configurable refusing a bound value); OSError: a path or the
    # machine (a missing file, permissions, a name too long, a full disk: storage names the file
    # it was writing); NonFiniteLossError: a run whose loss diverged (a LEARNING_RATE of 1e30),
    # with its last good checkpoint; the lease errors: a MODEL_DIR another training holds (or took
    # over from this one). Anything else (a
    # TypeError, a KeyError) is a bug to fix where it arises and keeps its traceback: the command
    # line's wrong kinds of values are refused before any configurable runs (check_macro_kinds).
    except (ValueError, OSError, train_lib.NonFiniteLossError, lease_lib.RunDirectoryInUseError,
            lease_lib.LeaseLostError) as error:
      print(f"error: {one_paragraph(error)}", file=sys.stderr, flush=True)
      sys.exit(1)
  return guarded


# gin's note on an error raised inside a configurable: which one (and its address), not the binding.
_GIN_CALL_NOTE = re.compile(r"\n\s*In call to configurable .*$", re.MULTILINE)


def one_paragraph(error: Exception) -> str:
  """The error's message without gin's `In call to configurable ...` lines, blank lines removed,
  and a line that quotes a very long value (a path) cut short."""
  text = _GIN_CALL_NOTE.sub("", str(error))
  return "\n".join(_shown(line.rstrip(), limit=500) if len(line) > 500 else line.rstrip()
                   for line in text.splitlines() if line.strip())


def run(main: Callable[[Sequence[str]], None], define_script_flags: Callable[[], None] | None = None) -> None:
  """A gin script's `__main__`: the gin flags (and the script's own), the --gin.NAME shorthand,
  and `main` run with one_line_errors by console.run (--help exits 0)."""
  define_flags()
  if define_script_flags is not None:
    define_script_flags()
  console.run(one_line_errors(main), rewrite_args=rewrite_gin_args)
