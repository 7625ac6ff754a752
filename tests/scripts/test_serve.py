"""The leaderboard API on loopback: answers, errors, concurrency, and the command line."""
import concurrent.futures
import http.client
import json
import re
import threading

import pytest

from scripts import serve
from tests.helpers.processes import start_server

MAX_BYTES = 4096
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
  srv = serve.make_server(serve.tfidf_generator(train_file), "127.0.0.1", 0, MAX_BYTES)
  thread = threading.Thread(target=srv.serve_forever, daemon=True)
  thread.start()
  yield srv
  srv.shutdown()
  srv.server_close()
  thread.join(timeout=10)


def _post(port: int, body: bytes, path: str = serve.ASK_PATH) -> tuple[int, dict]:
  conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
  try:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())
  finally:
    conn.close()


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
    (_ask([{"title": "t", "subreddit": "Advice"}]), 400, r"instances\[0\]: missing field 'selftext'"),
    (_ask([{"title": "t", "selftext": 3, "subreddit": "Advice"}]), 400, "'selftext' must be a string"),
    (_ask([_query(0)] * 60), 413, "over the limit"),
])
def test_bad_requests_get_clear_errors_and_serving_goes_on(server, body, status, message):
  port = server.server_address[1]
  got_status, payload = _post(port, body)
  assert got_status == status
  assert re.search(message, payload["error"])
  assert _post(port, _ask([_query(1)])) == (200, {"gens": [f"best answer about {TOPICS[1]}"]})


def test_unknown_path_is_404(server):
  status, payload = _post(server.server_address[1], _ask([_query(0)]), path="/api/other")
  assert status == 404 and "/api/askbatch" in payload["error"]


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


def test_command_line_serves_on_loopback(train_file, tmp_path):
  with open(tmp_path / "serve.log", "w+") as log:
    process, port = start_server(log, "--baseline=tfidf", f"--train_file={train_file}")
  try:
    assert _post(port, _ask([_query(4)])) == (200, {"gens": [f"best answer about {TOPICS[4]}"]})
  finally:
    process.terminate()
    process.wait(timeout=30)
