"""A script's command line run in the test's own process, as its `__main__` runs it.

`python -m scripts.X ARGV` costs a second interpreter (~10 s of imports on two cores) and compiles
its programs again; in process, the absl flags are parsed from the rewritten gin arguments
(scripts/gin_cli.py's `rewrite_gin_args`) and `one_line_errors(main)` runs, as `app.run` would run it.
The commands of README.md and docs/ and a few exit-code checks stay real subprocesses (tests/test_readme.py,
tests/helpers/processes.py); this is for the tests that check what a command does.
"""
import contextlib
import dataclasses
import io
import os

from tests.conftest import PROJECT_ROOT


@dataclasses.dataclass(frozen=True)
class CommandResult:
  code: object  # the exit code: 0, SystemExit's code, or "started" (see `run_script`)
  stdout: str
  stderr: str


def define_script_flags():
  """The scripts' flags on absl's FLAGS (scripts/gin_cli.py's `define_flags`), once per process."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import gin_cli  # pylint: disable=g-import-not-at-top
  if "gin_file" not in flags.FLAGS:
    gin_cli.define_flags()


def run_script(main, argv, program: str = "script", cwd=PROJECT_ROOT, started=()) -> CommandResult:
  """Runs `main` (a script's `main(argv)`) on the command line `program ARGV` in this process, from
  `cwd` (the project root by default; None: where the test is), with its stdout and stderr captured.

  `code` is 0 when it returns, the code of the SystemExit that ends it (`one_line_errors` exits 1 on
  a user's error, 130 on Ctrl-C), or "started" when it raises one of the exception types `started`
  (a test's stub ending a run it has accepted). Any other exception escapes. Flags and gin's
  configuration are cleared before and after.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  import gin  # pylint: disable=g-import-not-at-top
  from scripts import gin_cli  # pylint: disable=g-import-not-at-top

  define_script_flags()
  flags.FLAGS.unparse_flags()
  remaining = flags.FLAGS(gin_cli.rewrite_gin_args([program, *argv]))
  gin.clear_config()
  out, err, previous = io.StringIO(), io.StringIO(), os.getcwd()
  try:
    if cwd is not None:
      os.chdir(cwd)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        gin_cli.one_line_errors(main)(remaining)
        code = 0
      except SystemExit as exit_:
        code = exit_.code
      except started:
        code = "started"
  finally:
    os.chdir(previous)
    flags.FLAGS.unparse_flags()
    gin.clear_config()
  return CommandResult(code, out.getvalue(), err.getvalue())
