"""One local Ray cluster for the ray tests: a head and a worker node on this machine.

Started once per session (Ray takes seconds to start), with its own ``RAY_TMPDIR`` and a small
object store; stopped through the cluster object (never ``ray stop``). Skipped without ray.
Every node listens on loopback: Ray's ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` switch is off
before ray is imported (here and in the processes the tests start), else Ray swaps 127.0.0.1
for this machine's routable address.
"""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray")
from ray._private import ray_constants  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

LOOPBACK = "127.0.0.1"

STORE = 80 * 2**20  # bytes of object store per node
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def cluster():
    """A head (4 logical CPUs) and a worker node (2), the driver connected to them."""
    if ray.is_initialized():
        pytest.skip("this process is already connected to Ray")
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "PYTHONPATH", "RAY_AUTH_MODE")}
    tmp = tempfile.TemporaryDirectory(prefix="envfleet-ray-")
    os.environ["RAY_TMPDIR"] = tmp.name
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # actors import envfleet and the test envs (tests.executors.envs) as this process does
    paths = [ROOT, os.path.join(ROOT, "src"), *filter(None, [saved["PYTHONPATH"]])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    ray_constants.ENABLE_RAY_CLUSTER = False  # (in case ray was imported before this module)
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "object_store_memory": STORE, "include_dashboard": False,
        "node_ip_address": LOOPBACK})
    c.add_node(num_cpus=2, object_store_memory=STORE, node_ip_address=LOOPBACK)
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tmp.cleanup()
