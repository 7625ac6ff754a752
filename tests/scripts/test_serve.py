"""The leaderboard API on loopback: answers, errors, limits, concurrency, and the command line."""
import concurrent.futures
import contextlib
import http.client
import json
import re
import socket
import threading
import time

import pytest

from scripts import serve
from tests.helpers.processes import start_server

MAX_BYTES = 4096
MAX_SITUATIONS = 16
TOPICS = ["guitar chords practice", "landlord deposit lease", "puppy training crate",
          "tax refund paperwork", "marathon running knees", "wedding toast speech",
          "laptop overheating fan", "garden tomatoes blight"]


def _situation(i: int) -> dict:
  return {"id": f"s{i}", "subreddit": "Advice", "created_utc": 1500000000 + i, "split": "train",
          "title": f"Question about {TOPICS[i]}", "selftext": f"I need help with {TOPICS[i]} {TOPICS[i]}.",
          "good_comments": [{"body": f"weak answer {i}", "score": 1},
                            {"body": f"best answer about {TOPICS[i]}", "score": 50}]}


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("advice") / "train.jsonl"
  path.write_text("".join(json.dumps(_situation(i)) + "\n" for i in range(len(TOPICS))))
  return str(path)


@pytest.fixture(scope="module")
def server(train_file):
  with _serving(serve.make_server(serve.tfidf_generator(train_file), "127.0.0.1", 0, MAX_BYTES,
                                  max_situations=MAX_SITUATIONS)) as srv:
    yield srv


@contextlib.contextmanager
def _serving(srv):
  thread = threading.Thread(target=srv.serve_forever, daemon=True)
  thread.start()
  try:
    yield srv
  finally:
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def _request(port: int, method: str, path: str, body: bytes | None = None) -> http.client.HTTPResponse:
  """The response, read (`.data` holds its body)."""
  conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
  try:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.data = response.read()
    return response
  finally:
    conn.close()


def _post(port: int, body: bytes, path: str = serve.ASK_PATH) -> tuple[int, dict]:
  response = _request(port, "POST", path, body)
  return response.status, json.loads(response.data)


def _health(port: int) -> tuple[int, dict]:
  response = _request(port, "GET", serve.HEALTH_PATH)
  return response.status, json.loads(response.data)


def send_head_and_part_of_the_body(port: int, body: bytes, length: int | None = None,
                                   sent: int | None = None) -> socket.socket:
  """A client that declares a body of `length` bytes (the body's own by default) and sends its
  first `sent` (half by default), then stalls."""
  length = len(body) if length is None else length
  sent = len(body) // 2 if sent is None else sent
  connection = socket.create_connection(("127.0.0.1", port), timeout=30)
  connection.sendall(b"POST /api/askbatch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {length}\r\n\r\n".encode() + body[:sent])
  return connection


def response_of(connection: socket.socket) -> bytes:
  """All the server sends until it closes."""
  chunks = []
  while chunk := connection.recv(1 << 16):
    chunks.append(chunk)
  return b"".join(chunks)


def _ask(instances) -> bytes:
  return json.dumps({"instances": instances}).encode()


def _query(i: int) -> dict:
  return {"title": f"Help: {TOPICS[i]}", "selftext": f"Something about {TOPICS[i]}", "subreddit": "Advice"}


def test_batch_of_eight_answered_in_order(server):
  order = [3, 0, 7, 1, 6, 2, 5, 4]
  status, payload = _post(server.server_address[1], _ask([_query(i) for i in order]))
  assert status == 200
  assert payload["gens"] == [f"best answer about {TOPICS[i]}" for i in order]


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, "not valid JSON"),
    (b'{"situations": []}', 400, "'instances'"),
    (_ask([]), 400, "field 'instances': empty; send at least one situation"),
    (_ask([_query(0)] * (MAX_SITUATIONS + 1)), 400,
     f"field 'instances': {MAX_SITUATIONS + 1} situations, over the limit of {MAX_SITUATIONS} a request"),
    (_ask([{"title": "t", "subreddit": "Advice"}]), 400, r"instances\[0\]: missing field 'selftext'"),
    (_ask([{"title": "t", "selftext": 3, "subreddit": "Advice"}]), 400, "'selftext' must be a string"),
    (_ask([_query(0)] * 60), 413, f"request of \\d+ bytes is over the limit of {MAX_BYTES}"),
])
def test_bad_requests_get_clear_errors_and_serving_goes_on(server, body, status, message):
  port = server.server_address[1]
  got_status, payload = _post(port, body)
  assert got_status == status
  assert re.search(message, payload["error"])
  assert _post(port, _ask([_query(1)])) == (200, {"gens": [f"best answer about {TOPICS[1]}"]})


def test_health_answers_while_idle(server):
  response = _request(server.server_address[1], "GET", serve.HEALTH_PATH)
  assert response.status == 200 and response.getheader("Content-Type") == "application/json"
  assert json.loads(response.data) == {"status": "ok", "generating": False, "waiting": 0}


@pytest.mark.parametrize("method, path, status, message", [
    ("POST", "/api/other", 404, "unknown path '/api/other'; the server answers POST /api/askbatch and GET /health"),
    ("GET", "/", 404, "unknown path '/'; the server answers POST /api/askbatch and GET /health"),
    ("GET", "/api/askbatch", 405, "method GET not allowed on /api/askbatch; use POST"),
    ("DELETE", "/api/askbatch", 405, "method DELETE not allowed on /api/askbatch; use POST"),
    ("BREW", "/api/askbatch", 405, "method BREW not allowed on /api/askbatch; use POST"),
    ("POST", "/health", 405, "method POST not allowed on /health; use GET"),
])
def test_other_paths_and_methods_get_json_404_or_405(server, method, path, status, message):
  response = _request(server.server_address[1], method, path, _ask([_query(0)]))
  assert response.status == status and response.getheader("Content-Type") == "application/json"
  assert json.loads(response.data) == {"error": message}
  if status == 405:
    assert response.getheader("Allow") == serve.ROUTES[path]


def test_oversized_body_is_refused_from_its_length_while_others_are_served(server):
  """A client declaring a gigabyte gets its 413 after sending 1 KB: the server does not wait for
  (or read) the rest; another client is answered meanwhile."""
  port = server.server_address[1]
  connection = send_head_and_part_of_the_body(port, b"x" * 1024, length=10**9, sent=1024)
  try:
    connection.settimeout(10)
    response = response_of(connection)
    assert _post(port, _ask([_query(2)])) == (200, {"gens": [f"best answer about {TOPICS[2]}"]})
  finally:
    connection.close()
  head, body = response.split(b"\r\n\r\n", 1)
  assert head.startswith(b"HTTP/1.0 413 ") and b"Connection: close" in head, head
  assert json.loads(body) == {"error": f"request of {10**9} bytes is over the limit of {MAX_BYTES}"}


def test_a_stalled_client_does_not_hold_the_server(server):
  port = server.server_address[1]
  body = _ask([_query(3)])
  connection = send_head_and_part_of_the_body(port, body)
  try:
    assert _post(port, _ask([_query(5)])) == (200, {"gens": [f"best answer about {TOPICS[5]}"]})
    assert _health(port)[0] == 200
    connection.sendall(body[len(body) // 2:])
    response = response_of(connection)
  finally:
    connection.close()
  assert response.startswith(b"HTTP/1.0 200 ") and f"best answer about {TOPICS[3]}".encode() in response


def test_a_client_that_trickles_its_body_is_refused_at_the_deadline(train_file):
  """One byte every 0.2 s: no single read waits long enough for a socket timeout, so only the
  request's own deadline ends it (503, how much had arrived); another client is served meanwhile."""
  with _serving(serve.make_server(serve.tfidf_generator(train_file), request_timeout_s=1.5)) as srv:
    port = srv.server_address[1]
    body = _ask([_query(3)])
    connection = send_head_and_part_of_the_body(port, body, sent=0)
    started = time.monotonic()
    try:
      for byte in body[:20]:
        time.sleep(0.2)
        try:
          connection.sendall(bytes([byte]))
        except OSError:  # answered and closed: the rest is not read
          break
      assert _post(port, _ask([_query(5)])) == (200, {"gens": [f"best answer about {TOPICS[5]}"]})
      connection.settimeout(10)
      response = response_of(connection)
    finally:
      connection.close()
  assert time.monotonic() - started < 6
  head, reply = response.split(b"\r\n\r\n", 1)
  assert head.startswith(b"HTTP/1.0 503 "), head
  assert re.fullmatch(r"the request's body took longer than the deadline of 1.5 s to arrive \(\d of "
                      rf"{len(body)} bytes\)", json.loads(reply)["error"]), reply


def test_deadline_refuses_a_long_generation_and_the_requests_behind_it():
  """The model is busy past one request's deadline: that request and one queued behind it get
  503 saying which, /health still answers, and once the model is free requests are answered."""
  release = threading.Event()

  def generator(instances):
    release.wait(60)  # a generation that runs until the test lets it finish
    return [f"advice on {instance['title']}" for instance in instances]

  with _serving(serve.make_server(generator, request_timeout_s=0.5)) as srv:
    port = srv.server_address[1]
    try:
      assert _post(port, _ask([_query(0)])) == (
          503, {"error": "generation ran past the deadline of 0.5 s a request; try fewer situations"})
      assert _health(port) == (200, {"status": "ok", "generating": True, "waiting": 0})
      assert _post(port, _ask([_query(1)])) == (
          503, {"error": "the model was busy with other requests past the deadline of 0.5 s a request; "
                         "try again later"})
    finally:
      release.set()
    for _ in range(600):  # the abandoned generation ends; the expired request behind it never starts
      if not _health(port)[1]["generating"]:
        break
      time.sleep(0.05)
    assert _post(port, _ask([_query(2)])) == (200, {"gens": [f"advice on Help: {TOPICS[2]}"]})


def test_hundred_requests_from_eight_clients_a_quarter_malformed(server):
  port = server.server_address[1]
  bad_bodies = [b"{oops", _ask([{"title": "x"}]), _ask([_query(2)] * 60), b'{"instances": 5}']

  def one(n: int):
    if n % 4 == 0:
      return "bad", _post(port, bad_bodies[(n // 4) % len(bad_bodies)])
    i = n % len(TOPICS)
    return i, _post(port, _ask([_query(i), _query((i + 1) % len(TOPICS))]))

  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    results = list(pool.map(one, range(100)))
  bad = [r for kind, r in results if kind == "bad"]
  good = [(kind, r) for kind, r in results if kind != "bad"]
  assert len(bad) == 25 and len(good) == 75
  assert all(status in (400, 413) and "error" in payload for status, payload in bad)
  for i, (status, payload) in good:
    assert status == 200
    assert payload["gens"] == [f"best answer about {TOPICS[i]}",
                               f"best answer about {TOPICS[(i + 1) % len(TOPICS)]}"]
  assert _post(port, _ask([_query(5)]))[0] == 200


def test_parse_instances_keeps_only_the_api_fields():
  instances = serve.parse_instances(_ask([{**_query(0), "extra": 1}]))
  assert instances == [_query(0)]


def test_command_line_serves_on_loopback_with_its_limits(train_file, tmp_path):
  with open(tmp_path / "serve.log", "w+") as log:
    process, port = start_server(log, "--baseline=tfidf", f"--train_file={train_file}", "--max_situations=2",
                                 "--max_request_bytes=1000")
  try:
    assert _post(port, _ask([_query(4)])) == (200, {"gens": [f"best answer about {TOPICS[4]}"]})
    assert _post(port, _ask([_query(4)] * 3)) == (
        400, {"error": "field 'instances': 3 situations, over the limit of 2 a request"})
    assert _post(port, _ask([_query(4)] * 20))[0] == 413
    assert _health(port) == (200, {"status": "ok", "generating": False, "waiting": 0})
  finally:
    process.terminate()
    process.communicate(timeout=30)
