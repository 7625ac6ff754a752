"""Multi-host detection defers to JAX's own cluster detection (jax._src.clusters), so that a run
started on every worker of a plain Cloud TPU VM (Google's guide: `gcloud compute tpus tpu-vm ssh
NAME --worker=all --command="python -m scripts.train ..."`) joins the pod through the VM's metadata
server, a one-worker TPU VM stays single-host, and a machine on no cluster asks nobody anything.

The TPU VM is faked where JAX looks: its module's `running_in_cloud_tpu_vm` (what JAX sets at import
when it finds TPU chips and libtpu) and a local metadata server at GCE_METADATA_IP.
"""
import contextlib
import http.server
import threading

import jax
import pytest
from jax._src.clusters import cloud_tpu_cluster

from runner import lost_host
from runner import partitioning

SLURM = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "node[1-4]", "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}
CLUSTER_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "TPU_WORKER_HOSTNAMES",
                     "TPU_PROCESS_ADDRESSES", "TPU_WORKER_ID", "MEGASCALE_COORDINATOR_ADDRESS",
                     "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "SLURM_NTASKS", "OMPI_MCA_orte_hnp_uri",
                     "OMPI_COMM_WORLD_SIZE", "KUBERNETES_SERVICE_HOST", "TPU_SKIP_MDS_QUERY", *SLURM)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
  """This process's environment without any cluster's variables (TPU_SKIP_MDS_QUERY too, which
  JAX sets at import where it finds no TPU chips)."""
  for name in CLUSTER_VARIABLES:
    monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def tpu_vm(monkeypatch, endpoints: str, worker: int):
  """A Cloud TPU VM whose metadata server names `endpoints` (the slice's workers) and this worker;
  yields the metadata keys asked, in order."""
  attributes = {"agent-worker-number": str(worker), "worker-network-endpoints": endpoints,
                "tpu-env": f"ACCELERATOR_TYPE: 'v4-32'\nWORKER_ID: '{worker}'\n"}
  asked = []

  class Metadata(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
      key = self.path.rsplit("/", 1)[-1]
      asked.append(key)
      known = self.headers.get("Metadata-Flavor") == "Google" and key in attributes
      self.send_response(200 if known else 404)
      self.end_headers()
      self.wfile.write(attributes.get(key, "").encode())

    def log_message(self, *args):
      del args

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{server.server_port}")
  monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
  try:
    yield asked
  finally:
    server.shutdown()
    server.server_close()


def test_a_plain_tpu_vm_pod_is_found_through_its_metadata_server_and_joined(monkeypatch):
  joined = []
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  monkeypatch.setattr(jax.distributed, "initialize", lambda **arguments: joined.append(arguments))
  monkeypatch.setattr(jax.config, "update", lambda *args: None)
  monkeypatch.setattr(lost_host, "install", lambda *args: None)
  with tpu_vm(monkeypatch, "t1v-n-0,t1v-n-1,t1v-n-2,t1v-n-3", worker=2) as asked:
    assert partitioning.detected_cluster() is cloud_tpu_cluster.GceTpuCluster
    assert partitioning.run_processes() == (4, "JAX's GceTpuCluster")
    assert partitioning.looks_multi_host()
    partitioning.initialize_distributed()
  assert "agent-worker-number" in asked and "worker-network-endpoints" in asked
  # No coordinator named: jax.distributed.initialize() finds it through the same cluster.
  assert joined == [{"heartbeat_timeout_seconds": lost_host.DEFAULT_HEARTBEAT_TIMEOUT_S}]


def test_a_one_worker_tpu_vm_is_single_host(monkeypatch):
  with tpu_vm(monkeypatch, "10.130.0.7", worker=0):
    assert partitioning.run_processes() == (1, "JAX's GceTpuCluster")
    assert not partitioning.looks_multi_host()


def test_gke_slurm_and_open_mpi_are_jaxs_clusters_too(monkeypatch):
  # A GKE TPU node: no TPU VM metadata to ask, the slice in its variables.
  monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
  for name, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "host-0,host-1"),
                      ("MEGASCALE_NUM_SLICES", "1")):
    monkeypatch.setenv(name, value)
  assert partitioning.run_processes() == (2, "JAX's GkeTpuCluster")
  monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", False)
  assert partitioning.run_processes() == (1, "no cluster detected")  # as JAX: no TPU here, no GKE TPU slice
  for name, value in SLURM.items():
    monkeypatch.setenv(name, value)
  for tasks, multi_host in (("4", True), ("1", False)):
    monkeypatch.setenv("SLURM_NTASKS", tasks)
    assert partitioning.run_processes() == (int(tasks), "JAX's SlurmCluster")
    assert partitioning.looks_multi_host() == multi_host
  for name in (*SLURM, "SLURM_NTASKS"):
    monkeypatch.delenv(name)
  monkeypatch.setenv("OMPI_MCA_orte_hnp_uri", "1531576320.0;tcp://10.96.0.1:34911")
  monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
  assert partitioning.run_processes() == (8, "JAX's OmpiCluster")


def test_off_a_cluster_nothing_is_asked_and_a_named_coordinator_still_decides(monkeypatch):
  """This machine: JAX found no TPU chips, so the metadata server is never asked (it would hang
  where there is none); the variables scripts.launch_local sets make a run multi-host as before."""
  def no_metadata_here(key):
    raise AssertionError(f"asked the metadata server for {key}")
  monkeypatch.setattr(cloud_tpu_cluster, "get_metadata", no_metadata_here)
  assert not cloud_tpu_cluster.running_in_cloud_tpu_vm
  assert partitioning.detected_cluster() is None
  assert partitioning.run_processes() == (1, "no cluster detected") and not partitioning.looks_multi_host()
  explicit = {"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
  assert partitioning.run_processes(explicit) == (2, "JAX_NUM_PROCESSES")
  assert partitioning.looks_multi_host({"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234"})
  partitioning.initialize_distributed(multi_host=False)  # a single process joins nothing
  assert jax.process_count() == 1
