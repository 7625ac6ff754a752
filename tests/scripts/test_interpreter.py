"""Commands the project prints name the Python that runs it (scripts/interpreter.py), where a bare
`python` lacks the dependencies outside an activated venv (the README says so): a script's usage
examples under --help and after a usage error; scripts.heap --print_commands is checked in
tests/scripts/test_heap_benchmark.py."""
import os
import shlex
import subprocess
import sys

from scripts import interpreter
from tests.conftest import PROJECT_ROOT


def test_the_interpreter_is_named_from_the_current_folder_where_it_lies_inside_it(tmp_path, monkeypatch):
  project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
  (project / ".venv" / "bin").mkdir(parents=True)
  elsewhere.mkdir()
  monkeypatch.setattr(sys, "executable", str(project / ".venv" / "bin" / "python"))
  monkeypatch.chdir(project)
  assert interpreter.python() == ".venv/bin/python"
  monkeypatch.chdir(project / ".venv" / "bin")
  assert interpreter.python() == "./python"  # a bare `python` would be looked up on PATH
  monkeypatch.chdir(elsewhere)
  assert interpreter.python() == str(project / ".venv" / "bin" / "python")
  monkeypatch.setattr(sys, "executable", str(tmp_path / "my env" / "python"))
  assert interpreter.python() == shlex.quote(str(tmp_path / "my env" / "python"))


def test_each_python_dash_m_command_of_a_text_names_it(monkeypatch):
  monkeypatch.setattr(interpreter, "python", lambda: "/env/bin/python")
  text = ("  python -m scripts.train \\\n      --gin_file=a.gin\n(`python -m scripts.heap`, python3 -m scripts.serve)\n"
          "cpython -m x, my_python -m y, python -c z, python the language, .venv/bin/python -m w")
  assert interpreter.with_this_python(text) == (
      "  /env/bin/python -m scripts.train \\\n      --gin_file=a.gin\n"
      "(`/env/bin/python -m scripts.heap`, /env/bin/python -m scripts.serve)\n"
      "cpython -m x, my_python -m y, python -c z, python the language, .venv/bin/python -m w")


def _this_python_from(folder) -> str:
  relative = os.path.relpath(sys.executable, folder)
  return sys.executable if relative.startswith(os.pardir) else relative


def test_help_and_a_usage_error_show_the_examples_with_the_running_python():
  example = f"  {_this_python_from(PROJECT_ROOT)} -m scripts.gcs_emulator --folder=runs/bucket --bucket=runs\n"
  script = [sys.executable, "-m", "scripts.gcs_emulator"]
  asked = subprocess.run([*script, "--help"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
  assert example in asked.stdout, asked.stdout[:2000]
  wrong = subprocess.run([*script, "an_argument"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
  assert wrong.returncode == 1 and example in wrong.stderr, wrong.stderr[:2000]
  assert "\n  python -m " not in asked.stdout + wrong.stderr
  checker = subprocess.run([sys.executable, "-m", "scripts.check_environment", "--help"], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=120)
  assert checker.stdout.startswith(f"usage: {_this_python_from(PROJECT_ROOT)} -m scripts.check_environment "), (
      checker.stdout[:500])
