"""`python -m scripts.X --help` prints the script's help and exits 0, for every script (absl's help
flags exit 1, as an error does: scripts/console.py's `run` makes it 0). One process per script:
each costs its imports, 0.1 s (no JAX) to about 10 s (scripts.benchmark on a loaded machine)."""
import re
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT

SCRIPTS = sorted(path.stem for path in (PROJECT_ROOT / "scripts").glob("*.py")
                 if re.search(r'^if __name__ == "__main__":', path.read_text(encoding="utf-8"), re.MULTILINE))
# Scripts that still call absl's app.run(main) directly; their owners' files (issue 53): each
# becomes `console.run(main)`, and then passes (strict: the mark must then go).
def _first_line_of_docstring(name: str) -> str:
  text = (PROJECT_ROOT / "scripts" / f"{name}.py").read_text(encoding="utf-8")
  docstring = re.search(r'^r?"""(.*?)(?:\n|""")', text, re.MULTILINE)
  return docstring.group(1).strip() if docstring else ""


def test_every_script_is_found():
  assert {"train", "evaluate", "generate", "serve", "convert_checkpoint", "analyze"} <= set(SCRIPTS), SCRIPTS
  assert "gin_cli" not in SCRIPTS and "console" not in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_exits_0(name):
  result = subprocess.run([sys.executable, "-m", f"scripts.{name}", "--help"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
  assert _first_line_of_docstring(name) in " ".join(result.stdout.split()), result.stdout[:2000]  # argparse rewraps


def test_help_variants_exit_0_and_an_unknown_flag_is_two_lines():
  """--helpshort, --helpfull and -? exit 0 as --help does; an unknown flag is absl's two lines (a
  gin script's was a traceback: its flags were parsed outside absl's handling of their errors)."""
  for flag in ("--helpshort", "--helpfull", "-?"):
    result = subprocess.run([sys.executable, "-m", "scripts.launch_local", flag], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout, (flag, result.returncode, result.stderr[-2000:])
  result = subprocess.run([sys.executable, "-m", "scripts.preflight", "--no_such_flag"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 1, result.stderr[-3000:]
  assert result.stderr.splitlines() == ["FATAL Flags parsing error: Unknown command line flag 'no_such_flag'",
                                        "Pass --helpshort or --helpfull to see help on flags."], result.stderr[-3000:]

