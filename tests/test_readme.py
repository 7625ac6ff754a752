"""README.md and docs/*.md are an executable promise: every command they show runs here as a user runs it.

Each command runs as a subprocess in a temp copy of the project (a git checkout with its own
`runs/`), as written, with tiny step counts appended (`--gin.TRAIN_STEPS=2` and the quickstart's
batch and lengths). `../shared/data` is the real data beside the project (a command naming it is
skipped, saying why, where it is absent); the README's absolute folders (`/data`, `/models`,
`/runs`, `/ckpt`), which stand for a user's own files, become temp folders holding the quickstart
files, a SentencePiece model trained on them and a random tiny Hugging Face T5; a published model
size runs as `tiny` (this is 2 CPU cores).
Its output is checked: exit status 0, no traceback, the files it promises, numbers in range.

CASES is the table: a normalised command prefix (`.venv/bin/python` read as `python`, words
joined by one space) -> what runs and what is checked; a README command belongs to the case with
the longest matching prefix. `test_every_readme_command_has_a_case` fails, naming the command,
when the README shows one no case covers (and names a case that covers none). Adding a command is
adding one Case. What cannot run here (a GPU, a TPU pod, the suite itself, a fresh 3 GB `make
lock`) gets a cheap check, which its `how` says.

The commands run in the background from the module's start, two at a time, each after the
commands that write what it reads (a checkpoint, a TFDS folder), sharing one JAX compilation
cache; the longest chain is the demo's training, then its evaluation or the server on its run.
"""
import ast
import concurrent.futures
import dataclasses
import http.client
import importlib.metadata
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import threading
from typing import Callable

import pytest

from tests.conftest import PROJECT_ROOT
from tests.conftest import not_the_source
from tests.conftest import SHARED_DATA
from tests.helpers import browser

# make test runs each module on one worker (--dist loadfile): the workspace and its runs happen once.

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]  # the README first, then the docs pages by name
HEAP_PAGE = DOCS / "heap.md"  # where the HEAP table lives
# A markdown link [text](target); code is taken out first, where brackets are not links.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
# Inline code is a command when it starts so and has arguments: `make demo` is, `make` is not.
INLINE_COMMAND_STARTS = ("python ", ".venv/bin/python ", ".venv/bin/pip ", "make ", "scripts/", "tfds ")
ABSOLUTE_FOLDERS = re.compile(r"(?<![\w.:/-])/(data|models|runs|ckpt)(?=/|\b)")
PUBLISHED_SIZES = re.compile(r"gin/models/t5_1_1/(small|base|large|xl|xxl)\.gin")
# An absl log line (INFO or ERROR) from a library: the console is to carry the project's lines only.
LIBRARY_LOG_LINE = re.compile(r"^[IE]\d{4} ", re.M)
TINY_STEPS = 2
DEMO_STEPS = 4  # not TINY_STEPS: the demo's checkpoint step tells its run from a tiny run's
# The quickstart's batch and lengths for every run, so that they share compiled steps.
QUICKSTART_SHAPES = ("--gin.BATCH_SIZE=16", "--gin.TASK_FEATURE_LENGTHS={'inputs': 256, 'targets': 64}")
DEMO_TRAIN = "python -m scripts.train --gin_file=gin/runs/finetune.gin --gin_file=gin/quickstart.gin"
DEMO_EVALUATE = "python -m scripts.evaluate --gin_file=gin/runs/eval.gin --gin_file=gin/quickstart.gin"
DEMO_DIR = "runs/quickstart"
# The other trainings start after the demo's (as if they read its folder): their step is its compiled
# step at QUICKSTART_SHAPES, which they find in the cache instead of compiling it side by side; and
# the run beside the demo's ends after it, so that the demo's checkpoint it checks is there.
AFTER_THE_DEMO = (DEMO_DIR,)
NO_REMAKE = "-o .venv/.installed"  # make -n: the venv counts as made, so only the target's own commands print
# Flags whose value is a folder a command writes (what later commands may read); an evaluation
# reads its MODEL_DIR (gin/quickstart.gin: CHECKPOINT_PATH = %MODEL_DIR).
OUTPUT_FLAGS = ("--gin.MODEL_DIR=", "--gin.EVAL_OUTPUT_DIR=", "--out=", "--data_dir=")
READ_BY_EVALUATION = "--gin.MODEL_DIR="
SHARED = "../shared/data"  # the real data, as the README names it (beside the project)
TINY_HF_CONFIG = dict(vocab_size=384, d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=2,
                      num_decoder_layers=2)  # gin/models/t5_1_1/tiny.gin


def normalise(command: str) -> str:
  words = shlex.split(command, comments=True)
  return " ".join("python" if word == ".venv/bin/python" else word for word in words)


def readme_commands(text: str) -> list[str]:
  """The commands of the README, each once, in order: the lines of its ```sh blocks (continued
  lines joined) and inline code that starts like a command and has arguments."""
  commands, prose_start = [], 0

  def inline(prose):
    spans = (" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose))
    return [span for span in spans if span.startswith(INLINE_COMMAND_STARTS) and " " in span]

  for fence in FENCE.finditer(text):
    commands += inline(text[prose_start:fence.start()])
    prose_start = fence.end()
    if fence.group(1) == "sh":
      lines = re.sub(r"\\\n\s*", " ", fence.group(2)).splitlines()
      commands += [line.strip() for line in lines if line.strip()]
  commands += inline(text[prose_start:])
  unique = {}
  for command in commands:
    unique.setdefault(normalise(command), command)
  return list(unique.values())


def page_commands(pages) -> dict[str, str]:
  """{command: the page it is on (relative to the project)} of every page, in order, each command once."""
  found = {}
  for page in pages:
    for command in readme_commands(page.read_text()):
      if not any(normalise(command) == normalise(seen) for seen in found):
        found[command] = str(page.relative_to(PROJECT_ROOT))
  return found


COMMAND_PAGES = page_commands(PAGES)
COMMANDS = list(COMMAND_PAGES)


def gin_value(command: str, name: str, default: str | None = None) -> str | None:
  """The last `--gin.NAME=value` of a command, as the string gin reads ('x' -> x)."""
  values = [w.split("=", 1)[1] for w in shlex.split(command) if w.startswith(f"--gin.{name}=")]
  return ast.literal_eval(values[-1]) if values else default


def written_folders(command: str) -> list[str]:
  words = shlex.split(command)
  evaluation = "scripts.evaluate" in words
  folders = [w.split("=", 1)[1].strip("'\"") for w in words
             if w.startswith(OUTPUT_FLAGS) and not (evaluation and w.startswith(READ_BY_EVALUATION))]
  return folders + [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--out"]


def needs_shared_data(command: str) -> bool:
  """Whether the command reads the real data (names it, or its case reads what such a command
  wrote) and it is absent here."""
  return (SHARED in command or case_of(command).real_data) and not SHARED_DATA.is_dir()


def named_paths(command: str) -> set[str]:
  """Every word of a command, and every value of a NAME=value word, unquoted: what it may read."""
  words = shlex.split(command)
  return set(words) | {w.split("=", 1)[1].strip("'\"") for w in words if "=" in w}


@dataclasses.dataclass(frozen=True)
class Case:
  """How the README commands with this normalised prefix are tested."""
  prefix: str
  how: str
  check: Callable[["Workspace", str, object], None]  # (workspace, README command, what `run` returned)
  run: Callable[["Workspace", str], object] | None = None  # the slow part, started at the module's start
  exact: bool = False  # matches the whole command only
  writes: tuple[str, ...] = ()  # folders it writes that its command does not name
  reads: tuple[str, ...] = ()  # folders it reads that its command does not name
  real_data: bool = False  # reads what a command on ../shared/data wrote

  def matches(self, command: str) -> bool:
    words = normalise(command)
    if self.exact:
      return words == self.prefix
    return words.startswith(self.prefix) and (
        len(words) == len(self.prefix) or self.prefix[-1] in "= " or words[len(self.prefix)] == " ")


def case_of(command: str) -> Case | None:
  matching = [case for case in CASES if case.matches(command)]
  return max(matching, key=lambda case: len(case.prefix), default=None)


class Workspace:
  """A temp copy of the project, the folders the README's absolute paths name, and the runs."""

  def __init__(self, tmp):
    self.root = tmp / "project"
    self.outside = tmp / "outside"
    shutil.copytree(PROJECT_ROOT, self.root, symlinks=True, ignore=not_the_source)
    (self.root / ".venv").symlink_to(PROJECT_ROOT / ".venv")
    self.git("init", "-q")
    (self.root / ".git" / "info" / "exclude").write_text(".venv\n")
    self.git("add", "-A")
    self.git("-c", "user.name=readme", "-c", "user.email=readme@example.org", "commit", "-q", "-m", "copy")
    self.git("remote", "add", "origin", "https://example.org/t5-scoring.git")
    shutil.copytree(PROJECT_ROOT / "t5_tasks" / "data", self.outside / "data")
    if SHARED_DATA.is_dir():  # ../shared/data from the copy, as from the project
      (tmp / "shared").mkdir()
      (tmp / "shared" / "data").symlink_to(SHARED_DATA)
    self._make_models()
    # As a user's shell: not inside `make test`, whose variables make a nested make print
    # "Entering directory" lines around its commands.
    outer_make = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")
    self.env = {name: value for name, value in os.environ.items() if name not in outer_make}
    self.env.update(JAX_COMPILATION_CACHE_DIR=os.environ.get("JAX_COMPILATION_CACHE_DIR", str(tmp / "jax_cache")),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")  # the run's cache (tests/conftest.py)
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    self._runs: dict[str, concurrent.futures.Future] = {}
    self._emulator, self._emulator_lock = None, threading.Lock()

  def emulator(self):
    """The local Cloud Storage emulator the docs' bucket rehearsal talks to, started once (on a free
    port, as the docs' command starts it)."""
    from scripts import gcs_emulator  # pylint: disable=g-import-not-at-top
    with self._emulator_lock:
      if self._emulator is None:
        self._emulator = gcs_emulator.start(self.outside / "bucket", ["runs"])
      return self._emulator

  def git(self, *args):
    subprocess.run(["git", "-C", str(self.root), *args], check=True, capture_output=True)

  def _make_models(self):
    """/models/t5/spiece.model trained on the quickstart text; /models/t5-v1_1-base a random tiny T5."""
    import sentencepiece  # pylint: disable=g-import-not-at-top
    from tests.models.hf_reference import make_hf_t5  # pylint: disable=g-import-not-at-top  # torch

    (self.outside / "models" / "t5").mkdir(parents=True)
    lines = [line for path in sorted((PROJECT_ROOT / "t5_tasks" / "data").iterdir())
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    # T5's ids (pad 0, EOS 1, unk 2); 256 pieces and 100 sentinels fit tiny's 384 embeddings.
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(self.outside / "models" / "t5" / "spiece"),
        vocab_size=256, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    make_hf_t5(self.outside / "models" / "t5-v1_1-base", **TINY_HF_CONFIG)

  def localise(self, command: str) -> str:
    """The command with the README's absolute folders in the temp folder, published sizes tiny, and
    a bare `python` the venv's (as in an activated venv)."""
    command = ABSOLUTE_FOLDERS.sub(lambda m: f"{self.outside}/{m.group(1)}", command)
    command = re.sub(r"^((?:\w+=\S+ )*)python ", r"\1.venv/bin/python ", command)
    return PUBLISHED_SIZES.sub("gin/models/t5_1_1/tiny.gin", command)

  def path(self, folder: str):
    """A folder a command names, as this workspace has it."""
    return self.root / self.localise(folder)

  def run(self, command: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=self.root, env=self.env, capture_output=True,
                          text=True, timeout=timeout)

  def start(self, commands: list[str]) -> None:
    """Runs each command's case.run in the background, once the runs that write what it names have
    ended: a run waits outside the pool, so that the pool's two places go to runs that can start."""
    writers = {folder: command for command in commands
               for folder in written_folders(command) + list(case_of(command).writes)}

    def writers_of_what(command) -> set[str]:
      read = named_paths(command) | set(case_of(command).reads)
      return {writer for folder, writer in writers.items() if writer != command and any(
          path == folder or path.startswith(folder + "/") for path in read)}

    needs = {command: writers_of_what(command) for command in commands}
    order = []
    while len(order) < len(commands):  # writers first: the pool takes the runs in this order
      order.append(next(c for c in commands if c not in order and needs[c] <= set(order)))
    ran = [command for command in order if case_of(command).run]
    for command in ran:
      self._runs[command] = concurrent.futures.Future()
    for command in ran:
      self._after([self._runs[need] for need in needs[command] if need in self._runs],
                  lambda command=command: self._launch(command, needs[command]))

  @staticmethod
  def _after(futures, then) -> None:
    """Calls `then()` once every future of `futures` is done (at once when there are none)."""
    if not futures:
      then()
      return
    left, lock = [len(futures)], threading.Lock()

    def one_done(_):
      with lock:
        left[0] -= 1
        last = left[0] == 0
      if last:
        then()
    for future in futures:
      future.add_done_callback(one_done)

  def _launch(self, command: str, needs: set[str]) -> None:
    """Starts the command's run in the pool; its result (or error) becomes `self._runs[command]`'s."""
    placeholder = self._runs[command]
    for need in needs:
      if need in self._runs and self._runs[need].exception():
        error = RuntimeError(f"needs what `{need}` writes, and that failed")
        error.__cause__ = self._runs[need].exception()
        placeholder.set_exception(error)
        return

    def copy(future):
      if future.exception() is not None:
        placeholder.set_exception(future.exception())
      else:
        placeholder.set_result(future.result())
    try:
      self._pool.submit(case_of(command).run, self, command).add_done_callback(copy)
    except RuntimeError as error:  # the pool is shut down: the module ended before this could start
      placeholder.set_exception(error)

  def result(self, command: str):
    """What case.run returned for a README command (None for a case without a background run)."""
    return self._runs[command].result() if command in self._runs else None

  def close(self):
    self._pool.shutdown(wait=True, cancel_futures=True)
    if self._emulator is not None:
      self._emulator.stop()


def readme_command(prefix: str) -> str:
  return next(command for command in COMMANDS if normalise(command) == prefix)


# --- what runs -----------------------------------------------------------------------------------


def run_with_tiny_settings(ws: Workspace, command: str, shell_first: str = "") -> subprocess.CompletedProcess:
  """The command localised, training TINY_STEPS steps, training and evaluating at quickstart shapes
  (in a shell that first runs the line `shell_first`, where given)."""
  extra = []
  if " scripts.train" in command:
    extra.append(f"--gin.TRAIN_STEPS={TINY_STEPS}")
  if " scripts.train" in command or " scripts.evaluate" in command:
    extra += QUICKSTART_SHAPES
  if " scripts.ppo" in command:  # rollouts are sampled token by token: a short response, a few prompts
    extra += [f"--gin.TRAIN_STEPS={TINY_STEPS}", "--gin.BATCH_SIZE=4", "--gin.BEST_OF_N_MAX=4",
              "--gin.TASK_FEATURE_LENGTHS={'inputs': 256, 'targets': 16}"]
  command = ws.localise(command) + "".join(f" {shlex.quote(arg)}" for arg in extra)
  return ws.run(f"{shell_first}\n{command}" if shell_first else command)


def run_as_is(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  return ws.run(ws.localise(command))


def run_make_demo(ws: Workspace, command: str):
  """`make -n demo`, and the training it prints, for DEMO_STEPS steps into the copy's runs/quickstart."""
  shown = ws.run(f"make -n {NO_REMAKE} demo")
  lines = shown.stdout.splitlines()
  assert len(lines) == 2, f"make -n demo printed:\n{shown.stdout}{shown.stderr}"
  return shown, ws.run(f"{lines[0]} --gin.TRAIN_STEPS={DEMO_STEPS}")


def run_demo_evaluation(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  """The evaluation `make -n demo` prints (its `.venv/bin/python`, where the README says `python`)."""
  shown, _ = ws.result(readme_command("make demo"))
  return ws.run(shown.stdout.splitlines()[1])


def run_server(ws: Workspace, command: str):
  """Starts the server on a free port, asks for advice on two situations, stops it."""
  with open(ws.outside / "serve.log", "w+", encoding="utf-8") as log:
    server = subprocess.Popen(["bash", "-c", f"exec {ws.localise(command)} --port=0"], cwd=ws.root,
                              env=ws.env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
      line = server.stdout.readline()
      answer = None
      if line.startswith("serving POST http://127.0.0.1:"):
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        situations = [{"title": "My roommate eats my food", "selftext": "Every week.", "subreddit": "Advice"},
                      {"title": "Should I quit?", "selftext": "My boss yells.\n\nI like the work.",
                       "subreddit": "careerguidance"}]
        connection.request("POST", "/api/askbatch", body=json.dumps({"instances": situations}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.status, json.loads(response.read())
        connection.request("POST", "/api/askbatch", body=b"{oops")  # after a model answer: still serving
        response = connection.getresponse()
        answer += (response.status, json.loads(response.read()))
        connection.close()
    finally:
      server.terminate()
      server.wait(timeout=60)
    log.seek(0)
    return line, answer, log.read()


def run_t5x_conversion(ws: Workspace, command: str):
  """Writes a random tiny t5x checkpoint (legacy layout) where --t5x_dir points, then runs the command."""
  from models import checkpoint_import  # pylint: disable=g-import-not-at-top
  from tests.models import t5x_fixtures  # pylint: disable=g-import-not-at-top

  config = checkpoint_import.config_from_hf(dict(TINY_HF_CONFIG, feed_forward_proj="gated-gelu",
                                                 tie_word_embeddings=False))
  params = t5x_fixtures.random_params(config, seed=0)
  words = shlex.split(command)
  t5x_fixtures.write_legacy(ws.path(words[words.index("--t5x_dir") + 1]), 1000, params)
  return ws.run(ws.localise(command)), params


# --- what is checked -----------------------------------------------------------------------------


def assert_ran(result: subprocess.CompletedProcess) -> None:
  output = result.stdout + result.stderr
  assert result.returncode == 0 and "Traceback (most recent call last)" not in output, (
      f"exit {result.returncode}:\n{output[-4000:]}")


def check_training(ws: Workspace, command: str, result, steps: int = TINY_STEPS) -> None:
  assert_ran(result)
  assert f"stopped at step {steps}" in result.stdout, result.stdout[-2000:]
  # The training loss (`step 2/2  loss 5.9`), not an evaluation's (`eval at step 2: <task>/loss 5.9, ...`).
  losses = [float(loss) for loss in re.findall(r"(?<!/)\bloss (\S+)", result.stdout + result.stderr)]
  assert losses and all(math.isfinite(loss) and loss > 0 for loss in losses), losses
  model_dir = ws.path(gin_value(command, "MODEL_DIR", DEMO_DIR))
  assert (model_dir / "checkpoints" / str(steps)).is_dir(), sorted(p.name for p in model_dir.iterdir())
  assert (model_dir / "t5_config.json").is_file() and (model_dir / "config.gin").is_file()
  assert list(model_dir.glob("**/events.out.tfevents.*")), "no TensorBoard summaries"


def check_ppo(ws: Workspace, command: str, result) -> None:
  """A progress line per step with reward and KL, the checkpoint, TensorBoard, and the comparison
  with best-of-N printed as ppo_comparison.json records it."""
  assert_ran(result)
  assert not LIBRARY_LOG_LINE.search(result.stderr), result.stderr[-3000:]
  assert result.stdout.splitlines()[-1] == f"stopped at step {TINY_STEPS}", result.stdout[-2000:]
  steps = re.findall(r"^step (\d+)/\d+  reward ([-+0-9.]+)  KL ([0-9.]+)  beta ", result.stdout, re.M)
  assert [int(step) for step, _, _ in steps] == list(range(1, TINY_STEPS + 1)), result.stdout[-2000:]
  model_dir = ws.path(gin_value(command, "MODEL_DIR"))
  assert (model_dir / "checkpoints" / str(TINY_STEPS)).is_dir(), sorted(p.name for p in model_dir.iterdir())
  assert list(model_dir.glob("train/events.out.tfevents.*")), "no TensorBoard summaries"
  record = json.loads((model_dir / "ppo_comparison.json").read_text())
  best, ppo = record["best_of_n"], record["ppo"]
  assert (f"PPO reward {ppo['reward']:+.4f} at KL {ppo['kl']:.3f} nats; best-of-{best['n']} reward "
          f"{best['reward']:+.4f}") in result.stdout, result.stdout[-2000:]
  assert math.isclose(best["kl"], math.log(best["n"]) - (best["n"] - 1) / best["n"], abs_tol=1e-9)
  assert (model_dir / "report.html").is_file()


def group_members(group: str) -> set[str]:
  """A HEAP cluster's criteria (lower case) as t5_tasks/heap/criteria.py declares CLUSTERS, read
  from its source (importing t5_tasks would import TensorFlow into this process)."""
  tree = ast.parse((PROJECT_ROOT / "t5_tasks" / "heap" / "criteria.py").read_text())
  clusters = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "CLUSTERS")
  return {c.lower() for c in clusters[group.removeprefix("heap_cluster_")]}


def check_evaluation(ws: Workspace, command: str, result, output_dir: str | None = None) -> None:
  assert_ran(result)
  # The console is the project's lines: no absl log lines from JAX or TensorFlow (INFO, or the
  # error line TensorFlow's oneDNN kernels print for TimeDial's int64 ops on some CPUs).
  assert not LIBRARY_LOG_LINE.search(result.stderr), result.stderr[-3000:]
  output_dir = output_dir or gin_value(command, "EVAL_OUTPUT_DIR")
  output = ws.path(output_dir)
  assert f"report: {ws.localise(output_dir)}/report.html" in result.stdout, result.stdout[-2000:]
  written = json.loads((output / "metrics.json").read_text())
  # Besides the tasks: provenance (how the numbers were made), truncation (what the lengths cut)
  # and groups' averages (HEAP clusters).
  records = ("provenance", "truncation")
  groups = {name for name, by_name in written.items()
            if name not in records and all("tasks" in e for e in by_name.values())}
  metrics = {task: by_name for task, by_name in written.items() if task not in records and task not in groups}
  assert set(written["truncation"]) == set(metrics), sorted(written["truncation"])
  for group in groups:  # the unweighted mean of its members' values
    for name, e in written[group].items():
      members = [by_name[name]["value"] for task, by_name in metrics.items() if name in by_name
                 and task.startswith("heap_") and (
                     group == "heap" or task[len("heap_"):].removesuffix("_tfds") in group_members(group))]
      assert e["tasks"] == len(members) and e["value"] == pytest.approx(sum(members) / len(members)), group
  predictions = [json.loads(line) for line in (output / "predictions.jsonl").read_text().splitlines()]
  assert metrics and {p["task"] for p in predictions} == set(metrics)
  assert all(p["scores"] and all(map(math.isfinite, p["scores"])) for p in predictions)
  # Ranking tasks score their candidates; a generation task its one reference (loss, perplexity).
  generation = {task for task, by_name in metrics.items() if "perplexity" in by_name}
  assert all(len(p["scores"]) >= 2 for p in predictions if p["task"] not in generation)
  for task, by_name in metrics.items():
    for name, e in by_name.items():
      lower, upper = (-1, 1) if name == "spearman" else (0, math.inf) if name in ("loss", "perplexity") else (0, 1)
      assert lower <= e["low"] <= e["value"] <= e["high"] <= upper, (task, name, e)
    if task in generation:
      assert by_name["perplexity"]["value"] == pytest.approx(math.exp(by_name["loss"]["value"]))
  assert "<html" in (output / "report.html").read_text().lower()


def check_make_demo(ws: Workspace, command: str, result) -> None:
  shown, train = result
  assert [normalise(line) for line in shown.stdout.splitlines()] == [DEMO_TRAIN, DEMO_EVALUATE]
  assert_ran(train)
  assert_ran(ws.result(readme_command(DEMO_EVALUATE)))


def check_demo_training(ws: Workspace, command: str, result) -> None:
  from runner import checkpoints  # pylint: disable=g-import-not-at-top

  _, train = ws.result(readme_command("make demo"))
  check_training(ws, command, train, steps=DEMO_STEPS)
  assert f"step {DEMO_STEPS}/{DEMO_STEPS}  loss" in train.stdout and "tokens/s" in train.stdout, train.stdout
  # The resolved mixture with each task's share, before the first step: TimeDial's test-only
  # cloze takes no share of training (seqio skips it); the other six do.
  mixture = next(line for line in train.stdout.splitlines() if line.startswith("training on quickstart: "))
  shares = [float(part.rsplit(" ", 1)[1].rstrip("%")) for part in mixture.split(": ", 1)[1].split(", ")]
  assert len(shares) == 6 and "timedial_cloze_full" not in mixture and abs(sum(shares) - 100) < 0.5, mixture
  # The console is the project's lines: no absl INFO lines from orbax, seqio or TFDS, no error line
  # from TensorFlow's oneDNN kernels (int64 ops on a CPU they do not support), and none of seqio's
  # per-task warnings about file-backed tasks.
  assert not LIBRARY_LOG_LINE.search(train.stderr), train.stderr[-3000:]
  assert "not cached" not in train.stderr and "uncached FunctionDataset" not in train.stderr, train.stderr[-3000:]
  # The architecture beside the checkpoints (evaluation needs no model gin file), and the run's
  # whole gin configuration, command-line bindings included, as t5x keeps it.
  config = checkpoints.read_model_config(str(ws.path(DEMO_DIR)))
  assert (config.vocab_size, config.emb_dim, config.num_encoder_layers) == (384, 64, 2), config
  config_gin = (ws.path(DEMO_DIR) / "config.gin").read_text()
  assert f"TRAIN_STEPS = {DEMO_STEPS}" in config_gin and "train.train:" in config_gin, config_gin
  assert "MIXTURE_OR_TASK_NAME = 'quickstart'" in config_gin, config_gin


def check_demo_evaluation(ws: Workspace, command: str, result) -> None:
  check_evaluation(ws, command, result, output_dir=f"{DEMO_DIR}/eval")
  report = ws.path(DEMO_DIR) / "eval" / "report.html"
  seen = browser.render(report)
  if seen is None:
    pytest.skip("no Chromium here (make test installs the Debian package where it can): the demo's "
                "report was not rendered in a browser")
  assert seen["title"] == "Evaluation of quickstart" and seen["headings"] > 3 and not seen["errors"], seen
  charts = sorted(p.name for p in report.parent.glob("plot_*.png"))
  assert charts and [i["src"] for i in seen["images"]] == charts and all(i["shown"] for i in seen["images"]), seen


def check_fresh_run_beside_the_demo(ws: Workspace, command: str, result) -> None:
  check_training(ws, command, result)
  assert ws.path(gin_value(command, "MODEL_DIR")) != ws.path(DEMO_DIR)
  assert (ws.path(DEMO_DIR) / "checkpoints" / str(DEMO_STEPS)).is_dir()  # the demo's run is its own


def check_evaluation_during_training(ws: Workspace, command: str, result) -> None:
  """On the quickstart mixture's validation split: the tasks without one skipped in a line each, as
  scripts.evaluate skips them, the others scored at the end, the best checkpoint kept by BEST_METRIC."""
  check_training(ws, command, result)
  for task in ("asq_intent_cloze", "timedial_cloze_full"):
    assert f"skipping {task}: it has no 'validation' split" in result.stdout, result.stdout[-3000:]
  best_metric = gin_value(command, "BEST_METRIC")
  model_dir = ws.path(gin_value(command, "MODEL_DIR"))
  lines = [json.loads(line) for line in (model_dir / "eval_metrics.jsonl").read_text().splitlines()]
  assert [line["step"] for line in lines] == [TINY_STEPS] and best_metric in lines[0]["metrics"], lines
  assert not any(name.startswith(("asq_intent_cloze/", "timedial_cloze_full/")) for name in lines[0]["metrics"])
  assert lines[0]["best"] == {"metric": best_metric, "step": TINY_STEPS, "value": lines[0]["metrics"][best_metric]}
  assert f"eval at step {TINY_STEPS}: " in result.stdout and (model_dir / "best" / str(TINY_STEPS)).is_dir()


def check_evaluation_beside_the_demo(ws: Workspace, command: str, result) -> None:
  """The run MODEL_DIR names, evaluated into MODEL_DIR/eval (gin/quickstart.gin), not the demo's."""
  model_dir = gin_value(command, "MODEL_DIR")
  check_evaluation(ws, command, result, output_dir=f"{model_dir}/eval")
  provenance = json.loads((ws.path(model_dir) / "eval" / "metrics.json").read_text())["provenance"]
  assert (provenance["checkpoint_path"], provenance["checkpoint_step"]) == (str(ws.path(model_dir)), TINY_STEPS)


def check_make_test(ws: Workspace, command: str, result) -> None:
  shown = ws.run(f"make -n {NO_REMAKE} test")
  assert_ran(shown)
  words = shlex.split(shown.stdout.splitlines()[-1])  # after Chromium's install, where it is absent
  assert words[:3] == [".venv/bin/python", "-m", "pytest"] and words[-1] == "tests", shown.stdout


def check_make_venv(ws: Workspace, command: str, result) -> None:
  shown = ws.run("make -n -B venv")  # -B: every step, as on a fresh clone
  assert_ran(shown)
  assert "pip install --quiet -c requirements/constraints.txt -e '.[test]'" in shown.stdout, shown.stdout
  constraints = (ws.root / "requirements" / "constraints.txt").read_text().splitlines()
  pins = dict(line.split("==") for line in constraints if "==" in line and not line.startswith("#"))
  assert pins["torch"] == "2.13.0"
  for name, version in pins.items():  # this environment is what the constraints say
    try:
      installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
    assert installed.split("+")[0] == version, (name, installed, version)


def check_make_lock(ws: Workspace, command: str, result) -> None:
  shown = ws.run("make -n lock")
  assert_ran(shown)
  lines = shown.stdout.splitlines()
  assert "python3 -m venv build/lock-venv" in lines and "-c requirements" not in shown.stdout, shown.stdout
  assert "build/lock-venv/bin/python -m pip install --quiet -e '.[test]'" in lines
  assert lines[-2:] == ["mv requirements/constraints.txt.new requirements/constraints.txt",
                        "rm -rf build/lock-venv"]
  sed = re.search(r"\| (sed .*) >>", shown.stdout).group(1)
  pinned = subprocess.run(["bash", "-c", sed], input="torch==2.13.0+cpu\njax==0.10.2\n", capture_output=True,
                          text=True, check=True)
  assert pinned.stdout == "torch==2.13.0\njax==0.10.2\n"


def check_make_bench(ws: Workspace, command: str, result) -> None:
  shown = ws.run(f"make -n {NO_REMAKE} {command.split(' ', 1)[1]}")
  assert_ran(shown)
  words = shlex.split(shown.stdout.splitlines()[-1])
  assert words[:3] == [".venv/bin/python", "-m", "scripts.benchmark"], shown.stdout
  from absl import flags  # pylint: disable=g-import-not-at-top
  from scripts import benchmark  # pylint: disable=g-import-not-at-top,unused-import  # defines its flags
  for word in words[3:]:
    name, _, value = word[2:].partition("=")
    flags.FLAGS[name].parser.parse(value or "true")  # raises on a flag or value the benchmark refuses


def check_gpu_install(ws: Workspace, command: str, result) -> None:
  words = shlex.split(command)
  assert words[:3] == [".venv/bin/pip", "install", "-U"] and words[3] == "jax[cuda12]", words
  assert "cuda12" in importlib.metadata.metadata("jax").get_all("Provides-Extra")  # the installed JAX has it


def check_task_and_mixture_names(ws: Workspace, command: str, result) -> None:
  assert_ran(result)
  tasks, mixtures = result.stdout.splitlines()
  assert tasks.startswith("tasks: ") and mixtures.startswith("mixtures: "), result.stdout
  assert {"asq_intent_cloze", "asq_intent_cloze_tfds", "timedial_cloze_full"} <= set(tasks.split())
  assert {"quickstart", "generation_and_cloze", "heap_multitask"} <= set(mixtures.split())


HEAP_TRAIN = ("python -m scripts.train --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/finetune.gin "
              "--gin_file=gin/recipes/heap/cross_cluster.gin")
HEAP_EVALUATE = ("python -m scripts.evaluate --gin_file=gin/models/t5_1_1/base.gin --gin_file=gin/runs/eval.gin "
                 "--gin_file=gin/recipes/heap/evaluate.gin")


# The recipes' T5 SentencePiece model is a download: the tiny random model reads bytes, both commands alike.
OFFLINE_VOCABULARY = "--gin.SENTENCEPIECE_MODEL_PATH=None"


def run_heap_training(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  """Tiny settings, with no accumulation: Table 4's (32 microbatches) needs a batch of 256."""
  return ws.run(ws.localise(command) + "".join(
      f" {shlex.quote(arg)}" for arg in (f"--gin.TRAIN_STEPS={TINY_STEPS}", *QUICKSTART_SHAPES,
                                         "--gin.ACCUMULATION_STEPS=1", OFFLINE_VOCABULARY)))


def run_heap_evaluation(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  return ws.run(ws.localise(command) + "".join(f" {shlex.quote(arg)}" for arg in (*QUICKSTART_SHAPES, OFFLINE_VOCABULARY)))


def check_heap_training(ws: Workspace, command: str, result) -> None:
  """A reward model on the target's cluster without the target (Table 3's C^/t), on quickstart files."""
  check_training(ws, command, result)
  mixture = gin_value(command, "MIXTURE_OR_TASK_NAME", None) or "heap_cross_cluster_hate_speech_cng"
  line = next(line for line in result.stdout.splitlines() if line.startswith(f"training on {mixture}: "))
  trained = {part.rsplit(" ", 1)[0] for part in line.split(": ", 1)[1].split(", ")}
  assert trained == {f"heap_{c}" for c in group_members("heap_cluster_hate_speech")} - {"heap_cng"}, line


def check_heap_evaluation(ws: Workspace, command: str, result) -> None:
  """The held-out target alone (§4.2's D_test^t): CNG, and its groups' averages of it."""
  check_evaluation(ws, command, result)
  written = json.loads((ws.path(gin_value(command, "EVAL_OUTPUT_DIR")) / "metrics.json").read_text())
  tasks = {name for name in written if name not in ("provenance", "truncation", "heap")
           and not name.startswith("heap_cluster_")}
  assert tasks == {"heap_cng"}, sorted(written)
  assert written["heap_cluster_hate_speech"]["pairwise_accuracy"]["tasks"] == 1


def check_heap_counts(ws: Workspace, command: str, result) -> None:
  """On ../shared/data: each criterion's count is the README table's "Comparisons here", and the
  criteria without a file there are those the table says to bring."""
  assert_ran(result)
  rows = {line.split()[0]: line for line in result.stdout.splitlines()
          if re.match(r"^[A-Z][A-Za-z]+ {2,}", line) and "criterion" not in line}
  expected = readme_heap_counts()
  assert set(rows) == set(expected) and len(rows) == 22, result.stdout
  for criterion, count in expected.items():
    if count is None:
      assert "bring your own file" in rows[criterion], rows[criterion]
    else:
      assert re.search(rf"\s{count}\s", rows[criterion]), (criterion, count, rows[criterion])
  with_files = [c for c, count in expected.items() if count is not None]
  assert f"{len(with_files)} of 22 criteria have a file here; {sum(expected[c] for c in with_files)} comparisons" in (
      result.stdout), result.stdout[-500:]


def check_heap_runs(ws: Workspace, command: str, result) -> None:
  assert_ran(result)
  assert "HEAP per criterion over 1 runs (Table 2)" in result.stdout, result.stdout
  assert re.search(r"^hate_speech +1 ", result.stdout, re.M), result.stdout  # the run's target, CNG


ASQ_TEST = f"{DEMO_EVALUATE} --gin.MIXTURE_OR_TASK_NAME='asq_intent_cloze'"


def check_asq_test_cuts(ws: Workspace, command: str, result) -> None:
  """ASQ's test file (its first 1,000 items) at the quickstart's 256 and 64 bytes: the line saying
  how many narratives and questions were cut is printed, with metrics.json's counts (issue 48)."""
  check_evaluation(ws, command, result)
  cut = json.loads((ws.path(gin_value(command, "EVAL_OUTPUT_DIR")) / "metrics.json").read_text())["truncation"]
  inputs, candidates = cut["asq_intent_cloze"]["inputs"], cut["asq_intent_cloze"]["candidates"]
  assert (inputs["cut"], candidates["cut"], candidates["items_cut"]) == (969, 722, 585), cut
  line = next((line for line in result.stdout.splitlines()
               if line.startswith("asq_intent_cloze: cut by the feature lengths")), result.stdout[-3000:])
  assert "969 of 1,000 inputs longer than 'inputs' 256" in line, line
  assert "722 of 2,000 candidates in 585 items longer than 'targets' 64" in line, line


ASQ_TABLE4 = "python -m scripts.evaluate --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/recipes/asq/table4.gin"
ASQ_GROUPS = ("C+E", "C+{C,I}", "C+C", "L+{U,I}")  # Table 4's rows


def check_asq_table4(ws: Workspace, command: str, result) -> None:
  """The annotation split's 500 items, with a cell for each of Table 4's pair types."""
  check_evaluation(ws, command, result)
  output = ws.path(gin_value(command, "EVAL_OUTPUT_DIR"))
  metrics = json.loads((output / "metrics.json").read_text())["asq_intent_cloze"]
  assert {f"accuracy/{group}" for group in ASQ_GROUPS} <= set(metrics), sorted(metrics)
  assert len((output / "predictions.jsonl").read_text().splitlines()) == 500


def check_asq_analysis(ws: Workspace, command: str, result) -> None:
  """Table 4's layout: the humans' first-round cells (the paper's 0.844 and 0.890 for C+C and
  C+{C,I}) beside the model's, which are its evaluation's metrics.json cells."""
  assert_ran(result)
  predictions = re.search(r"--predictions=\w+=(\S+)", command).group(1)
  metrics = json.loads((ws.path(predictions).parent / "metrics.json").read_text())["asq_intent_cloze"]
  rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.split()[:1] and
          line.split()[0] in ASQ_GROUPS}
  assert set(rows) == set(ASQ_GROUPS), result.stdout[-2000:]
  assert rows["C+C"].split()[1] == "0.844" and rows["C+{C,I}"].split()[1] == "0.890", rows
  for group in ASQ_GROUPS:
    assert f"{metrics[f'accuracy/{group}']['value']:.3f}" in rows[group].split()[4:], (group, rows[group])


HEAP_BENCHMARK = "python -m scripts.heap --protocol=cross_cluster"


def run_heap_benchmark(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  """Two of the cluster's nine targets (tests/scripts/test_heap_benchmark.py runs the same)."""
  return ws.run(ws.localise(command) + " --targets=cng,hso")


def check_heap_benchmark(ws: Workspace, command: str, result) -> None:
  """Table 3's cross-cluster cells, each from the run that held its criterion out."""
  assert_ran(result)
  out = ws.path(re.search(r"--out_dir=(\S+)", command).group(1))
  rows = json.loads((out / "heap_tables.json").read_text())["table_3"]["hate_speech"]["rows"]
  for target in ("cng", "hso"):
    metrics = json.loads((out / "cross_cluster" / f"hate_speech_{target}" / "seed_0" / f"eval_{target}"
                          / "metrics.json").read_text())
    cell = rows[target.upper()]["cross_cluster"]
    assert cell["accuracy_ties_half"]["mean"] == pytest.approx(metrics[f"heap_{target}"]["pairwise_accuracy"]["value"])
    assert re.search(rf"^\| {target.upper()} \| .* \| {100 * cell['accuracy']['mean']:.2f} \(1\) \| ",
                     result.stdout, re.M), result.stdout[-3000:]
  assert (out / "heap_tables.md").is_file() and rows["BCN"]["cross_cluster"] is None


def check_baseline(ws: Workspace, command: str, result) -> None:
  assert_ran(result)
  out = ws.path(command.split("--out=")[1].split()[0])
  metrics = json.loads((out / "metrics.json").read_text())
  task = {"timedial_overlap": "timedial_cloze_full", "asq_similarity": "asq_intent_cloze"}[
      command.split("--baseline=")[1].split()[0]]
  assert task in metrics and (out / "predictions.jsonl").is_file() and (out / "report.html").is_file()


def check_comparison(ws: Workspace, command: str, result) -> None:
  """Each baseline beside the model on its own task: a paired bootstrap and a second paired test for each pair."""
  assert_ran(result)
  out = ws.path(command.split("--out=")[1].split()[0])
  comparison = json.loads((out / "comparison.json").read_text())
  pairs = {(d["task"], d["metric"], d["a"], d["b"]) for d in comparison["differences"]}
  assert {("timedial_cloze_full", "two_best_accuracy", "model", "overlap"),
          ("asq_intent_cloze", "accuracy", "model", "similarity")} <= pairs, sorted(pairs)
  eval_dirs = dict(spec.split("=", 1) for spec in command.split("--eval_dirs=")[1].split()[0].split(","))
  for d in comparison["differences"]:
    if "/" not in d["metric"]:  # a task's whole metric, on all of the baseline's items: the same items
      baseline = d["b"] if d["a"] == "model" else d["a"]
      scored = (ws.path(eval_dirs[baseline]) / "predictions.jsonl").read_text().splitlines()
      assert d["items"] == sum(json.loads(line)["task"] == d["task"] for line in scored), d
    assert 0 <= d["p_bootstrap"] <= 1 and 0 <= d["p_test"] <= 1 and d["low"] <= d["difference"] <= d["high"], d
  assert all((out / name).is_file() for name in ("comparison.md", "comparison.tex", "report.html"))
  assert f"wrote {ws.localise(command.split('--out=')[1].split()[0])}/report.html and comparison.json, .md, .tex in" in (
      result.stdout), result.stdout


def readme_heap_counts() -> dict[str, int | None]:
  """docs/heap.md's HEAP table: criterion -> "Comparisons here" (None: bring your own file)."""
  rows = [line.split("|")[1:-1] for line in HEAP_PAGE.read_text().splitlines() if re.match(r"^\| [A-Z]\w* \| `heap_", line)]
  return {row[0].strip(): None if "bring your own" in row[4] else int(row[4]) for row in rows}


def check_tfds_build(ws: Workspace, command: str, result) -> None:
  """The datasets named, one line each (no TFDS log or "Downloading and preparing" line), HEAP's
  answer validity from ../shared/data with the README table's count of comparisons."""
  assert_ran(result)
  assert not LIBRARY_LOG_LINE.search(result.stderr) and "Downloading and preparing" not in result.stdout, (
      result.stdout + result.stderr)[-3000:]
  built = dict(line.split(": ", 1) for line in result.stdout.splitlines())
  assert set(built) == set(command.split("--datasets=")[1].split()[0].split(",")), built  # those named, only
  sizes = dict(part.split(" ") for part in built["heap_comparisons/av"].split(" -> ")[0].split(", "))
  assert set(sizes) == {"train", "validation", "test"}, built
  assert sum(map(int, sizes.values())) == readme_heap_counts()["AV"], (sizes, readme_heap_counts()["AV"])
  prepared = ws.root / built["heap_comparisons/av"].split(" -> ")[1]
  data_dir = ws.path(command.split("--data_dir=")[1].split()[0])
  assert prepared.parent == data_dir / "heap_comparisons" / "av" and (prepared / "dataset_info.json").is_file()


def check_conversion(ws: Workspace, command: str, result) -> None:
  assert_ran(result)
  out = ws.path(written_folders(command)[0])
  assert str(out) in result.stdout, result.stdout
  config = json.loads((out / "t5_config.json").read_text())
  assert (config["vocab_size"], config["emb_dim"], config["num_encoder_layers"]) == (384, 64, 2)
  assert (out / "params").is_dir()


def check_t5x_conversion(ws: Workspace, command: str, result) -> None:
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top

  converted, params = result
  check_conversion(ws, command, converted)
  _, loaded = checkpoints.load_params(str(ws.path(written_folders(command)[0])))
  loaded = traverse_util.flatten_dict(loaded, sep="/")
  for name, value in traverse_util.flatten_dict(params, sep="/").items():
    np.testing.assert_array_equal(np.asarray(loaded[name]), value, err_msg=name)


def check_hf_export(ws: Workspace, command: str, result) -> None:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top

  assert_ran(result)
  words = shlex.split(command)
  hf_dir = ws.path(words[words.index("--to_hf") + 1])
  assert str(hf_dir / "model.safetensors") in result.stdout, result.stdout
  config, params = checkpoints.load_params(str(ws.path(words[words.index("--checkpoint") + 1])))
  model = transformers.T5ForConditionalGeneration.from_pretrained(hf_dir)
  assert (model.config.d_model, model.config.num_layers) == (config.emb_dim, config.num_encoder_layers)
  np.testing.assert_array_equal(model.lm_head.weight.detach().numpy(),
                                np.asarray(params["decoder"]["logits_dense"]["kernel"]).T)


def check_server(ws: Workspace, command: str, result) -> None:
  line, answer, log = result
  assert line.startswith("serving POST http://127.0.0.1:"), log[-4000:]
  status, payload, bad_status, bad_payload = answer
  assert status == 200, payload
  assert list(payload) == ["gens"] and len(payload["gens"]) == 2
  assert all(isinstance(advice, str) for advice in payload["gens"])
  assert bad_status == 400 and "JSON" in bad_payload["error"], bad_payload


def check_tpu_dry_run(ws: Workspace, command: str, result) -> None:
  launch, module_args = command.split(" -- ", 1)
  module = next((w.split("=", 1)[1] for w in shlex.split(launch) if w.startswith("--module=")), "scripts.train")
  dry = ws.run(f"{launch} --dry_run -- {module_args}")
  assert_ran(dry)
  *copy_patch, setup, run = dry.stdout.splitlines()  # the patch of uncommitted changes, if any, first
  assert len(copy_patch) <= 1 and all(" scp " in line for line in copy_patch), dry.stdout
  remotes = []
  for ssh in (setup, run):
    words = shlex.split(ssh)
    assert words[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and "--worker=all" in words, ssh
    remotes.append(next(w for w in words if w.startswith("--command="))[len("--command="):])
  assert "git clone -q https://example.org/t5-scoring.git" in remotes[0]
  assert "pip install -q -c $lock -r requirements/tpu.txt -e ." in remotes[0] and "check_environment" in remotes[0]
  assert shlex.split(remotes[1].split("exec ", 1)[1]) == [".venv/bin/python", "-m", module, *shlex.split(module_args)]


def run_preflight(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  """As is, xxl included: planning allocates nothing, so the published size stays."""
  return ws.run(ws.localise(command).replace("gin/models/t5_1_1/tiny.gin", "gin/models/t5_1_1/xxl.gin"))


def check_preflight(ws: Workspace, command: str, result) -> None:
  """xxl on (32, 8) devices of 16 GiB: refused with the arithmetic and a mesh that fits; the mesh
  it names then fits."""
  output = result.stdout + result.stderr
  assert result.returncode == 1 and "Traceback" not in output, output[-3000:]
  assert "mesh: data 32 x model 8 = 256 devices" in result.stdout, result.stdout[-3000:]
  assert "does NOT fit in 16.00 GiB per device" in result.stdout, result.stdout[-3000:]
  suggestion = re.search(r'e\.g\. (--gin\.MESH_SHAPE="\(\d+, \d+\)"[^.]*)\.', result.stderr)
  assert "the memory plan does not fit" in result.stderr and suggestion, result.stderr[-3000:]
  fitting = run_preflight(ws, f"{command} {suggestion[1]}")
  assert_ran(fitting)
  assert re.search(r"fits in 16\.00 GiB per device \(\d+% of it\)", fitting.stdout), fitting.stdout[-3000:]


def run_emulator(ws: Workspace, command: str):
  """The docs' emulator command as is (a free port), until it has printed its two lines and its
  bucket answers at the URL of the first; then stopped as a user stops it (the objects' folder is the
  docs', in the copy)."""
  import urllib.request  # pylint: disable=g-import-not-at-top
  process = subprocess.Popen(["bash", "-c", f"exec {ws.localise(command)}"], cwd=ws.root, env=ws.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    lines = [process.stdout.readline(), process.stdout.readline()]
    url = lines[0].strip().split("=", 1)[-1]
    with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=30) as response:
      buckets = [bucket["name"] for bucket in json.load(response).get("items", [])]
  finally:
    process.terminate()
    _, err = process.communicate(timeout=30)
  return lines, buckets, process.returncode, err


def check_emulator(ws: Workspace, command: str, result) -> None:
  lines, buckets, code, err = result
  assert re.fullmatch(r"export STORAGE_EMULATOR_HOST=http://127\.0\.0\.1:\d+\n", lines[0]), (lines, err)
  assert lines[1].startswith("serving gs://runs from ") and buckets == ["runs"], (lines, buckets, err)
  assert code == 0 and "Traceback" not in err, err[-2000:]
  assert (ws.root / "runs" / "bucket" / "server.log").is_file()


def run_in_emulator(ws: Workspace, command: str) -> subprocess.CompletedProcess:
  """A command of the docs' bucket rehearsal, with tiny settings, in a shell that first ran the line
  the workspace's emulator prints (as the docs say to)."""
  return run_with_tiny_settings(ws, command, shell_first=ws.emulator().export_line)


def check_bucket_rehearsal(ws: Workspace, command: str, result) -> None:
  """Both processes ran in their own folders; the run's files are objects in the emulator's bucket,
  none on disk (no `gs:` folder anywhere in the copy)."""
  server = ws.emulator().process
  assert server.poll() is None, (f"the emulator's server exited with {server.returncode}; its log ends:\n"
                                 f"{(ws.outside / 'bucket' / 'server.log').read_text()[-3000:]}\n{result.stdout[-2000:]}")
  assert_ran(result)
  prefix = (gin_value(command, "MODEL_DIR") or gin_value(command, "EVAL_OUTPUT_DIR")).removeprefix("gs://runs/")
  objects = ws.emulator().object_names("runs", prefix + "/")
  if " scripts.train" in command:
    assert f"[0] stopped at step {TINY_STEPS}" in result.stdout, result.stdout[-3000:]
    assert "[0] TensorBoard summaries are off" in result.stdout
    expected = ["t5_config.json", "config.gin", "data_files.json", f"checkpoints/{TINY_STEPS}/params/_METADATA"]
  else:
    assert re.search(r"^\[0\] wrote gs://runs/rehearsal/eval/predictions.jsonl", result.stdout, re.M), (
        result.stdout[-3000:])
    expected = ["metrics.json", "predictions.jsonl", "report.html", "evaluation.json", "config.gin"]
  for name in expected:
    assert f"{prefix}/{name}" in objects, (name, objects)
  assert (ws.root / "runs" / "hosts" / "host_1").is_dir()
  assert not [path for path in ws.root.rglob("gs:")], "a local gs: folder"


def check_local_pod(ws: Workspace, command: str, result) -> None:
  """Runs in tests/runner/test_multi_process.py, word for word with tiny settings appended:
  interrupted by SIGTERM, then SIGKILL, resumed, and compared with one process on 4 devices."""
  from tests.runner import test_multi_process  # pylint: disable=g-import-not-at-top
  assert test_multi_process.readme_pod_command() == shlex.split(command)


CASES = [
    Case("make demo", f"make -n demo prints its two commands; they run with --gin.TRAIN_STEPS={DEMO_STEPS}",
         check_make_demo, run=run_make_demo, writes=(DEMO_DIR,)),
    Case(DEMO_TRAIN, "the demo's training (make demo)", check_demo_training, exact=True),
    Case(DEMO_EVALUATE, "the demo's evaluation (make demo)", check_demo_evaluation, run=run_demo_evaluation,
         exact=True, reads=(DEMO_DIR,), writes=(f"{DEMO_DIR}/eval",)),
    Case("make test", "make -n test: it is this suite", check_make_test),
    Case("make venv", "make -n -B venv, and this environment has the pinned versions", check_make_venv),
    Case("make lock", "make -n lock and its sed: a fresh 3 GB venv takes minutes", check_make_lock),
    Case("make bench", "make -n bench, and the benchmark parses its flags (tests/scripts/test_benchmark.py "
         "runs --model=tiny --quick)", check_make_bench),
    Case(".venv/bin/pip install -U", "GPU: not installed; the installed JAX has the extra",
         check_gpu_install),
    Case("python -c", "as is", check_task_and_mixture_names, run=run_as_is),
    Case("python -m scripts.build_tfds", "as is, on ../shared/data", check_tfds_build, run=run_as_is),
    Case("TFDS_DATA_DIR=", "tiny steps, on what build_tfds prepared", check_training,
         run=run_with_tiny_settings, reads=AFTER_THE_DEMO, real_data=True),
    Case(f"{DEMO_TRAIN} --gin.MODEL_DIR=", "tiny steps", check_fresh_run_beside_the_demo,
         run=run_with_tiny_settings, reads=AFTER_THE_DEMO),
    Case(f"{DEMO_TRAIN} --gin.EVAL_EVERY=", "tiny steps: evaluated once, at the end", check_evaluation_during_training,
         run=run_with_tiny_settings, reads=AFTER_THE_DEMO),
    Case(f"{DEMO_EVALUATE} --gin.MODEL_DIR=", "quickstart shapes, on the tiny run beside the demo's",
         check_evaluation_beside_the_demo, run=run_with_tiny_settings),
    Case("python -m scripts.train", "tiny steps", check_training, run=run_with_tiny_settings,
         reads=AFTER_THE_DEMO),
    Case("python -m scripts.evaluate", "quickstart shapes", check_evaluation, run=run_with_tiny_settings),
    Case("python -m scripts.ppo", "tiny steps, 4 prompts, 16-token responses, on the runs the page trains first",
         check_ppo, run=run_with_tiny_settings),
    Case(HEAP_TRAIN, "tiny steps, quickstart shapes, no accumulation", check_heap_training, run=run_heap_training,
         reads=AFTER_THE_DEMO),
    Case(HEAP_EVALUATE, "quickstart shapes, on the HEAP run", check_heap_evaluation, run=run_heap_evaluation),
    Case(ASQ_TEST, "quickstart shapes, on the demo's run and ../shared/data's ASQ test file", check_asq_test_cuts,
         run=run_with_tiny_settings, reads=AFTER_THE_DEMO),
    Case(ASQ_TABLE4, "quickstart shapes, on the demo's run and ../shared/data's annotation files",
         check_asq_table4, run=run_with_tiny_settings, reads=AFTER_THE_DEMO),
    Case("python -m scripts.analyze asq", "as is, on that evaluation's predictions", check_asq_analysis,
         run=run_as_is, reads=("runs/quickstart/eval-asq-table4",), real_data=True),
    Case(HEAP_BENCHMARK, "as is, for two of its nine targets (CNG, HSO)", check_heap_benchmark,
         run=run_heap_benchmark),
    Case("python -m scripts.run_baseline", "as is (the quickstart files, or ../shared/data)", check_baseline,
         run=run_as_is),
    Case("python -m scripts.compare", "the demo's evaluation beside the two baselines", check_comparison,
         run=run_as_is, reads=(f"{DEMO_DIR}/eval", "runs/overlap", "runs/similarity")),
    Case("python -m scripts.analyze heap --data_dir=", "as is, on ../shared/data: the README table's counts",
         check_heap_counts, run=run_as_is),
    Case("python -m scripts.analyze heap_runs", "on the HEAP run's evaluation", check_heap_runs, run=run_as_is),
    Case("python -m scripts.convert_checkpoint", "a random tiny Hugging Face T5", check_conversion,
         run=run_as_is),
    Case("python -m scripts.convert_checkpoint --t5x_dir", "a random tiny t5x checkpoint, legacy layout",
         check_t5x_conversion, run=run_t5x_conversion),
    Case("python -m scripts.convert_checkpoint --checkpoint", "the tiny run it names; transformers loads the export",
         check_hf_export, run=run_as_is),
    Case("python -m scripts.serve --checkpoint", "on the demo's run; POSTs two situations, then stops it",
         check_server, run=run_server),
    Case("scripts/launch_tpu_pod.sh", "TPU: --dry_run", check_tpu_dry_run),
    Case("python -m scripts.preflight", "as is (exit 1: xxl does not fit), then on the mesh it names",
         check_preflight, run=run_preflight),
    Case("python -m scripts.launch_local", "in tests/runner/test_multi_process.py (2 processes, interrupted "
         "and resumed)", check_local_pod),
    Case("python -m scripts.gcs_emulator", "as is (a free port), then stopped", check_emulator, run=run_emulator),
    Case("python -m scripts.launch_local --num_processes=2 --devices_per_process=2 --process_dirs=runs/hosts",
         "tiny steps, 2 processes in their own folders, after the export line of the workspace's emulator",
         check_bucket_rehearsal, run=run_in_emulator),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
  ws = Workspace(tmp_path_factory.mktemp("readme"))
  ws.start([command for command in COMMANDS if case_of(command) and not needs_shared_data(command)])
  yield ws
  ws.close()


def test_every_readme_command_has_a_case():
  assert COMMANDS, f"no commands found in {README} or {DOCS}"
  assert len(PAGES) > 1, f"no pages in {DOCS}"
  uncovered = [f"{COMMAND_PAGES[command]}: {command}" for command in COMMANDS if case_of(command) is None]
  assert not uncovered, "commands without a case in tests/test_readme.py:\n" + "\n".join(uncovered)
  unused = [case.prefix for case in CASES if not any(case_of(command) is case for command in COMMANDS)]
  assert not unused, "cases of tests/test_readme.py that match no command of README.md or docs/:\n" + "\n".join(unused)


def local_links(text: str) -> list[str]:
  """The targets of the markdown links outside code that point at a file here (no scheme, no bare #anchor)."""
  prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))
  return [target for target in MARKDOWN_LINK.findall(prose) if not re.match(r"^(\w+:|#)", target)]


def test_local_links_resolve():
  """Every link of README.md and docs/*.md to a local file names one that exists (relative to its page)."""
  broken = [f"{page.relative_to(PROJECT_ROOT)}: {target}" for page in PAGES for target in local_links(page.read_text())
            if not (page.parent / target.split("#", 1)[0]).exists()]
  assert not broken, "links to files that do not exist:\n" + "\n".join(broken)
  linked = {(README.parent / target.split("#", 1)[0]).resolve() for target in local_links(README.read_text())}
  unlinked = sorted(str(page.relative_to(PROJECT_ROOT)) for page in PAGES[1:] if page.resolve() not in linked)
  assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_local_links_found_and_checked():
  """The link finder sees a link in prose, and not brackets in code."""
  text = "See [a](docs/a.md#x), [web](https://example.org), [here](#top).\n`[b](c.md)`\n```python\nx[0](1)\n```\n"
  assert local_links(text) == ["docs/a.md#x"]


def test_every_readme_command_runs_with_the_venv_python():
  """One convention (issue 34): `.venv/bin/python`, as the README says once; a bare `python` fails
  outside an activated venv (ModuleNotFoundError: absl)."""
  text = README.read_text()
  assert "`.venv/bin/python`" in text and "ModuleNotFoundError" in text
  bare = [f"{COMMAND_PAGES[command]}: {command}" for command in COMMANDS if re.search(r"(^|\s)python3? ", command)]
  assert not bare, "commands with a bare python:\n" + "\n".join(bare)


@pytest.mark.parametrize("case", CASES, ids=[case.prefix for case in CASES])
def test_readme_command(workspace, case):
  commands = [command for command in COMMANDS if case_of(command) is case]
  if not commands:
    pytest.skip("no README command (test_every_readme_command_has_a_case says so)")
  for command in commands:
    if needs_shared_data(command):
      pytest.skip(f"real data not found at {SHARED_DATA} (it lives beside the project, never in it): {command}")
    case.check(workspace, command, workspace.result(command))
