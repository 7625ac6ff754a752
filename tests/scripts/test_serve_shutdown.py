"""The server stopped by Ctrl-C or SIGTERM: the request in flight is answered, one line, exit 0."""
import signal
import socket
import time

from tests.helpers.processes import start_server
from tests.scripts.test_serve import TOPICS
from tests.scripts.test_serve import _ask
from tests.scripts.test_serve import _query
from tests.scripts.test_serve import train_file  # pylint: disable=unused-import  # a fixture


def _send_head_and_half_the_body(port: int, body: bytes) -> socket.socket:
  connection = socket.create_connection(("127.0.0.1", port), timeout=30)
  connection.sendall(b"POST /api/askbatch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:len(body) // 2])
  return connection


def _response(connection: socket.socket) -> bytes:
  chunks = []
  while chunk := connection.recv(1 << 16):
    chunks.append(chunk)
  return b"".join(chunks)


def test_ctrl_c_stops_the_server_after_the_request_in_flight(train_file, tmp_path):
  """SIGTERM takes the same handler (scripts.serve.serve_until_stopped)."""
  with open(tmp_path / "serve.log", "w+") as log:
    process, port = start_server(log, "--baseline=tfidf", f"--train_file={train_file}")
    try:
      body = _ask([_query(4)])
      connection = _send_head_and_half_the_body(port, body)
      time.sleep(0.5)  # the server accepts it and its thread waits for the rest of the body
      process.send_signal(signal.SIGINT)
      time.sleep(0.5)  # the server stops accepting, and waits for the request in flight
      assert process.poll() is None, "the server exited with a request in flight"
      connection.sendall(body[len(body) // 2:])
      response = _response(connection)
      connection.close()
      stdout, _ = process.communicate(timeout=60)
    finally:
      process.kill()
      process.wait()
    log.seek(0)
    stderr = log.read()
  assert response.startswith(b"HTTP/1.0 200 ") and f"best answer about {TOPICS[4]}".encode() in response, response
  assert process.returncode == 0, stderr[-3000:]
  assert stdout == "serve: stopped\n" and "Traceback" not in stderr, (stdout, stderr[-3000:])
