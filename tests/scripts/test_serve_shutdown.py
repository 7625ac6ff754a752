"""The server stopped by Ctrl-C or SIGTERM: the request in flight is answered, one line, exit 0; a
generation that outlives the grace is abandoned (its request answered 503), one line, exit 0."""
import os
import signal
import threading
import time

import pytest

from tests.helpers.processes import start_server
from tests.scripts.test_serve import TOPICS
from tests.scripts.test_serve import _ask
from tests.scripts.test_serve import _health
from tests.scripts.test_serve import _post
from tests.scripts.test_serve import _query
from tests.scripts.test_serve import response_of
from tests.scripts.test_serve import send_head_and_part_of_the_body
from tests.scripts.test_serve import train_file  # pylint: disable=unused-import  # a fixture


def test_ctrl_c_stops_the_server_after_the_request_in_flight(train_file, tmp_path):
  """SIGTERM takes the same handler (scripts.serve.serve_until_stopped)."""
  with open(tmp_path / "serve.log", "w+") as log:
    process, port = start_server(log, "--baseline=tfidf", f"--train_file={train_file}")
    try:
      body = _ask([_query(4)])
      connection = send_head_and_part_of_the_body(port, body)
      time.sleep(0.5)  # the server accepts it and its thread waits for the rest of the body
      process.send_signal(signal.SIGINT)
      time.sleep(0.5)  # the server stops accepting, and waits for the request in flight
      assert process.poll() is None, "the server exited with a request in flight"
      connection.sendall(body[len(body) // 2:])
      response = response_of(connection)
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


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  """A random gin/models/t5_1_1/tiny.gin model: sampling 64 situations takes it seconds on a CPU."""
  import jax  # pylint: disable=g-import-not-at-top  # only this module's second test needs JAX
  from models.network import init_params  # pylint: disable=g-import-not-at-top
  from runner import checkpoints  # pylint: disable=g-import-not-at-top
  from models.config import T5Config  # pylint: disable=g-import-not-at-top
  # gin/models/t5_1_1/tiny.gin's model.
  tiny = T5Config(vocab_size=384, emb_dim=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
                  num_decoder_layers=2, mlp_activations=("gelu", "linear"), dropout_rate=0.0, dtype="float32",
                  logits_via_embedding=False)
  directory = tmp_path_factory.mktemp("tiny_checkpoint")
  checkpoints.save_params(str(directory / "params"), init_params(tiny, jax.random.PRNGKey(0)))
  checkpoints.write_model_config(str(directory), tiny)
  return directory


def test_sigterm_abandons_a_generation_that_outlives_the_grace_and_exits_0(tiny_checkpoint, tmp_path):
  """The generation runs in the model's native code when the grace ends: the server answers its
  request 503 and exits 0 with one line (it used to abort in the interpreter's finalization, 134)."""
  answer = []
  with open(tmp_path / "serve.log", "w+") as log:
    process, port = start_server(log, f"--checkpoint={tiny_checkpoint}", "--shutdown_grace_s=0.2",
                                 env=dict(os.environ, JAX_PLATFORMS="cpu"))
    try:
      asking = threading.Thread(target=lambda: answer.append(_post(port, _ask([_query(i % 8) for i in range(64)]))))
      asking.start()
      for _ in range(1200):
        if _health(port)[1]["generating"]:
          break
        time.sleep(0.05)
      process.send_signal(signal.SIGTERM)
      stdout, _ = process.communicate(timeout=60)
      asking.join(timeout=30)
    finally:
      process.kill()
      process.wait()
    log.seek(0)
    stderr = log.read()
  assert process.returncode == 0, stderr[-3000:]
  assert stdout.splitlines()[-1] == ("serve: stopped after the 0.2 s grace; the generation in flight was "
                                     "abandoned, 1 request(s) waiting for the model answered 503"), stdout
  assert answer == [(503, {"error": "the server is stopping; this request's generation was abandoned"})]
  assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr[-3000:]
