r"""Serves advice over the TuringAdvice leaderboard API.

  python -m scripts.serve --baseline tfidf --train_file reddit_advice.jsonl
  python -m scripts.serve --checkpoint /path/to/checkpoint

POST /api/askbatch {"instances": [{"title", "selftext", "subreddit"}, ...]}
answers {"gens": [advice, ...]} in the same order; GET /health answers
{"status": "ok", "generating": ..., "waiting": ...}. Every refusal is JSON {"error": ...} and
serving goes on: 400 for a malformed request, an empty list or more than --max_situations;
413 for a body over --max_request_bytes (answered from its Content-Length, before the body is
read); 503 when the request would wait for the model, or its generation run, past
--request_timeout_s; 404 for another path and 405 for another method.

Requests are served on threads; the model runs on one thread of its own, one batch at a time, so
a slow or oversized request holds only its own connection. A request that runs past its deadline
is answered 503 while its generation goes on; its answer is dropped.

SIGINT (Ctrl-C) or SIGTERM stops the server: it accepts no new connection and lets the requests in
flight finish (up to --shutdown_grace_s seconds, or until a second signal), prints `serve: stopped`
and exits 0. A generation still running then is abandoned: the requests waiting for the model are
answered 503, one line says so, and the server exits 0 without waiting for it.
"""
import http
import http.server
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import urllib.parse
from typing import Callable, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

from scripts import console

ASK_PATH = "/api/askbatch"
HEALTH_PATH = "/health"
ROUTES = {ASK_PATH: "POST", HEALTH_PATH: "GET"}
FIELDS = ("title", "selftext", "subreddit")

MAX_REQUEST_BYTES = 1 << 20
MAX_SITUATIONS = 64
REQUEST_TIMEOUT_S = 120.0  # a generous first request on a large model, which compiles
SHUTDOWN_GRACE_S = 60.0  # how long a stopping server waits for the requests in flight

# After refusing a request whose body it has not read, the server reads and drops at most this much
# for at most this long before closing: closing on unread bytes resets the connection, and a client
# still sending would lose the answer.
_LINGER_BYTES = 16 << 20
_LINGER_S = 2.0
# How long a stopping server gives the requests it abandons to send their 503.
_ANSWER_ABANDONED_S = 2.0

Generator = Callable[[list[dict]], list[str]]


class RequestError(Exception):
  """A request the server refuses, with the HTTP status to answer."""

  def __init__(self, status: int, message: str, allow: Optional[str] = None):
    super().__init__(message)
    self.status = status
    self.allow = allow


def parse_instances(body: bytes, max_situations: int = MAX_SITUATIONS) -> list[dict]:
  """The validated instances of an askbatch body; RequestError(400) names what is wrong."""
  try:
    request = json.loads(body)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RequestError(400, f"request body is not valid JSON: {e}") from e
  if not isinstance(request, dict) or not isinstance(request.get("instances"), list):
    raise RequestError(400, "field 'instances': expected a list of situations")
  instances = request["instances"]
  if not instances:
    raise RequestError(400, "field 'instances': empty; send at least one situation")
  if len(instances) > max_situations:
    raise RequestError(400, f"field 'instances': {len(instances)} situations, over the limit of "
                            f"{max_situations} a request")
  for i, instance in enumerate(instances):
    if not isinstance(instance, dict):
      raise RequestError(400, f"instances[{i}]: expected an object, got {type(instance).__name__}")
    for field in FIELDS:
      if field not in instance:
        raise RequestError(400, f"instances[{i}]: missing field '{field}'")
      if not isinstance(instance[field], str):
        raise RequestError(400, f"instances[{i}]: field '{field}' must be a string")
  return [{f: instance[f] for f in FIELDS} for instance in instances]


class Job:
  """One request's batch for the model thread. It ends once: answered by the model, or refused
  by the request (its deadline) or the server (stopping), whichever comes first."""

  def __init__(self, instances: list[dict]):
    self.instances = instances
    self.done = threading.Event()
    self.gens: Optional[list[str]] = None
    self.error: Optional[RequestError] = None
    self._started = False
    self._lock = threading.Lock()

  def start(self) -> bool:
    """Marks the job started; False when it has already ended (nobody waits for its answer)."""
    with self._lock:
      self._started = not self.done.is_set()
      return self._started

  def end(self, gens: Optional[list[str]] = None, error: Optional[RequestError] = None) -> bool:
    """Ends the job unless it has ended already; returns whether this call ended it."""
    with self._lock:
      return self._end(gens, error)

  def _end(self, gens, error) -> bool:
    if self.done.is_set():
      return False
    self.gens, self.error = gens, error
    self.done.set()
    return True

  def expire(self, timeout_s: float) -> None:
    """Refuses the job at its request's deadline (503), saying whether it waited or ran past it."""
    with self._lock:
      if self._started:
        self._end(None, RequestError(503, f"generation ran past the deadline of {timeout_s:g} s a request; "
                                          "try fewer situations"))
      else:
        self._end(None, RequestError(503, f"the model was busy with other requests past the deadline of "
                                          f"{timeout_s:g} s a request; try again later"))


_STOPPING = RequestError(503, "the server is stopping; this request's generation was abandoned")


class ModelThread:
  """Runs the generator on one thread of its own, one job at a time: model generators need not be
  thread-safe, and a request thread that stops waiting (its deadline, a stopping server) leaves the
  model alone. A daemon thread, so that an abandoned generation does not keep the process alive."""

  def __init__(self, generator: Generator):
    self._generator = generator
    self._jobs: queue.SimpleQueue = queue.SimpleQueue()
    self._lock = threading.Lock()
    self._waiting: set[Job] = set()
    self._running: Optional[Job] = None
    self._abandoned = False
    self._thread = threading.Thread(target=self._run, name="serve-model", daemon=True)
    self._thread.start()

  def submit(self, instances: list[dict]) -> Job:
    job = Job(instances)
    with self._lock:
      if self._abandoned:  # a request that arrived whole after the server stopped waiting
        job.end(error=_STOPPING)
        return job
      self._waiting.add(job)
    self._jobs.put(job)
    return job

  def _run(self) -> None:
    while (job := self._jobs.get()) is not None:
      with self._lock:
        self._waiting.discard(job)
        if not job.start():
          continue
        self._running = job
      try:
        gens = list(self._generator(job.instances))
        if len(gens) != len(job.instances):
          raise RequestError(500, f"generator returned {len(gens)} answers for {len(job.instances)} instances")
        job.end(gens)
      except RequestError as e:
        job.end(error=e)
      except Exception as e:  # pylint: disable=broad-except
        logging.exception("generation failed")
        job.end(error=RequestError(500, f"generation failed: {e}"))
      finally:
        with self._lock:
          self._running = None

  def health(self) -> dict:
    with self._lock:
      return {"status": "ok", "generating": self._running is not None,
              "waiting": sum(not job.done.is_set() for job in self._waiting)}

  def generating(self) -> bool:
    with self._lock:
      return self._running is not None

  def abandon(self) -> int:
    """Refuses (503) every job not yet answered, the running one included, and starts no other;
    returns how many it refused. The running generation goes on until the process exits."""
    with self._lock:
      self._abandoned = True
      jobs = list(self._waiting) + ([self._running] if self._running else [])
    refused = sum(job.end(error=_STOPPING) for job in jobs)
    self.close()
    return refused

  def close(self) -> None:
    """Ends the thread once the jobs before this call have run."""
    self._jobs.put(None)


class AskBatchServer(http.server.ThreadingHTTPServer):
  """A threaded HTTP server that counts the connections it has accepted and not yet finished,
  so that a stopping server can let them finish (`wait_for_requests`), with the model's thread."""

  daemon_threads = True  # a client stalled past the grace period does not keep the process alive
  block_on_close = False  # server_close() does not join request threads: wait_for_requests bounds it

  def __init__(self, address, handler, model: ModelThread):
    super().__init__(address, handler)
    self.model = model
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

  def server_close(self):
    super().server_close()
    self.model.close()


def make_server(generator: Generator, host: str = "127.0.0.1", port: int = 0,
                max_request_bytes: int = MAX_REQUEST_BYTES, *, max_situations: int = MAX_SITUATIONS,
                request_timeout_s: float = REQUEST_TIMEOUT_S) -> AskBatchServer:
  """A threaded server for the askbatch API; the generator runs one batch at a time."""
  model = ModelThread(generator)

  class AskBatchHandler(http.server.BaseHTTPRequestHandler):
    timeout = 60  # Seconds a client may stall mid-request before its thread gives up.

    def _reply(self, status: int, payload: dict, allow: Optional[str] = None) -> None:
      data = json.dumps(payload).encode("utf-8")
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      if allow:
        self.send_header("Allow", allow)
      if self.close_connection:
        self.send_header("Connection", "close")
      self.end_headers()
      if self.command != "HEAD":
        self.wfile.write(data)

    def _content_length(self) -> int:
      length = self.headers.get("Content-Length")
      if length is None or not length.isdigit():
        raise RequestError(400, "header 'Content-Length': required, a non-negative integer")
      return int(length)

    def _linger(self) -> None:
      """Reads and drops what a client still sends of a refused body (bounded), having answered."""
      try:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_WR)
        self.connection.settimeout(_LINGER_S)
        deadline, dropped = time.monotonic() + _LINGER_S, 0
        while dropped < _LINGER_BYTES and time.monotonic() < deadline:
          chunk = self.rfile.read1(1 << 16)
          if not chunk:
            break
          dropped += len(chunk)
      except OSError:  # the client gave up first (a reset, a timeout): nothing is left to answer
        pass

    def _read_body(self, length: int, deadline: float) -> bytes:
      """The request's body, read by the request's deadline: a client that trickles its bytes
      (one every few seconds keeps a socket's own timeout from firing) is answered 503 then."""
      chunks, received = [], 0
      while received < length:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
          raise RequestError(503, f"the request's body took longer than the deadline of {request_timeout_s:g} s "
                                  f"to arrive ({received} of {length} bytes)")
        self.connection.settimeout(remaining)
        try:
          chunk = self.rfile.read1(min(length - received, 1 << 16))
        except TimeoutError:
          continue  # the deadline check above answers
        if not chunk:
          raise RequestError(400, f"the connection closed after {received} of the {length} bytes 'Content-Length' "
                                  "announced")
        chunks.append(chunk)
        received += len(chunk)
      self.connection.settimeout(self.timeout)  # the reply's writes: the handler's own timeout
      return b"".join(chunks)

    def _handle(self) -> None:
      deadline = time.monotonic() + request_timeout_s
      body_unread = True
      try:
        path = urllib.parse.urlsplit(self.path).path
        if path not in ROUTES:
          raise RequestError(404, f"unknown path {path!r}; the server answers POST {ASK_PATH} and GET {HEALTH_PATH}")
        if self.command != ROUTES[path]:
          raise RequestError(405, f"method {self.command} not allowed on {path}; use {ROUTES[path]}",
                             allow=ROUTES[path])
        if path == HEALTH_PATH:
          self._reply(http.HTTPStatus.OK, model.health())
          return
        length = self._content_length()
        if length > max_request_bytes:
          raise RequestError(413, f"request of {length} bytes is over the limit of {max_request_bytes}")
        body, body_unread = self._read_body(length, deadline), False
        instances = parse_instances(body, max_situations)
        job = model.submit(instances)
        if not job.done.wait(max(deadline - time.monotonic(), 0.0)):
          job.expire(request_timeout_s)
        if job.error:
          self._reply(job.error.status, {"error": str(job.error)})
        else:
          self._reply(http.HTTPStatus.OK, {"gens": job.gens})
      except RequestError as e:
        unread = body_unread and (self.headers.get("Content-Length", "0") != "0"
                                  or "Transfer-Encoding" in self.headers)
        if unread:
          self.close_connection = True  # what is left of the body is no next request
        self._reply(e.status, {"error": str(e)}, e.allow)
        if unread:
          self._linger()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle  # pylint: disable=invalid-name

    def send_error(self, code, message=None, explain=None):
      """The base class's errors (a malformed request line, an unknown method) in JSON, not HTML;
      an unknown method is routed like a known one, to 404 or 405."""
      del explain
      if code == http.HTTPStatus.NOT_IMPLEMENTED and self.command:
        self._handle()
        return
      self.close_connection = True
      self._reply(code, {"error": message or http.HTTPStatus(code).phrase})

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
      logging.info("%s %s", self.address_string(), format % args)

  return AskBatchServer((host, port), AskBatchHandler, model)


def serve_until_stopped(server: AskBatchServer, grace_s: float = SHUTDOWN_GRACE_S, ready_line: str = "") -> str:
  """Prints `ready_line` once its signal handlers are set (whoever reads the line may stop the
  server at once), then serves until SIGINT or SIGTERM, then stops accepting, waits up to `grace_s`
  seconds (or until a second signal) for the requests in flight, abandons the generation still
  running (its requests answered 503), and closes the socket. Returns the line that says how it
  stopped.

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
  generating, refused = False, 0
  try:
    if ready_line:
      print(ready_line, flush=True)
    server.serve_forever(poll_interval=0.1)
    unfinished = server.wait_for_requests(grace_s, give_up=lambda: len(received) > 1)
    if unfinished:
      generating = server.model.generating()
      refused = server.model.abandon()
      unfinished = server.wait_for_requests(_ANSWER_ABANDONED_S)
  finally:
    server.server_close()
    for number, handler in previous.items():
      signal.signal(number, handler)
  if not (generating or refused or unfinished):
    return "serve: stopped"
  when = "at a second signal" if len(received) > 1 else f"after the {grace_s:g} s grace"
  parts = ["the generation in flight was abandoned"] if generating else []
  parts.append(f"{refused} request(s) waiting for the model answered 503")
  if unfinished:
    parts.append(f"{unfinished} request(s) still arriving cut off")
  return f"serve: stopped {when}; " + ", ".join(parts)


def tfidf_generator(train_file: str) -> Generator:
  from t5_tasks.baselines import tfidf_advice  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import reddit_advice  # pylint: disable=g-import-not-at-top
  situations, report = reddit_advice.read_reddit_advice(train_file)
  train = [s for s in situations if s.split == "train"] or situations
  logging.info("indexed %d situations of %s (%d read)", len(train), train_file, report.read)
  return tfidf_advice.TfidfAdviceRetriever().fit(train)


def checkpoint_generator(checkpoint: str, **settings) -> Generator:
  """Samples advice from a checkpoint, formatting situations as the advice task does, with the
  vocabulary and feature lengths it was trained with unless `settings` give them. A path that
  holds no checkpoint is refused in one line before TensorFlow and the tasks are imported."""
  from runner import checkpoints  # pylint: disable=g-import-not-at-top  # JAX, only when serving a model
  checkpoints.check_checkpoint(checkpoint, "--checkpoint")
  from scripts import generate  # pylint: disable=g-import-not-at-top
  return generate.advice_generator(checkpoint, **settings)


def define_flags() -> None:
  """Defines the command line's flags; called only when run as a program, so that
  importing the server (tests, other programs) adds nothing to the global FLAGS."""
  flags.DEFINE_enum("baseline", None, ["tfidf"], "Serve a baseline instead of a checkpoint.")
  flags.DEFINE_string("train_file", None, "RedditAdvice2019 JSON lines indexed by --baseline=tfidf.")
  flags.DEFINE_string("checkpoint", None, "Checkpoint to sample advice from: a training run's MODEL_DIR, "
                      "a converted checkpoint or a Hugging Face directory.")
  flags.DEFINE_integer("input_length", None, "Input tokens of a situation (default: the checkpoint's recorded "
                       "TASK_FEATURE_LENGTHS inputs, else 512).", lower_bound=2)
  flags.DEFINE_integer("max_length", None, "Most tokens of an advice (default: the checkpoint's recorded "
                       "TASK_FEATURE_LENGTHS targets, else 256).", lower_bound=1)
  flags.DEFINE_string("sentencepiece_model", None, "SentencePiece model of a checkpoint that records no "
                      "vocabulary (default: the checkpoint's recorded one, else bytes).")
  flags.DEFINE_string("host", "127.0.0.1", "Address to bind; loopback unless told otherwise.")
  flags.DEFINE_integer("port", 5000, "Port to bind (0 picks a free one).")
  flags.DEFINE_integer("max_request_bytes", MAX_REQUEST_BYTES, "Larger request bodies get HTTP 413, "
                       "answered before the body is read.", lower_bound=1)
  flags.DEFINE_integer("max_situations", MAX_SITUATIONS, "More situations in one request get HTTP 400.",
                       lower_bound=1)
  flags.DEFINE_float("request_timeout_s", REQUEST_TIMEOUT_S, "Seconds a request may wait for the model "
                     "and generate; past them it gets HTTP 503 (its generation goes on, its answer dropped).",
                     lower_bound=0.001)
  flags.DEFINE_float("shutdown_grace_s", SHUTDOWN_GRACE_S, "Seconds a stopping server lets the requests in "
                     "flight finish before it abandons the generation still running and exits 0.", lower_bound=0)


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
    generator = checkpoint_generator(args.checkpoint, input_length=args.input_length, max_length=args.max_length,
                                     sentencepiece_model_path=args.sentencepiece_model)
  server = make_server(generator, args.host, args.port, args.max_request_bytes,
                       max_situations=args.max_situations, request_timeout_s=args.request_timeout_s)
  host, port = server.server_address[:2]
  ready_line = (f"serving POST http://{host}:{port}{ASK_PATH} and GET {HEALTH_PATH} (a request of at most "
                f"{args.max_request_bytes} bytes and {args.max_situations} situations, answered within "
                f"{args.request_timeout_s:g} s)")
  if getattr(generator, "settings", None):  # the model's: after the address, which callers read first
    ready_line += "\n" + generator.settings
  print(serve_until_stopped(server, args.shutdown_grace_s, ready_line), flush=True)
  if server.model.generating():
    # An abandoned generation's thread is inside the model's native code, where the interpreter's
    # finalization aborts it (exit 134): the line above is the last thing to write, so exit now.
    logging.flush()
    sys.stderr.flush()
    os._exit(0)  # pylint: disable=protected-access

if __name__ == "__main__":
  define_flags()
  from scripts import gin_cli  # pylint: disable=g-import-not-at-top  # one_line_errors (JAX: here, not on import)
  console.run(gin_cli.one_line_errors(main))
