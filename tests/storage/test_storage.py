"""The path layer (storage/): the same calls on a local folder and on a bucket (a local emulator),
whole-object writes, and one-line errors that name the path and the cause."""
import errno
import os
import re

import aiohttp
import pytest

import storage


@pytest.fixture(params=["local", "bucket"])
def folder(request, tmp_path):
  if request.param == "local":
    return str(tmp_path / "run")
  return request.getfixturevalue("bucket")


def test_writes_reads_lists_and_removes_alike_on_a_disk_and_in_a_bucket(folder):
  storage.write_text(storage.join(folder, "a", "one.json"), "{}\n")
  storage.write_bytes(storage.join(folder, "a", "b", "two.bin"), b"\x00\x01")
  assert storage.read_text(storage.join(folder, "a", "one.json")) == "{}\n"
  assert storage.read_bytes(storage.join(folder, "a", "b", "two.bin")) == b"\x00\x01"
  assert storage.list_names(storage.join(folder, "a")) == ["b", "one.json"]
  assert storage.is_dir(storage.join(folder, "a")) and storage.is_file(storage.join(folder, "a", "one.json"))
  assert storage.size(storage.join(folder, "a", "b", "two.bin")) == 2
  assert [storage.name(p) for p in storage.glob(folder, "**/*.bin")] == ["two.bin"]
  storage.write_text(storage.join(folder, "a", "one.json"), "[]\n")  # replaced whole
  assert storage.read_text(storage.join(folder, "a", "one.json")) == "[]\n"
  storage.remove_tree(storage.join(folder, "a"))
  assert not storage.exists(storage.join(folder, "a", "one.json"))
  assert storage.list_names(folder) == []


def test_a_bucket_path_stays_a_bucket_path_and_a_relative_one_stays_relative():
  assert storage.join("gs://runs/one", "checkpoints", "4") == "gs://runs/one/checkpoints/4"
  assert storage.parent("gs://runs/one/checkpoints/") == "gs://runs/one"
  assert storage.join("runs/one", "config.gin") == os.path.join("runs/one", "config.gin")
  assert storage.is_bucket("gs://runs") and not storage.is_bucket("runs/gs:")


def test_a_local_write_leaves_no_temporary_file(tmp_path):
  storage.write_text(tmp_path / "metrics.json", "{}")
  assert os.listdir(tmp_path) == ["metrics.json"]
  assert oct(os.stat(tmp_path / "metrics.json").st_mode & 0o777) == oct(storage.FILE_MODE)


class _FullDisk:
  """A file opened for writing on a disk that fills up: half of what is written lands, then the
  write fails with ENOSPC, as the operating system reports it."""

  def __init__(self, f):
    self._f = f

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self._f.close()

  def write(self, data):
    self._f.write(data[:len(data) // 2])
    self._f.flush()
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_the_file_as_it_was(tmp_path, monkeypatch):
  target = tmp_path / "metrics.json"
  storage.write_text(target, "{}")
  real_fdopen = os.fdopen
  monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode)))
  with pytest.raises(storage.StorageError, match=f"^{re.escape(str(target))}: no space left on device$") as raised:
    storage.write_text(target, '{"loss": 1.5}')
  assert isinstance(raised.value, OSError) and raised.value.__cause__.errno == errno.ENOSPC
  assert os.listdir(tmp_path) == ["metrics.json"] and target.read_text() == "{}"  # no temporary file, no half
  with pytest.raises(storage.StorageError, match=f"^{re.escape(str(tmp_path / 'new.json'))}: no space left"):
    storage.write_text(tmp_path / "new.json", "{}")
  assert os.listdir(tmp_path) == ["metrics.json"]


def test_a_missing_bucket_or_object_is_one_line_naming_the_path(bucket):
  with pytest.raises(storage.StorageError, match=r"^gs://no-such-bucket/x: no such file or bucket$"):
    storage.read_text("gs://no-such-bucket/x")
  with pytest.raises(storage.StorageError, match=rf"^{bucket}/missing.txt: no such file or bucket$"):
    storage.read_text(f"{bucket}/missing.txt")
  with pytest.raises(storage.StorageError, match=r"^MODEL_DIR gs://no-such-bucket/run: the bucket "
                                                 r"gs://no-such-bucket does not exist"):
    storage.check_reachable("gs://no-such-bucket/run", "MODEL_DIR")
  storage.check_reachable(f"{bucket}/run", "MODEL_DIR")  # the bucket exists: no error


def test_network_credential_and_permission_failures_are_one_line():
  """The causes gcsfs and google-auth raise, as storage words them (the network case is not
  provoked here: gcsfs retries an unreachable host for about a minute before it gives up)."""
  import google.auth.exceptions  # pylint: disable=g-import-not-at-top
  from gcsfs.retry import HttpError  # pylint: disable=g-import-not-at-top

  connection = aiohttp.ClientConnectorError(
      aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None),
      OSError(111, "Connect call failed"))
  dns = aiohttp.ClientConnectorDNSError(
      aiohttp.client_reqrep.ConnectionKey("storage.googleapis.com", 443, True, True, None, None, None),
      OSError(-2, "Name or service not known"))
  cases = [
      (connection, "the storage service cannot be reached"),
      (dns, "the storage service cannot be reached"),
      (google.auth.exceptions.DefaultCredentialsError("none found"), "no Google Cloud credentials"),
      (HttpError({"code": 403, "message": "caller does not have storage.objects.get"}), "permission denied"),
  ]
  for error, cause in cases:
    with pytest.raises(storage.StorageError) as raised:
      with storage.naming_failures("gs://runs/x"):
        raise error
    assert str(raised.value).startswith(f"gs://runs/x: {cause}") and "\n" not in str(raised.value)
  with pytest.raises(KeyError):  # a bug is not storage's to word
    with storage.naming_failures("gs://runs/x"):
      raise KeyError("field")

