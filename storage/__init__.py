"""The one path layer: every file the project reads or writes, on a local disk or in a bucket.

A path a user gives (MODEL_DIR, EVAL_OUTPUT_DIR, a checkpoint, a data file, an output) may be
local or `gs://bucket/...`: on a TPU pod the hosts share nothing but a bucket, and a host's own
disk is lost on preemption. Paths stay as the user wrote them (a relative path is never made
absolute, a `gs://` one never becomes a local folder named `gs:`); reads and writes go through
etils `epath`, which speaks both (orbax and TensorStore, which write the checkpoints' arrays, speak
`gs://` themselves).

Object storage has no rename and no append: `write_bytes` replaces a local file atomically
(a temporary file beside it, then a rename) and writes a bucket object whole (an object appears
only once its upload completes). Outputs that grow are written as numbered whole objects
(runner/outputs.py).

`gs://` goes through gcsfs (`EPATH_USE_TF=false`), the same client on a pod and in a rehearsal:
with `STORAGE_EMULATOR_HOST` set (a local fake-gcs-server), gcsfs and TensorStore
(`TENSORSTORE_GCS_HTTP_URL`, set here from it) both talk to the emulator, so one variable makes
a whole run testable offline. TensorFlow's own GCS filesystem cannot be redirected; what still
uses it (TensorBoard summaries) is turned off under the emulator (`tensorflow_reaches`).

A failure to reach storage (no credentials, no such bucket, permission denied, the network) or a
full local disk while `write_bytes` writes is a `StorageError`: an OSError whose message is one
line naming the path and the cause.
"""
import contextlib
import errno
import glob as glob_module
import os
import tempfile
from typing import Iterator

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
FILE_MODE = 0o644  # outputs are read by others (a report server, a colleague); mkstemp makes 0600
# A local disk that takes no more bytes: the machine's state, not a bug, so one line naming the path.
_DISK_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def route_gs_traffic() -> None:
  """Sends every `gs://` read and write through gcsfs (and TensorStore), to the emulator when
  STORAGE_EMULATOR_HOST names one. Runs on import, before any bucket is touched (a test that
  starts an emulator later calls it again)."""
  os.environ["EPATH_USE_TF"] = "false"
  emulator = os.environ.get(EMULATOR_VARIABLE, "")
  if emulator and emulator != "default":
    url = emulator if emulator.startswith(("http://", "https://")) else f"http://{emulator}"
    os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", url)
    # The emulator takes any token: without one TensorStore logs an error hunting for credentials,
    # and gcsfs asks a control-plane API the emulator lacks for each bucket's layout.
    os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
  try:
    import fsspec  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  # Hosts see each other's objects: a cached listing would hide a checkpoint another host wrote.
  fsspec.config.conf.setdefault("gs", {})["use_listings_cache"] = False


route_gs_traffic()

from etils import epath  # pylint: disable=g-import-not-at-top,wrong-import-position  # after the routing


class StorageError(OSError):
  """A path that could not be read or written, for a reason outside the program: one line."""


def is_bucket(path) -> bool:
  """Whether `path` names object storage (`gs://...`), where there is no rename and no append."""
  return "://" in os.fspath(path)


def emulated() -> bool:
  """Whether `gs://` goes to a local emulator (STORAGE_EMULATOR_HOST)."""
  return os.environ.get(EMULATOR_VARIABLE, "") not in ("", "default")


def tensorflow_reaches(path) -> bool:
  """Whether TensorFlow's own file system can write `path`: not a bucket under the emulator."""
  return not (is_bucket(path) and emulated())


def join(path, *parts) -> str:
  """`path/part/...` as a string, for either kind of path (a bucket keeps its `gs://`)."""
  text = os.fspath(path)
  for part in parts:
    text = f"{text.rstrip('/')}/{part}" if is_bucket(text) else os.path.join(text, part)
  return text


def parent(path) -> str:
  text = os.fspath(path).rstrip("/")
  return text.rsplit("/", 1)[0] if is_bucket(text) else os.path.dirname(text)


def name(path) -> str:
  return os.fspath(path).rstrip("/").rsplit("/", 1)[-1]


def Path(path) -> epath.Path:  # pylint: disable=invalid-name  # the path type, as epath names it
  return epath.Path(os.fspath(path))


_UNREACHABLE = (
    ("DefaultCredentialsError", "no Google Cloud credentials (run `gcloud auth application-default login`, "
                                "or set STORAGE_EMULATOR_HOST for a local emulator)"),
    ("RefreshError", "the Google Cloud credentials were refused"),
)


def _cause(error: BaseException) -> str | None:
  """The reason, in a few words, when `error` says storage could not be reached or used; None for
  anything else (a bug keeps its traceback)."""
  kinds = {cls.__name__ for cls in type(error).__mro__}  # a subclass (a DNS failure) words as its base
  for name_, reason in _UNREACHABLE:
    if name_ in kinds:
      return reason
  code = getattr(error, "code", None)
  text = " ".join(str(error).split())[:160]
  if isinstance(error, FileNotFoundError):
    return "no such file or bucket"
  if isinstance(error, PermissionError) or code in (401, 403):
    return f"permission denied ({text})"
  if code == 404:
    return "no such file or bucket"
  if kinds & {"ClientConnectionError", "ServerDisconnectedError", "TimeoutError", "ConnectionError", "gaierror"}:
    return f"the storage service cannot be reached ({text})"
  if "HttpError" in kinds:
    return f"the storage service refused the request ({text})"
  return None


@contextlib.contextmanager
def naming_failures(path) -> Iterator[None]:
  """Turns a failure to reach or use storage at `path` into a one-line StorageError."""
  try:
    yield
  except StorageError:
    raise
  except Exception as error:  # pylint: disable=broad-except  # sorted out by _cause
    seen, cause = error, None
    while seen is not None and cause is None:
      cause = _cause(seen)
      seen = seen.__cause__ or seen.__context__
    if cause is None:
      raise
    raise StorageError(f"{path}: {cause}") from error


def exists(path) -> bool:
  with naming_failures(path):
    return Path(path).exists()


def is_dir(path) -> bool:
  with naming_failures(path):
    return Path(path).is_dir()


def is_file(path) -> bool:
  with naming_failures(path):
    return Path(path).is_file()


def list_names(directory) -> list[str]:
  """The names in `directory` (files and folders), sorted; [] when it does not exist."""
  with naming_failures(directory):
    folder = Path(directory)
    return sorted(child.name for child in folder.iterdir()) if folder.exists() else []


def glob(directory, pattern: str) -> list[str]:
  """Paths under `directory` matching `pattern` (`**` descends into folders), sorted."""
  if not is_bucket(directory):
    return sorted(glob_module.glob(os.path.join(directory, pattern), recursive=True))
  with naming_failures(directory):  # epath refuses `**`; gcsfs walks it with one listing per folder
    fs = epath.backend.fsspec_backend.fs(os.fspath(directory))
    return sorted("gs://" + p for p in fs.glob(join(directory, pattern)))


def size(path) -> int:
  with naming_failures(path):
    return Path(path).stat().length


def read_bytes(path) -> bytes:
  with naming_failures(path):
    return Path(path).read_bytes()


def read_text(path) -> str:
  return read_bytes(path).decode("utf-8")


@contextlib.contextmanager
def open_file(path, mode: str = "r"):
  """An open file for reading (`mode` "r" or "rb"), local or in a bucket."""
  with naming_failures(path):
    with Path(path).open(mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
      yield f


def makedirs(directory) -> None:
  """Creates a local folder and its parents; a bucket has no folders to make."""
  if not is_bucket(directory):
    os.makedirs(directory, exist_ok=True)


def write_bytes(path, data: bytes) -> None:
  """Writes `data` to `path` whole: a local file through a temporary file renamed over it (never
  half-written), a bucket object in one upload (it appears only when complete). A full local disk
  is a StorageError naming the path, and leaves no temporary file behind."""
  if is_bucket(path):
    with naming_failures(path):
      Path(path).write_bytes(data)
    return
  with _naming_a_full_disk(path):
    _replace_local_file(path, data)


@contextlib.contextmanager
def _naming_a_full_disk(path) -> Iterator[None]:
  """A local disk or quota that is full, met while writing `path`: one line naming it."""
  try:
    yield
  except OSError as error:
    if error.errno not in _DISK_FULL:
      raise
    raise StorageError(f"{path}: {_DISK_FULL[error.errno]}") from error


def _write_aside(path, data: bytes) -> str:
  """A temporary file beside `path` holding `data`, written and synced (removed on any failure)."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
  try:
    os.chmod(tmp, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
  except BaseException:
    os.unlink(tmp)
    raise
  return tmp


def _replace_local_file(path, data: bytes) -> None:
  """`data` written aside, then renamed over `path`; on any failure (a full disk mid-write) the
  temporary file is removed and `path` is left as it was."""
  tmp = _write_aside(path, data)
  try:
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise


def create_new(path, data: bytes) -> bool:
  """Writes `data` to `path` only if nothing is there, in one step no other writer can split:
  True when written, False when `path` already existed. A bucket asks the service to create the
  object only if absent (GCS's `ifGenerationMatch=0` precondition); a local file is written aside
  and hard-linked into place (a link fails when the name exists), so it is never seen half-written."""
  if is_bucket(path):
    with naming_failures(path):
      try:
        epath.backend.fsspec_backend.fs(os.fspath(path)).pipe_file(os.fspath(path), data, mode="create")
      except FileExistsError:
        return False
    return True
  with _naming_a_full_disk(path):
    tmp = _write_aside(path, data)
  try:
    os.link(tmp, path)
    return True
  except FileExistsError:
    return False
  finally:
    os.unlink(tmp)


def write_text(path, text: str) -> None:
  write_bytes(path, text.encode("utf-8"))


def remove(path) -> None:
  """Deletes a file or object; one that is not there is no error."""
  with naming_failures(path):
    target = Path(path)
    if target.exists():
      target.unlink()


def remove_tree(path) -> None:
  """Deletes a folder (every object under a bucket prefix) and what it holds."""
  with naming_failures(path):
    target = Path(path)
    if target.exists():
      target.rmtree()


def check_reachable(directory, what: str) -> None:
  """Stops a run whose `directory` (`what`: the macro naming it) cannot be reached, before it
  compiles or writes: a bucket must exist and answer with these credentials. Local folders are
  made when written."""
  if not is_bucket(directory):
    return
  bucket = os.fspath(directory).split("://", 1)[1].split("/", 1)[0]
  try:
    with naming_failures(directory):
      found = Path(f"gs://{bucket}").exists()
  except StorageError as error:
    raise StorageError(f"{what} {error}") from error.__cause__
  if not found:
    raise StorageError(f"{what} {directory}: the bucket gs://{bucket} does not exist "
                                     "(or these credentials cannot see it)")


def absolute(path) -> str:
  """A local path made absolute (orbax's wish); a bucket path as it is."""
  return os.fspath(path) if is_bucket(path) else os.path.abspath(path)


def move(source, target) -> None:
  """Moves a file or folder: a local rename; in a bucket (no rename), a copy of every object
  under `source`, then its deletion."""
  if not is_bucket(source):
    os.rename(source, target)
    return
  with naming_failures(source):
    fs = epath.backend.fsspec_backend.fs(os.fspath(source))
    fs.copy(os.fspath(source), os.fspath(target), recursive=True)
    fs.rm(os.fspath(source), recursive=True)
