"""The Python that the commands the project prints name: the one running it.

A bare `python` is rarely the environment's (outside an activated venv it lacks the dependencies:
`ModuleNotFoundError: No module named 'absl'`), so a command printed for a user to run
(scripts.heap --print_commands, a script's usage examples under --help) names this interpreter: as
a path from the current folder where it lies inside it (`.venv/bin/python`, as the README writes
it), else as its absolute path. Standard library only: scripts.check_environment uses it too.
"""
import os
import re
import shlex
import sys

# `python -m` where a command starts: a line's start, or after a space, a backtick or a parenthesis.
_BARE_PYTHON = re.compile(r"(?<![\w./-])python3?(?= -m )")


def python() -> str:
  """This interpreter, as a command's first word (a path a shell runs as it is)."""
  executable = sys.executable or "python3"
  relative = os.path.relpath(executable)
  if relative.split(os.sep, 1)[0] != os.pardir:
    executable = relative if os.sep in relative else os.path.join(os.curdir, relative)
  return shlex.quote(executable)


def with_this_python(text: str) -> str:
  """`text` with each `python -m ...` command in it naming this interpreter."""
  this = python()
  return _BARE_PYTHON.sub(lambda _: this, text)


def name_it_in_usage() -> None:
  """absl's usage text (--help, a usage error), which is the `__main__` module's docstring, shows
  its `python -m` examples with this interpreter. No-op without absl."""
  try:
    from absl import app  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  usage = app.usage
  if getattr(usage, "names_this_python", False):
    return

  def usage_naming_this_python(*args, **kwargs):
    main = sys.modules["__main__"]
    doc = getattr(main, "__doc__", None)
    if doc:
      main.__doc__ = with_this_python(doc)
    try:
      return usage(*args, **kwargs)
    finally:
      if doc:
        main.__doc__ = doc

  usage_naming_this_python.names_this_python = True
  app.usage = usage_naming_this_python
