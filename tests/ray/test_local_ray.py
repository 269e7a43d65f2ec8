"""A Ray that ``backend="ray"`` starts itself (no address, none running): every socket that any
of its processes listens on (driver, GCS, raylet, agents, workers, the ``ShareRunner`` actors)
is on loopback, and there is no dashboard. Run in a fresh interpreter with its own
``RAY_TMPDIR``, so that it finds no cluster to join (not the tests' session cluster either)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

pytest.importorskip("ray")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: builds an env on a Ray it starts, then lists the listening sockets of its process tree
MEASURE = textwrap.dedent("""
    import functools, json, os, socket
    import numpy as np
    import ray
    import psutil  # (Ray's own copy: importable once ray is)
    import envfleet
    from tests.executors.envs import CountingEnv

    env = envfleet.make([functools.partial(CountingEnv, i) for i in range(2)], 2,
                        backend="ray", num_workers=2, num_cpus=0.5)
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    me = psutil.Process()
    rows = []
    for p in [me, *me.children(recursive=True)]:
        try:
            conns = p.net_connections(kind="inet")
            name = os.path.basename((p.cmdline() or [p.name()])[0].split(" ")[0])
        except psutil.Error:
            continue
        for c in conns:  # TCP listening, or UDP bound and unconnected
            if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr):
                rows.append([p.pid, name, c.laddr.ip, c.laddr.port])
    heads = [p.cmdline() for p in me.children(recursive=True)
             if any(a.endswith("dashboard/dashboard.py") for a in p.cmdline())]
    print(json.dumps({"actors": env.unwrapped.actor_pids, "listeners": rows,
                      "dashboard_heads": heads}))
    env.close()
    assert not ray.is_initialized()  # started by the env: shut down by its close()
""")


def loopback(ip: str) -> bool:
    """``ip`` is a loopback address (IPv4, IPv6, or IPv4 mapped into IPv6)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


@pytest.mark.slow
def test_a_ray_the_env_starts_listens_on_loopback_only_without_dashboard() -> None:
    with tempfile.TemporaryDirectory(prefix="envfleet-ray-local-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=tmp, RAY_AUTH_MODE="disabled",
                   PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "src")]))
        proc = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    listeners = found["listeners"]
    exposed = [row for row in listeners if not loopback(row[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    # the measure saw Ray's whole tree: the GCS, the raylet and each actor listen (on loopback)
    names = " ".join(row[1] for row in listeners)
    assert "gcs_server" in names and "raylet" in names, listeners
    assert set(found["actors"]) <= {row[0] for row in listeners}, (found["actors"], listeners)
    # no dashboard: Ray's head process (state API, usage stats) runs without its web frontend
    assert all("--disable-frontend" in head for head in found["dashboard_heads"]), found


class FakeRay:
    """Stands in for the ray module in ``start_loopback_ray``: records ``init``'s arguments and
    Ray's localhost switch during the call, and reports ``node`` as the node address."""

    __version__ = "0.0-fake"

    def __init__(self, node: str) -> None:
        from ray._private import ray_constants

        self.calls: list[tuple[dict, bool]] = []
        self.util = type("util", (), {"get_node_ip_address": staticmethod(lambda: node)})
        self._constants = ray_constants

    def init(self, **kwargs) -> None:
        self.calls.append((kwargs, self._constants.ENABLE_RAY_CLUSTER))


def test_the_local_start_asks_for_loopback_and_warns_when_ray_ignores_it(recwarn) -> None:
    from ray._private import ray_constants

    from envfleet.executors.ray import start_loopback_ray

    before = ray_constants.ENABLE_RAY_CLUSTER
    fine = FakeRay("127.0.0.1")
    start_loopback_ray(fine)
    assert fine.calls == [({"address": "local", "_node_ip_address": "127.0.0.1",
                            "include_dashboard": False}, False)]
    restored = ray_constants.ENABLE_RAY_CLUSTER
    assert restored == before and not recwarn.list
    with pytest.warns(RuntimeWarning, match=r"node address 10\.0\.0\.5.*every interface"):
        start_loopback_ray(FakeRay("10.0.0.5"))
