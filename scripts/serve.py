r"""Serves advice over the TuringAdvice leaderboard API.

  python -m scripts.serve --baseline tfidf --train_file reddit_advice.jsonl
  python -m scripts.serve --checkpoint /path/to/checkpoint

POST /api/askbatch {"instances": [{"title", "selftext", "subreddit"}, ...]}
answers {"gens": [advice, ...]} in the same order. Malformed requests get a
400 (413 when over --max_request_bytes) with {"error": ...}; serving goes on.

SIGINT (Ctrl-C) or SIGTERM stops the server: it accepts no new connection, lets the requests in
flight finish (up to SHUTDOWN_GRACE_S seconds), prints `serve: stopped` and exits 0.
"""
import http
import http.server
import json
import signal
import threading
import time
from typing import Callable, Sequence

from absl import app
from absl import flags
from absl import logging

from scripts import console

ASK_PATH = "/api/askbatch"
FIELDS = ("title", "selftext", "subreddit")

# Refused bodies up to this size are read and dropped; beyond it the connection is cut.
_DISCARD_LIMIT = 64 << 20

Generator = Callable[[list[dict]], list[str]]

SHUTDOWN_GRACE_S = 60.0  # how long a stopping server waits for the requests in flight


class RequestError(Exception):
  """A request the server refuses, with the HTTP status to answer."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


def parse_instances(body: bytes) -> list[dict]:
  """The validated instances of an askbatch body; RequestError(400) names what is wrong."""
  try:
    request = json.loads(body)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RequestError(400, f"request body is not valid JSON: {e}") from e
  if not isinstance(request, dict) or not isinstance(request.get("instances"), list):
    raise RequestError(400, "field 'instances': expected a list of situations")
  instances = request["instances"]
  for i, instance in enumerate(instances):
    if not isinstance(instance, dict):
      raise RequestError(400, f"instances[{i}]: expected an object, got {type(instance).__name__}")
    for field in FIELDS:
      if field not in instance:
        raise RequestError(400, f"instances[{i}]: missing field '{field}'")
      if not isinstance(instance[field], str):
        raise RequestError(400, f"instances[{i}]: field '{field}' must be a string")
  return [{f: instance[f] for f in FIELDS} for instance in instances]


class AskBatchServer(http.server.ThreadingHTTPServer):
  """A threaded HTTP server that counts the connections it has accepted and not yet finished,
  so that a stopping server can let them finish (`wait_for_requests`)."""

  daemon_threads = True  # a client stalled past the grace period does not keep the process alive
  block_on_close = False  # server_close() does not join request threads: wait_for_requests bounds it

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self._in_flight = 0
    self._finished = threading.Condition()

  def process_request(self, request, client_address):
    with self._finished:  # counted in serve_forever's thread, before shutdown() can return
      self._in_flight += 1
    try:
      super().process_request(request, client_address)
    except BaseException:
      self._count_finished()
      raise

  def process_request_thread(self, request, client_address):
    try:
      super().process_request_thread(request, client_address)
    finally:
      self._count_finished()

  def _count_finished(self):
    with self._finished:
      self._in_flight -= 1
      self._finished.notify_all()

  def wait_for_requests(self, timeout: float, give_up: Callable[[], bool] = lambda: False) -> int:
    """Waits up to `timeout` seconds (less once `give_up()`) for the accepted requests to finish;
    returns how many still run."""
    deadline = time.monotonic() + timeout
    with self._finished:
      while self._in_flight and not give_up() and time.monotonic() < deadline:
        self._finished.wait(min(0.1, max(deadline - time.monotonic(), 0.0)))
      return self._in_flight


def make_server(generator: Generator, host: str = "127.0.0.1", port: int = 0,
                max_request_bytes: int = 1 << 20) -> AskBatchServer:
  """A threaded server for the askbatch API; the generator runs one batch at a time."""
  generate_lock = threading.Lock()  # Model generators need not be thread-safe.

  class AskBatchHandler(http.server.BaseHTTPRequestHandler):
    timeout = 60  # Seconds a client may stall mid-request before its thread gives up.

    def _reply(self, status: int, payload: dict) -> None:
      data = json.dumps(payload).encode("utf-8")
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def _read_body(self) -> bytes:
      length = self.headers.get("Content-Length")
      if length is None or not length.isdigit():
        raise RequestError(400, "header 'Content-Length': required, a non-negative integer")
      if int(length) > max_request_bytes:
        self._discard(int(length))
        raise RequestError(413, f"request of {length} bytes is over the limit of {max_request_bytes}")
      return self.rfile.read(int(length))

    def _discard(self, length: int) -> None:
      """Reads a refused body so that closing does not reset the connection before the reply."""
      self.close_connection = True
      remaining = min(length, _DISCARD_LIMIT)
      while remaining > 0:
        chunk = self.rfile.read(min(remaining, 1 << 16))
        if not chunk:
          break
        remaining -= len(chunk)

    def do_POST(self):  # pylint: disable=invalid-name
      try:
        if self.path != ASK_PATH:
          raise RequestError(404, f"unknown path {self.path!r}; POST to {ASK_PATH}")
        instances = parse_instances(self._read_body())
        with generate_lock:
          gens = list(generator(instances))
        if len(gens) != len(instances):
          raise RequestError(500, f"generator returned {len(gens)} answers for {len(instances)} instances")
        self._reply(http.HTTPStatus.OK, {"gens": gens})
      except RequestError as e:
        self._reply(e.status, {"error": str(e)})
      except Exception as e:  # pylint: disable=broad-except
        logging.exception("generation failed")
        self._reply(http.HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"generation failed: {e}"})

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
      logging.info("%s %s", self.address_string(), format % args)

  return AskBatchServer((host, port), AskBatchHandler)


def serve_until_stopped(server: AskBatchServer, grace_s: float = SHUTDOWN_GRACE_S) -> str:
  """Serves until SIGINT or SIGTERM, then stops accepting, waits up to `grace_s` seconds (or until
  a second signal) for the requests in flight, and closes the socket. Returns the line that says
  how it stopped.

  Called from the main thread (where Python runs signal handlers). A handler may not call
  `server.shutdown()` itself: that waits for serve_forever, which runs in the same thread, to
  return, so the handler asks another thread to.
  """
  received = []

  def stop(signum, frame):
    del frame
    received.append(signum)
    if len(received) == 1:
      threading.Thread(target=server.shutdown, name="serve-shutdown", daemon=True).start()

  previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
  try:
    server.serve_forever()
    unfinished = server.wait_for_requests(grace_s, give_up=lambda: len(received) > 1)
  finally:
    server.server_close()
    for number, handler in previous.items():
      signal.signal(number, handler)
  if unfinished:
    return f"serve: stopped; {unfinished} request(s) still in flight were cut off"
  return "serve: stopped"


def tfidf_generator(train_file: str) -> Generator:
  from t5_tasks.baselines import tfidf_advice  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import reddit_advice  # pylint: disable=g-import-not-at-top
  situations, report = reddit_advice.read_reddit_advice(train_file)
  train = [s for s in situations if s.split == "train"] or situations
  logging.info("indexed %d situations of %s (%d read)", len(train), train_file, report.read)
  return tfidf_advice.TfidfAdviceRetriever().fit(train)


def checkpoint_generator(checkpoint: str) -> Generator:
  """Samples advice from a checkpoint, formatting situations as the advice task does."""
  from scripts import generate  # pylint: disable=g-import-not-at-top  # JAX, only when serving a model
  return generate.advice_generator(checkpoint)


def define_flags() -> None:
  """Defines the command line's flags; called only when run as a program, so that
  importing the server (tests, other programs) adds nothing to the global FLAGS."""
  flags.DEFINE_enum("baseline", None, ["tfidf"], "Serve a baseline instead of a checkpoint.")
  flags.DEFINE_string("train_file", None, "RedditAdvice2019 JSON lines indexed by --baseline=tfidf.")
  flags.DEFINE_string("checkpoint", None, "Checkpoint to sample advice from: a training run's MODEL_DIR, "
                      "a converted checkpoint or a Hugging Face directory.")
  flags.DEFINE_string("host", "127.0.0.1", "Address to bind; loopback unless told otherwise.")
  flags.DEFINE_integer("port", 5000, "Port to bind (0 picks a free one).")
  flags.DEFINE_integer("max_request_bytes", 1 << 20, "Larger request bodies get HTTP 413.")


def main(argv: Sequence[str]) -> None:
  del argv
  console.quiet_libraries()
  args = flags.FLAGS
  if (args.baseline is None) == (args.checkpoint is None):
    raise app.UsageError("give exactly one of --baseline or --checkpoint")
  if args.baseline == "tfidf":
    if not args.train_file:
      raise app.UsageError("--baseline=tfidf needs --train_file")
    generator = tfidf_generator(args.train_file)
  else:
    generator = checkpoint_generator(args.checkpoint)
  server = make_server(generator, args.host, args.port, args.max_request_bytes)
  host, port = server.server_address[:2]
  print(f"serving POST http://{host}:{port}{ASK_PATH}", flush=True)
  print(serve_until_stopped(server), flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
