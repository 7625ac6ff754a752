"""A fuzz test of the gin command line: random `--gin.MACRO=value` bindings, drawn from the macro
names the gin files really bind, with wrong types and values (and misspelled names). No binding
may put a Python traceback in front of the user: every refusal is one paragraph (exit 1) that
names the binding, and anything else is a run that starts.

The cases run in this process through the wrapper the command line uses (`one_line_errors(main)`,
after absl parses the rewritten flags as `app.run` does): a subprocess costs ~8 s of imports each.
A case the scripts accept stops where the run would initialise its parameters and compile (a stub
raises `_ReachedTraining` there: a tiny run's compiling alone takes a minute on two cores). By then
gin's parsing, the command line's checks, the configurables' calls with the bound values,
preflight, the mesh, the mixture's tasks and MODEL_DIR's files have run; the kinds of the values
read only later (lengths, seed, z-loss) are checked with the command line (scripts/gin_cli.py's
MACRO_KINDS). A few cases run as real `python -m scripts.train` and
`python -m scripts.evaluate` processes, to show the command line behaves as the wrapper does.
"""
import errno
import os
import pathlib
import random
import re
import subprocess
import sys

import gin
import pytest
from absl import flags

from scripts import evaluate as evaluate_script
from scripts import train as train_script
from tests.conftest import PROJECT_ROOT
from tests.helpers import cli
from tests.helpers.processes import script_env

GIN = PROJECT_ROOT / "gin"
# The files the fuzzed commands read: a run file, then the quickstart (tiny model + quickstart mixture).
TRAIN_FILES = ("gin/runs/finetune.gin", "gin/quickstart.gin")
EVAL_FILES = ("gin/runs/eval.gin", "gin/quickstart.gin")
# A small run, should a case get as far as the data.
SMALL = ("--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=2", "--gin.TASK_FEATURE_LENGTHS={'inputs': 32, 'targets': 8}")


def macro_names(files) -> list[str]:
  """The ALL_CAPS macros bound (`NAME = value` at the start of a line) in `files`."""
  names = set()
  for path in files:
    names.update(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", pathlib.Path(path).read_text(), re.MULTILINE))
  return sorted(names)


def _train_files() -> list[pathlib.Path]:
  """The files a fuzzed training command reads (quickstart.gin includes the tiny model and mixture)."""
  return [GIN / "runs" / "finetune.gin", GIN / "quickstart.gin", GIN / "models" / "t5_1_1" / "tiny.gin",
          GIN / "mixtures" / "quickstart.gin"]


ALL_MACROS = macro_names([*GIN.glob("runs/*.gin"), GIN / "quickstart.gin", *GIN.glob("models/**/*.gin"),
                          *GIN.glob("mixtures/*.gin")])
TRAIN_MACROS = macro_names(_train_files())

LONG = "'" + "x" * 3000 + "'"
WRONG_VALUES = ("'abc'", "-1", "0", "1e30", "None", "[1,2]", "{'a': 1}", "'unterminated", "@nonexistent_fn",
                "%UNDEFINED_MACRO", "True", "3.5", "", LONG, "(1, 2, 3)", "-0.5", "'float64'")


def _typo(rng: random.Random, name: str) -> str:
  """A misspelling: a letter dropped or doubled, or the name in lower case."""
  kind, at = rng.randrange(3), rng.randrange(len(name))
  if kind == 0:
    return name[:at] + name[at + 1:]
  if kind == 1:
    return name[:at] + name[at] + name[at:]
  return name.lower()


def draw_cases(rng: random.Random, count: int) -> list[tuple[tuple[str, ...], bool]]:
  """`count` cases of 1-2 bindings of wrong values to real macros, some with a misspelled name;
  each with whether it passes --strict_gin. Macros the training command reads are favoured."""
  cases = []
  for _ in range(count):
    bindings = []
    for _ in range(rng.choice((1, 1, 2))):
      name = rng.choice(TRAIN_MACROS if rng.random() < 0.85 else ALL_MACROS)
      if rng.random() < 0.12:
        name = _typo(rng, name)
      value = rng.choice(WRONG_VALUES)
      if (name, value) == ("MULTI_HOST", "True"):
        # Right on a pod slice; here jax.distributed finds no coordinator, and says so without
        # naming MULTI_HOST (runner/partitioning.py's initialize_distributed): not drawn.
        value = "'abc'"
      bindings.append(f"--gin.{name}={value}")
    cases.append((tuple(bindings), rng.random() < 0.5))
  return cases


CASES = draw_cases(random.Random(0), 60)


class _ReachedTraining(Exception):
  """Raised in place of the parameters' initialisation: the run got as far as training."""


@pytest.fixture(scope="module", autouse=True)
def cli_flags():
  """The scripts' flags, defined on absl's FLAGS as their `__main__` does (once per process)."""
  cli.define_script_flags()
  yield
  flags.FLAGS.unparse_flags()
  gin.clear_config()


@pytest.fixture
def stub_start(monkeypatch):
  """Stops an accepted run where it would initialise (or restore) the parameters and compile."""
  from runner import train as train_lib  # pylint: disable=g-import-not-at-top

  def reached(*args, **kwargs):
    del args, kwargs
    raise _ReachedTraining
  monkeypatch.setattr(train_lib, "_initialise_or_restore", reached)


def run_command(main, files, bindings, strict=False) -> tuple[object, str, str]:
  """(exit code or "started", stderr, stdout) of the command line `files` + `bindings`, run in this
  process as `app.run(one_line_errors(main))` runs it, from the test's directory; any other
  exception escapes."""
  argv = [*(f"--gin_file={f}" for f in files), *bindings] + (["--strict_gin"] if strict else [])
  result = cli.run_script(main, argv, cwd=None, started=_ReachedTraining)
  return result.code, result.stderr, result.stdout


def _error_paragraph(stderr: str) -> str:
  """The refusal: from the `error: ` line to the end of stderr."""
  start = stderr.find("error: ")
  assert start >= 0, stderr[-3000:]
  return stderr[start:].rstrip("\n")


def _named(binding: str) -> list[str]:
  """What a message about `--gin.NAME=value` may name: the macro, or (a start of) the value."""
  name, value = binding[len("--gin."):].split("=", 1)
  words = [name]
  value = value.strip().strip("'\"")
  if value:
    words.append(value[:40])
  return words


def assert_one_paragraph_refusal(code, stderr, stdout, bindings):
  assert "Traceback (most recent call last)" not in stderr + stdout, stderr[-5000:]
  assert code == 1, f"exit {code!r}\n{stderr[-5000:]}"
  message = _error_paragraph(stderr)
  lines = message.splitlines()
  assert len(lines) <= 6 and all(line.strip() for line in lines), message
  assert " at 0x" not in message, message  # no object addresses
  assert any(word in message for binding in bindings for word in _named(binding)), \
      f"the message names none of {bindings}:\n{message}"


@pytest.mark.parametrize("bindings, strict", CASES,
                         ids=[f"{i:02d}" + ("-strict" if strict else "") for i, (_, strict) in enumerate(CASES)])
def test_a_wrong_binding_is_refused_in_one_paragraph_or_the_run_starts(stub_start, monkeypatch, tmp_path,
                                                                      bindings, strict):
  del stub_start
  monkeypatch.chdir(tmp_path)  # a relative MODEL_DIR lands here
  code, stderr, stdout = run_command(train_script.main, TRAIN_FILES,
                                     [*SMALL, f"--gin.MODEL_DIR='{tmp_path / 'run'}'", *bindings], strict)
  if code == "started":
    assert "Traceback" not in stderr and "error:" not in stderr, stderr[-3000:]
    return
  assert_one_paragraph_refusal(code, stderr, stdout, bindings)


def _subprocess(module, files, bindings, tmp_path):
  command = [sys.executable, "-m", module, *(f"--gin_file={f}" for f in files), *bindings]
  return subprocess.Popen(command, cwd=PROJECT_ROOT, env=script_env(tmp_path / "jax_cache"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# (module, main, files, bindings): one fuzz class through each script (scripts.evaluate shares
# scripts/gin_cli.py's command line); each process costs ~10 s of imports, the in-process cases cover the rest.
CLI_CASES = (
    ("scripts.train", train_script.main, TRAIN_FILES, ("--gin.OBJECTIVE=%UNDEFINED_MACRO",)),
    ("scripts.evaluate", evaluate_script.main, EVAL_FILES, ("--gin.SCORER='unterminated",)),
)


def test_the_command_lines_refuse_as_the_in_process_wrapper_does(monkeypatch, tmp_path):
  """Real `python -m scripts.train` / `scripts.evaluate` processes (run side by side): exit 1,
  no traceback, no device probing lines, and the very message the in-process wrapper gave."""
  monkeypatch.chdir(tmp_path)
  processes = [_subprocess(module, files, bindings, tmp_path) for module, _, files, bindings in CLI_CASES]
  for process, (module, main, files, bindings) in zip(processes, CLI_CASES):
    stdout, stderr = process.communicate(timeout=300)
    assert_one_paragraph_refusal(process.returncode, stderr, stdout, bindings)
    assert "cuInit" not in stderr and not re.search(r"^[EW]\d{4} ", stderr, re.MULTILINE), stderr[-3000:]
    code, in_process, _ = run_command(main, files, bindings)
    assert code == 1 and _error_paragraph(in_process) == _error_paragraph(stderr), (module, bindings, in_process, stderr)


def test_a_gin_file_that_does_not_parse_or_exist_is_named(tmp_path):
  broken = tmp_path / "broken.gin"
  broken.write_text("TRAIN_STEPS = 2\nBATCH_SIZE = 'unterminated\n")
  code, stderr, _ = run_command(train_script.main, (*TRAIN_FILES, str(broken)), ())
  assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
  assert f"--gin_file={broken}: gin cannot parse line 2" in _error_paragraph(stderr), stderr[-3000:]
  code, stderr, _ = run_command(train_script.main, (*TRAIN_FILES, "gin/runs/nonexistent.gin"), ())
  assert code == 1 and "--gin_file=gin/runs/nonexistent.gin: Unable to open file" in _error_paragraph(stderr), \
      stderr[-3000:]


def test_an_unclosed_bracket_is_named_with_the_line_it_opens_on(tmp_path):
  """Python's tokenizer, not gin's parser, refuses a bracket the text never closes (a TokenError,
  raised at the end of the text): one line naming the binding, or the file and the bracket's line,
  an `include`d file by its own name."""
  binding = "--gin.TASK_FEATURE_LENGTHS={'inputs': 64"
  code, stderr, stdout = run_command(train_script.main, TRAIN_FILES, (binding,))
  assert_one_paragraph_refusal(code, stderr, stdout, (binding,))
  assert _error_paragraph(stderr) == (f"error: {binding}: gin cannot parse this binding ('{{' was never closed); "
                                      "a value is a Python literal, a string in quotes "
                                      "(--gin.MODEL_DIR=\"'/tmp/run'\"), a %MACRO or an @configurable")
  unclosed = tmp_path / "unclosed.gin"
  unclosed.write_text("TRAIN_STEPS = 2\nTASK_FEATURE_LENGTHS = {'inputs': 64,\n    'targets': [8,\n 16]\n")
  including = tmp_path / "including.gin"
  including.write_text(f"include '{unclosed}'\nBATCH_SIZE = 2\n")
  for gin_file in (unclosed, including):
    code, stderr, _ = run_command(train_script.main, (*TRAIN_FILES, str(gin_file)), ())
    assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert _error_paragraph(stderr) == (f"error: --gin_file={gin_file}: gin cannot parse line 2 of {unclosed}: "
                                        "'{' was never closed"), stderr[-3000:]
  unclosed.write_text("TRAIN_STEPS = 2\nMODEL_DIR = \'\'\'/tmp/run\n")
  code, stderr, _ = run_command(train_script.main, (*TRAIN_FILES, str(unclosed)), ())
  assert _error_paragraph(stderr) == (f"error: --gin_file={unclosed}: gin cannot parse line 2 of {unclosed}: "
                                      "a triple-quoted string was never closed"), stderr[-3000:]


def test_a_bug_raised_inside_a_configurable_keeps_its_traceback(monkeypatch, tmp_path):
  """Only the command line's mistakes become one line: a TypeError from the code itself is not
  caught (the scripts' wrapper lets it through, for its traceback)."""
  from runner import train as train_lib  # pylint: disable=g-import-not-at-top

  def bug(*args, **kwargs):
    del args, kwargs
    return None + 1
  monkeypatch.setattr(train_lib, "_initialise_or_restore", bug)
  monkeypatch.chdir(tmp_path)
  with pytest.raises(TypeError, match="unsupported operand"):
    run_command(train_script.main, TRAIN_FILES, [*SMALL, f"--gin.MODEL_DIR='{tmp_path / 'run'}'"])


def test_a_diverged_run_ends_in_one_line(monkeypatch, tmp_path):
  """A binding can make the loss diverge (--gin.LEARNING_RATE=1e30): the run's NonFiniteLossError,
  which names the last good checkpoint, is the user's one line too."""
  from runner import train as train_lib  # pylint: disable=g-import-not-at-top

  def diverged(*args, **kwargs):
    del args, kwargs
    raise train_lib.NonFiniteLossError("loss nan, gradient norm nan, parameter norm nan at step 4; stopped "
                                       "without saving: the last good checkpoint is step 3 in run")
  monkeypatch.setattr(train_lib, "_initialise_or_restore", diverged)
  monkeypatch.chdir(tmp_path)
  code, stderr, _ = run_command(train_script.main, TRAIN_FILES,
                                [*SMALL, f"--gin.MODEL_DIR='{tmp_path / 'run'}'", "--gin.LEARNING_RATE=1e30"])
  assert code == 1 and _error_paragraph(stderr).startswith("error: loss nan") and "Traceback" not in stderr


def test_a_full_disk_ends_the_run_in_one_line_naming_the_file(monkeypatch, tmp_path):
  """The disk fills up as the run writes its first file (its lease, MODEL_DIR/lease.json, taken
  before anything else is written): storage's one line naming the file, no temporary file left."""
  from runner import train as train_lib  # pylint: disable=g-import-not-at-top

  def full(fd):
    del fd
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(train_lib, "_initialise_or_restore", lambda *args, **kwargs: (0, None, None, (None, None)))
  monkeypatch.setattr(os, "fsync", full)  # a disk that reports it is full when the data is synced
  monkeypatch.chdir(tmp_path)
  run = tmp_path / "run"
  code, stderr, stdout = run_command(train_script.main, TRAIN_FILES, [*SMALL, f"--gin.MODEL_DIR='{run}'"])
  assert "Traceback" not in stderr + stdout and code == 1, stderr[-3000:]
  assert _error_paragraph(stderr) == f"error: {run / 'lease.json'}: no space left on device", stderr[-3000:]
  assert not [path for path in run.rglob("*") if path.name.startswith(".tmp-")], list(run.rglob("*"))


def test_a_required_macro_left_unset_is_named():
  """gin/runs/finetune.gin leaves MODEL_DIR %gin.REQUIRED; without quickstart.gin nothing sets it."""
  files = ("gin/models/t5_1_1/tiny.gin", "gin/runs/finetune.gin", "gin/mixtures/quickstart.gin")
  code, stderr, _ = run_command(train_script.main, files, ("--gin.TRAIN_STEPS=1",))
  assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
  assert _error_paragraph(stderr) == ("error: MODEL_DIR must be set (the gin files leave it "
                                      "%gin.REQUIRED): add --gin.MODEL_DIR=..."), stderr[-3000:]
