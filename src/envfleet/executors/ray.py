"""``ray``: the envs on Ray actors, each stepping a contiguous share with a local engine.

W actors each own envs ``start .. stop - 1`` (``fleet.split``) and step them with a local
envfleet engine: an ``EnvGroup`` (``engine="serial"``, what every pool worker runs: the same
autoreset and trajectories as ``serial``) or a local ``pool`` for Gymnasium ids and factories,
and the native kernel (``engine="numba"``: ``envfleet.make(id, k, backend="numba")``) for
native ids. The driver makes one RPC per actor per batch (the share's actions as one array per
leaf, at most one request in flight per actor) and copies each reply's arrays into its own
preallocated batch buffers. ``RayTransport`` does that for ``fleet.ShareFleet`` (the
Gymnasium contract, faults and first-ready batches); ``RayVectorEnv`` is the fleet over it.

Faults: an actor that dies (process killed, node lost: ``RayActorError``, read by ``_death``,
Ray's text chained as the cause) or stays silent past ``step_timeout`` is killed and reported as
``EnvWorkerError`` naming its envs (``env_indices``); an env that raises comes back as the same
error as on every backend (env index, remote traceback). With ``restart_failed=True`` the actor
is built again wherever Ray finds room (waited for up to ``step_timeout``, else fatal), and its
envs' episodes end as truncated with ``info["env_failure"]`` (as ``processes`` does for a
worker).

Start-up: with no Ray to join, the env starts a local one listening on loopback only, without
the dashboard (``start_loopback_ray``), and shuts it down at ``close()`` (a cluster it joined is
left running); a cluster without room for the actors, in all or node by node, is refused at
once, naming what they ask and what is free (``_check_room``). A user's native family travels
as its spec in the actors' arguments (``_native_payload``).

First-ready async (``batch_size < num_envs``, engine ``serial``): ``send`` / ``recv`` as the
pool's; an actor steps the envs it was sent one at a time and answers with their rows, the
driver waits on the actors' replies with ``ray.wait`` and hands out the first that are ready; a
lost actor is restarted without blocking the others (``_begin_restart`` / ``_end_restart``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.executors.base import (
    DEFAULT_STEP_TIMEOUT,
    EnvWorkerError,
    RemoteTraceback,
    failure_error,
    spaces_mismatch,
)
from envfleet.executors.fleet import (
    MIN_START_TIMEOUT,
    ShareFleet,
    check_batch_size,
    check_count,
    check_number,
    check_timeout,
    split,
)
from envfleet.executors.group import Infos
from envfleet.executors.infos import InfoParts, entries, tree_of
from envfleet.executors.runner import (
    NativeEnvs,
    ShareRunner,
    check_per_env,
    choose_engine,
    kernel_names,
    output_names,
    process_identity,
)
from envfleet.executors.shared_memory import assign_rows, take_rows
from envfleet.executors.transport import Share

#: how long actors asked to close may take before they are killed
CLOSE_GRACE = 2.0
#: how long make waits for free resources that Ray still counts as held (it frees those of
#: actors just killed, e.g. by another env's close(), a fraction of a second later)
FREE_GRACE = 2.0
#: the stand-in reply of an actor lost (and started again) during a call
LOST = ("lost",)
@dataclass
class Actor(Share):
    """One actor of the driver, its share and its async state."""

    handle: Any = None
    pid: int | None = None
    node: str | None = None
    identity: tuple[str, str, str] | None = None  # its process's (``runner.process_identity``)
    ref: Any = None  # async: the request in flight
    ids: np.ndarray | None = None  # async: the envs of that request
    queue: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list)
    #: async: a restart under way (what happened to the lost actor, the new one's hello, the
    #: time by which it must have started)
    restart: tuple[str, Any, float] | None = None

    def describe(self) -> str:
        node = f", node {self.node[:12]}" if self.node else ""
        return f"ray actor {self.index} ({self.envs()}{node})"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        from envfleet.backends import BackendUnavailableError

        raise BackendUnavailableError("backend 'ray' cannot run here: needs ray: pip install "
                                      "'envfleet[ray]'") from None
    return ray


#: the node address of a Ray that envfleet starts: its servers then listen on loopback only
LOOPBACK = "127.0.0.1"


def _init_ray(ray: Any, address: str | None) -> bool:
    """Join the user's Ray (``address``, else ``RAY_ADDRESS``, else the cluster ``ray start``
    made on this machine: Ray's own rule) or, when there is none, start a local one that
    listens on loopback only (``start_loopback_ray``); True when it started one (``close()``
    shuts down only that: a cluster joined keeps whatever else the process put on it)."""
    if address is None or address == "local":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address(address)
        except Exception:  # (a bad RAY_ADDRESS: ray.init says what is wrong with it)
            found = ""
        if found is None:
            start_loopback_ray(ray)
            return True
    ray.init(address=address)
    return False


def start_loopback_ray(ray: Any, **options: Any) -> None:
    """Start a local Ray (``ray.init`` ``options`` besides) whose every server (GCS, raylet,
    workers and actors, the runtime-env and dashboard agents) listens on 127.0.0.1, without
    the dashboard.

    Ray binds its servers to loopback when the node address is 127.0.0.1, but ``ray.init``
    swaps a loopback ``_node_ip_address`` for this machine's routable address unless its
    ``ENABLE_RAY_CLUSTER`` switch (the ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` environment
    variable, read when ray is imported) is off: it is turned off for this call only."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address="local", _node_ip_address=LOOPBACK, include_dashboard=False,
                 **options)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
    node = ray.util.get_node_ip_address()
    if node != LOOPBACK:
        warnings.warn(f"backend 'ray': the local Ray started for this env (ray "
                      f"{ray.__version__}) has node address {node}, not {LOOPBACK}: its GCS, "
                      f"raylet and worker servers listen on every interface; to keep them on "
                      f"this machine, start Ray yourself as docs/SECURITY.md says "
                      f"('Ray: what listens where') and pass address=", RuntimeWarning,
                      stacklevel=2)


def _shutdown(actors: list[Actor], owns_ray: list[bool]) -> None:
    """Close and kill every actor; shut Ray down if this env started it as a local instance
    (idempotent)."""
    try:
        import ray
    except ImportError:
        return

    if ray.is_initialized():
        handles = [a.handle for a in actors if a.handle is not None]
        refs = []
        for h in handles:
            with contextlib.suppress(Exception):
                refs.append(h.close.remote())
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_GRACE)
        for h in handles:
            with contextlib.suppress(Exception):
                ray.kill(h, no_restart=True)
    actors.clear()
    if owns_ray and owns_ray[0]:
        owns_ray[0] = False
        with contextlib.suppress(Exception):
            ray.shutdown()


def _amounts(resources: dict[str, float]) -> str:
    """``{"CPU": 4.0, "GPU": 0.5}`` as "4 CPU, 0.5 GPU" (nothing: "none")."""
    return ", ".join(f"{v:g} {k}" for k, v in resources.items()) or "none"


def _in_placement_group(placement: Any) -> bool:
    """``placement`` puts the actors in a Ray placement group (resources reserved apart)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return isinstance(placement, PlacementGroupSchedulingStrategy)


def _pinned_node(placement: Any) -> str | None:
    """The node ``placement`` confines the actors to (a hard node affinity), else None."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if isinstance(placement, NodeAffinitySchedulingStrategy) and not placement.soft:
        return placement.node_id
    return None


def _free_per_node(placement: Any) -> dict[str, dict[str, float]] | None:
    """Each live node's free resources (node id -> amounts; only the node ``placement`` pins
    the actors to, if any), or None where Ray does not say (e.g. through Ray Client)."""
    try:
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node()
    except Exception:
        return None
    node = _pinned_node(placement)
    return {k: v for k, v in free.items() if node is None or k == node}


def _room(free: dict[str, float], asks: dict[str, float]) -> float:
    """How many actors asking ``asks`` fit in one node's ``free`` resources (an actor runs on
    one node: resources free on several do not add up for it)."""
    return min((math.floor(free.get(k, 0.0) / v + 1e-9) for k, v in asks.items()),
               default=math.inf)


def _nodes_text(nodes: dict[str, dict[str, float]], asks: dict[str, float]) -> str:
    """The free ``asks`` resources of the nodes with the most room (at most 4; then those
    closest to room for one), for messages."""
    def order(item: tuple[str, dict[str, float]]) -> tuple[float, float]:
        free = item[1]
        return -_room(free, asks), -sum(min(free.get(k, 0.0) / v, 1.0) for k, v in asks.items())

    best = sorted(nodes.items(), key=order)
    text = ", ".join(f"node {node[:12]}: {_amounts({k: free.get(k, 0.0) for k in asks})}"
                     for node, free in best[:4])
    more = f", and {len(best) - 4} more" if len(best) > 4 else ""
    return f"{text}{more}" if best else "no live node"


def _default_workers(ray: Any, num_cpus: float) -> int:
    """As many actors asking ``num_cpus`` as the cluster's CPUs hold, node by node (two nodes
    of 3 CPUs hold two actors of 2 CPUs, not three); at least one."""
    try:
        from ray._private.state import total_resources_per_node

        nodes = list(total_resources_per_node().values())
    except Exception:  # (Ray Client: the cluster's totals)
        nodes = [ray.cluster_resources()]
    cpus = [n.get("CPU", 0.0) for n in nodes]
    fits = sum(math.floor(c / num_cpus + 1e-9) for c in cpus) if num_cpus else sum(cpus)
    return max(1, int(fits))


def _check_room(ray: Any, workers: int, asks: dict[str, float], placement: Any) -> None:
    """Refuse at once (``EnvWorkerError``) when the cluster has less free than ``workers``
    actors asking ``asks`` each need in all, or when its nodes, one by one, have room for
    fewer of them (resources free on several nodes do not add up for one actor): Ray would
    leave them pending, and ``make`` would wait out its start timeout to blame a silent
    actor. Resources still held by actors just killed (another env's ``close()``) are waited
    for up to ``FREE_GRACE``."""
    need = {k: v * workers for k, v in asks.items()}
    deadline = time.monotonic() + FREE_GRACE
    while True:
        free = ray.available_resources()
        short = [k for k, v in need.items() if free.get(k, 0.0) < v - 1e-9]
        nodes = _free_per_node(placement)
        fits = nodes is None or sum(_room(n, asks) for n in nodes.values()) >= workers
        if (not short and fits) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    ask_less = ("num_workers=, num_cpus= (e.g. num_cpus=0.5 to share CPUs), num_gpus=, "
                "resources=")
    if short:
        total = ray.cluster_resources()
        raise EnvWorkerError(
            f"backend 'ray': {workers} actor(s) asking {_amounts(asks)} each need "
            f"{_amounts({k: need[k] for k in short})} in all, but the Ray cluster has "
            f"{_amounts({k: free.get(k, 0.0) for k in short})} free (of "
            f"{_amounts({k: total.get(k, 0.0) for k in short})}): other actors hold the rest "
            f"(another backend='ray' env still open?). Close them, or ask for less: {ask_less}")
    if not fits:
        assert nodes is not None
        room = int(sum(min(_room(n, asks), workers) for n in nodes.values()))
        raise EnvWorkerError(
            f"backend 'ray': {workers} actor(s) asking {_amounts(asks)} each: the Ray cluster "
            f"has {_amounts({k: free.get(k, 0.0) for k in asks})} free in all, but an actor "
            f"runs on one node and its nodes have room for {room} of them "
            f"({_nodes_text(nodes, asks)}). Ask for less per actor or use fewer actors "
            f"({ask_less}), or add nodes with room")


def _info_parts(a: Actor, infos: Infos, batched: dict[str, Any] | None,
                which: str) -> InfoParts:
    """An actor's infos as parts: its envs' own ``infos`` and, from a local engine, its
    share's ``batched`` info (``which``: "info", or its "final_info")."""
    parts = InfoParts([(None, infos)] if infos else [])
    if batched:
        tree = tree_of(batched.get("final_info", {}) if which == "final_info" else
                       {k: v for k, v in batched.items()
                        if k not in ("final_info", "_final_info")}, a.stop - a.start)
        if tree:
            parts.append((a.rows, tree))
    return parts


def _wait_for_room(placement: tuple | None, asks: dict[str, float], timeout: float,
                   step_timeout: float) -> str | None:
    """Wait up to ``timeout`` s for a live node with room for one actor asking ``asks``
    (``placement``: the room check's node filter, None: not checked); None once there is one
    (or where Ray does not say), else what the nodes have free."""
    if placement is None:
        return None
    deadline = time.monotonic() + timeout
    while True:
        nodes = _free_per_node(placement[0])
        if nodes is None or any(_room(n, asks) >= 1 for n in nodes.values()):
            return None
        if time.monotonic() >= deadline:
            return (f"no live node had room for an actor asking {_amounts(asks)} within "
                    f"step_timeout={step_timeout:g} s; free: {_nodes_text(nodes, asks)}")
        time.sleep(0.1)


def _actor_options(num_cpus: float, num_gpus: float, resources: dict[str, float] | None,
                   placement: Any, runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray's options for every actor: what it asks, where it goes, its runtime env (never
    restarted by Ray: a lost actor is the fleet's to restart)."""
    options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0,
                               "max_concurrency": 1}
    if resources:
        options["resources"] = dict(resources)
    if placement is not None:
        options["scheduling_strategy"] = placement
    if runtime_env:
        options["runtime_env"] = dict(runtime_env)
    return options


def _native_payload(native: NativeEnvs) -> tuple:
    """What an actor builds a native share from: the id, kwargs, episode limit and, for a
    family the user registered (``register_native_env``: only in the driver's registry), its
    spec itself, which travels with the actor's arguments, and its kernel functions' names."""
    from envfleet.envs import FAMILIES, NATIVE_ENVS

    spec = None if native.env_id in FAMILIES else NATIVE_ENVS[native.env_id]
    kernels = set() if spec is None else kernel_names(spec)
    return native.env_id, native.env_kwargs, native.max_episode_steps, spec, kernels


def _kill(a: Actor) -> None:
    """Kill actor ``a``: its process at once with SIGKILL when it runs on this machine (a
    stopped or hung process would hold its resources until Ray's own kill gives up waiting
    for it to exit, ~5 s), and the actor through Ray (wherever it runs)."""
    import ray

    if a.identity is not None and a.pid is not None and process_identity(a.pid) == a.identity:
        with contextlib.suppress(OSError):
            os.kill(a.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        ray.kill(a.handle, no_restart=True)


class RayShareRunner(ShareRunner):
    """A ``ShareRunner`` as a Ray actor: it names its Ray node."""

    def _node(self) -> str | None:
        import ray

        return ray.get_runtime_context().get_node_id()


class RayTransport:
    """The Ray transport of ``ShareFleet`` (``transport.Transport``): actors spawned, sent
    work, gathered, killed, replaced and shut down (see the module doc)."""

    #: a lost actor is rebuilt in a call too (the call itself then fails)
    restart_phases = ("step", "reset", "call", "set_attr")

    def __init__(self, envs: list[Callable[[], Any]] | NativeEnvs, engine: str,
                 num_workers: int | None, envs_per_worker: int | None, address: str | None,
                 num_cpus: float, num_gpus: float, resources: dict[str, float] | None,
                 placement: Any, runtime_env: dict[str, Any] | None,
                 engine_options: dict[str, Any] | None) -> None:
        """Keep the (checked) options: ``start`` joins or starts Ray and spawns the actors."""
        self.envs, self.engine, self.address = envs, engine, address
        self.num_workers, self.envs_per_worker = num_workers, envs_per_worker
        self.num_cpus, self.num_gpus, self.resources = num_cpus, num_gpus, resources
        self.placement, self.runtime_env = placement, runtime_env
        self._engine_options = dict(engine_options or {})
        self.actors: list[Actor] = []
        #: during a restart: (what happened to the lost actor, the phase), for the error if the
        #: new one fails too
        self._restarting: tuple[str, str] | None = None
        self._owns_ray = [False]
        self._finalizer: Any = None
        self._refs: list[Any] = []  # the requests of the exchange under way

    def start(self, fleet: RayVectorEnv) -> list[Actor]:
        """Join the user's Ray or start a local one; spawn the actors (room checked first)."""
        self.fleet = weakref.proxy(fleet)  # (the fleet owns its transport: no cycle)
        self._finalizer = weakref.finalize(fleet, _shutdown, self.actors, self._owns_ray)
        self.step_timeout = fleet.step_timeout
        self.restart_failed = fleet.restart_failed
        num_envs = fleet.num_envs
        ray = _import_ray()
        if not ray.is_initialized():  # (a Ray started here: close() shuts it down)
            self._owns_ray[0] = _init_ray(ray, self.address)
        num_workers = self.num_workers
        if num_workers is None:
            if self.envs_per_worker is not None:
                num_workers = math.ceil(num_envs / self.envs_per_worker)
            else:
                num_workers = _default_workers(ray, self.num_cpus)
        self.num_workers = min(int(num_workers), num_envs)
        self._actor_cls = ray.remote(RayShareRunner).options(**_actor_options(
            self.num_cpus, self.num_gpus, self.resources, self.placement, self.runtime_env))
        envs, native = self.envs, self.envs if isinstance(self.envs, NativeEnvs) else None
        self._payloads = [_native_payload(native) if native is not None else envs[start:stop]
                          for start, stop in split(num_envs, self.num_workers)]
        self.envs = []
        self._asks = {k: float(v) for k, v in {"CPU": self.num_cpus, "GPU": self.num_gpus,
                                               **(self.resources or {})}.items() if v}
        #: the room check's node filter (None: a placement group's bundles are reserved
        #: apart, not checked)
        self._placement = None if _in_placement_group(self.placement) else (self.placement,)
        if self._placement is not None:
            _check_room(ray, self.num_workers, self._asks, self.placement)
        self._start()
        return self.actors

    def begin_batch(self) -> None:
        """(Each exchange has its own requests: nothing to count.)"""

    # --- start-up ----------------------------------------------------------------------------

    def _spawn(self, a: Actor) -> Any:
        a.handle = self._actor_cls.remote(self.engine, self._payloads[a.index], a.start,
                                          a.stop, self.fleet.autoreset_mode, self.restart_failed,
                                          self._engine_options)
        return a.handle.hello.remote()

    def _start(self) -> None:
        shares = split(self.fleet.num_envs, self.num_workers)
        self.actors.extend(Actor(w, start, stop) for w, (start, stop) in enumerate(shares))
        refs = [self._spawn(a) for a in self.actors]
        hellos = self._gather(self.actors, refs, "make",
                              max(self.step_timeout, MIN_START_TIMEOUT))
        for a, hello in zip(self.actors, hellos, strict=True):
            a.pid, a.node, a.identity = hello[4], hello[5], hello[6]
        (obs_space, act_space), (metadata, render_mode) = hellos[0][1], hellos[0][2]
        for a, hello in zip(self.actors[1:], hellos[1:], strict=True):
            for what, theirs, mine in zip(("observation_space", "action_space"), hello[1],
                                          (obs_space, act_space), strict=True):
                if theirs != mine:
                    raise spaces_mismatch(a.start, what, theirs, 0, mine)
        layout = self.fleet._setup(obs_space, act_space, metadata, render_mode)
        arrays = self.arrays = layout.local()
        arrays["rewards"] = np.zeros(self.fleet.num_envs, hellos[0][3])
        self.fleet._bind(arrays)
        self._outputs = output_names(self.arrays)
        self._action_names = [k for k in self.arrays if k.split(".")[0] == "act"]

    # --- talking to the actors ---------------------------------------------------------------

    def _gather(self, actors: list[Actor], refs: list[Any], phase: str,
                timeout: float) -> list[tuple]:
        """The replies of ``actors`` to ``refs`` (in order); a dead or silent actor is restarted
        (``LOST`` reply) or fatal; an env's error is raised once every actor answered."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        self._refs = refs
        deadline = time.monotonic() + timeout
        try:  # the common case in one call: every actor answers in time
            replies = ray.get(refs, timeout=timeout)
        except (GetTimeoutError, RayActorError):
            replies = None
        if replies is not None:
            self._refs = []
            for reply in replies:
                if reply[0] != "ok":
                    _raise_error(reply)
            return replies
        ready, _ = ray.wait(refs, num_returns=len(refs), fetch_local=True,
                            timeout=max(deadline - time.monotonic(), 0.0))
        ready_set = set(ready)
        replies = []
        for a, ref in zip(actors, refs, strict=True):
            if ref not in ready_set:
                what = self.fleet.silence()
                if phase == "make":  # (or Ray could not place it)
                    free = ray.available_resources()
                    what = (f"did not start within {timeout:g} s (each actor asks "
                            f"{_amounts(self._asks)}; the cluster has "
                            f"{_amounts({k: free.get(k, 0.0) for k in self._asks})} free "
                            f"now)")
                self._lost_actor(a, what, phase)
                replies.append(LOST)
                continue
            try:
                replies.append(ray.get(ref))
            except RayActorError as error:
                self._lost_actor(a, _death(error), phase, _ray_text(error))
                replies.append(LOST)
        self._refs = []
        for reply in replies:
            _raise_error(reply)
        return replies

    def _lost_actor(self, a: Actor, what: str, phase: str, tb: str | None = None) -> None:
        """Actor ``a`` died or stayed silent (``what``; ``tb``: Ray's full text): restart it or
        fail (``_failed``); the new actor of a restart that fails too is fatal, naming the
        first loss and the phase it happened in."""
        if self._restarting is not None:
            first, during = self._restarting
            self.fleet.fatal(a, f"{first}, and could not be restarted (its new actor {what})",
                        during, tb)
        self.fleet.failed(a, what, phase, tb)

    def stop(self, a: Actor) -> None:
        _kill(a)

    def shutdown(self) -> None:
        self._finalizer()

    def env_of(self, a: Actor, phase: str) -> int | None:
        """An actor's one env, once it runs (while it is made, Ray may not have placed it)."""
        return None if phase == "make" or a.stop - a.start > 1 else a.start

    def restarted_where(self, a: Actor) -> str:
        return f" on node {a.node[:12]}"

    def replace(self, a: Actor, fresh: bool, what: str, phase: str) -> Infos:
        """Build actor ``a`` again (any node with room, waited for up to ``step_timeout``);
        ``fresh``: its envs start under the autoreset rule (``ShareRunner.start_fresh``)."""
        why = _wait_for_room(self._placement, self._asks, self.step_timeout,
                             self.step_timeout)
        if why is not None:
            self.fleet.fatal(a, f"{what}, and could not be restarted ({why})", phase)
        self._restarting = (what, phase)
        try:
            reply = self._gather([a], [self._spawn(a)], "make",
                                 max(self.step_timeout, MIN_START_TIMEOUT))[0]
        finally:
            self._restarting = None
        a.pid, a.node, a.identity = reply[4], reply[5], reply[6]
        a.ref, a.ids, a.queue, a.restart = None, None, [], None
        if not fresh:
            return []
        reply = self._gather([a], [a.handle.start_fresh.remote()], phase,
                             self.step_timeout)[0]
        if reply is LOST:
            raise EnvWorkerError(f"{a.describe()} was lost again while its envs were reset "
                                 f"after a restart", env_indices=range(a.start, a.stop))
        return self._fresh(a, reply)

    def _fresh(self, a: Actor, reply: tuple) -> Infos:
        """Write a new actor's ``start_fresh`` reply (its envs' reset observations, if it reset
        them now); their infos."""
        if len(reply) == 1:  # (nothing was reset)
            return []
        self._write(a, reply[1], None, [k for k in self._outputs if k.split(".")[0] == "obs"])
        return entries(_info_parts(a, reply[2], reply[4], "info"))

    # --- async restarts: the other actors' envs are handed out meanwhile ---------------------

    def restart_later(self, share: Share, what: str) -> bool:
        """First-ready steps: a lost actor's restart does not hold back ``recv``
        (``_begin_restart``). Its new actor, silent for a ``step_timeout``, is waited for
        another while a node has room for it, up to the start timeout; else it is fatal."""
        a = self.actors[share.index]
        if a.restart is None:
            self._begin_restart(a, what)
            return True
        why = _wait_for_room(self._placement, self._asks, 0.0, self.step_timeout)
        if why is None and time.monotonic() < a.restart[2]:
            self.fleet.first_ready.heard[a.index] = min(time.monotonic(),
                                                        a.restart[2] - self.step_timeout)
            return True
        why = why or f"its new actor did not start within " \
                     f"{max(self.step_timeout, MIN_START_TIMEOUT):g} s"
        self.fleet.fatal(a, f"{a.restart[0]}, and could not be restarted ({why})", "step")

    def _begin_restart(self, a: Actor, what: str) -> None:
        """Start a new actor for lost ``a`` over new envs and return at once: its envs stay in
        flight until its ``start_fresh`` answer (``_end_restart``)."""
        self.stop(a)
        deadline = time.monotonic() + max(self.step_timeout, MIN_START_TIMEOUT)
        a.restart = (what, self._spawn(a), deadline)
        a.ref, a.ids, a.queue = a.handle.start_fresh.remote(), None, []
        self.fleet.first_ready.heard[a.index] = time.monotonic()

    def _end_restart(self, a: Actor, ref: Any) -> int:
        """The new actor of ``a`` answered: its envs' episodes end as truncated (``restart``),
        ready for ``recv``; returns how many of them were in flight."""
        import ray
        from ray.exceptions import RayActorError

        what, hello_ref, _ = a.restart
        try:
            hello, reply = ray.get([hello_ref, ref])
        except RayActorError as error:
            self.fleet.fatal(a, f"{what}, and could not be restarted (its new actor "
                           f"{_death(error)})", "step", _ray_text(error))
        for answer in (hello, reply):
            if answer[0] != "ok":
                self.fleet.break_down(f"{a.describe()}: its new envs failed after a restart")
                _raise_error(answer)
        a.restart, a.queue = None, []  # (actions sent meanwhile were for the envs replaced)
        a.pid, a.node, a.identity = hello[4], hello[5], hello[6]
        self.fleet.renew(a, what, "step", lambda: self._fresh(a, reply))
        return self.fleet.first_ready.end_lost()

    def _write(self, a: Actor, outputs: dict[str, np.ndarray], mask: np.ndarray | None,
               names: list[str] | None = None) -> None:
        """Copy an actor's reply rows into the batch buffers (only ``mask``'s rows if given)."""
        for name in names or self._outputs:
            value = outputs.get(name)
            if value is None:
                continue
            rows = self.arrays[name][a.start:a.stop]
            if mask is None:
                assign_rows(rows, value, slice(None))
            else:
                assign_rows(rows, take_rows(value, mask), mask)

    # --- the exchanges ------------------------------------------------------------------------

    def reset(self, mask: np.ndarray | None, seeds: list[int | None] | None,
                      options: dict[str, Any] | None) -> InfoParts:
        actors = [a for a in self.actors if mask is None or mask[a.start:a.stop].any()]
        refs = [a.handle.reset.remote(None if mask is None else mask[a.start:a.stop],
                                      None if seeds is None else seeds[a.start:a.stop],
                                      options) for a in actors]
        replies = self._gather(actors, refs, "reset", self.step_timeout)
        infos = InfoParts()
        for a, reply in zip(actors, replies, strict=True):
            if reply is LOST:
                continue
            self._write(a, reply[1], None if mask is None else mask[a.start:a.stop])
            infos += _info_parts(a, reply[2], reply[4], "info")
        return infos

    def step(self) -> tuple[InfoParts, InfoParts]:
        refs = [a.handle.step.remote({k: self.arrays[k][a.start:a.stop]
                                      for k in self._action_names}) for a in self.actors]
        replies = self._gather(self.actors, refs, "step", self.step_timeout)
        infos, finals = InfoParts(), InfoParts()
        for a, reply in zip(self.actors, replies, strict=True):
            if reply is LOST:
                continue
            self._write(a, reply[1], None)
            infos += _info_parts(a, reply[2], reply[4], "info")
            finals += _info_parts(a, reply[3], reply[4], "final_info")
        return infos, finals

    def call(self, owners: dict[int, list[int]], name: Any, args: tuple,
                     kwargs: dict[str, Any]) -> dict[int, list[Any]]:
        actors = [self.actors[index] for index in owners]
        refs = [a.handle.call.remote(owners[a.index], name, args, kwargs) for a in actors]
        replies = self._gather(actors, refs, "call", self.step_timeout)
        if any(reply is LOST for reply in replies):
            raise EnvWorkerError(f"call({name!r}): {'; '.join(self.fleet.lost.values())}",
                                 env_indices=self._lost_envs())
        return {a.index: reply[1] for a, reply in zip(actors, replies, strict=True)}

    def set_attr(self, owners: dict[int, list[int]], name: str,
                         values: dict[int, list[Any]]) -> None:
        actors = [self.actors[index] for index in owners]
        refs = [a.handle.set_attr.remote(owners[a.index], name, values[a.index])
                for a in actors]
        replies = self._gather(actors, refs, "set_attr", self.step_timeout)
        if any(reply is LOST for reply in replies):
            raise EnvWorkerError(f"set_attr({name!r}): {'; '.join(self.fleet.lost.values())}",
                                 env_indices=self._lost_envs())

    def _lost_envs(self) -> list[int]:
        """The envs of the actors lost (and restarted) in this exchange."""
        return [i for index in sorted(self.fleet.lost)
                for i in range(self.actors[index].start, self.actors[index].stop)]

    def resync(self) -> None:
        """After an interrupted call: wait for the requests still under way (dropping their
        answers); an actor that does not answer within ``step_timeout`` failed."""
        import ray

        busy = [a for a in self.actors if a.ref is not None]
        refs = self._refs + [a.ref for a in busy]
        self._refs = []
        for a in busy:
            a.ref, a.ids, a.queue = None, None, []
        if refs:
            _, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.step_timeout)
            if waiting:
                why = "an actor did not answer within step_timeout after an interrupt"
                self.fleet.break_down(why)
                raise EnvWorkerError(why, env_indices=range(self.fleet.num_envs))

    # --- first-ready batches (``first_ready.FirstReady``'s transport side) ------------------

    def drop_in_flight(self) -> None:
        for a in self.actors:
            if a.restart is not None:  # (a reset after an interrupt: the new actor answered)
                self._started(a, a.restart[1])
            a.ref, a.ids, a.queue, a.restart = None, None, [], None

    def _started(self, a: Actor, hello_ref: Any) -> None:
        """Record where actor ``a``'s new incarnation runs, if its hello has come."""
        import ray

        with contextlib.suppress(Exception):
            hello = ray.get(hello_ref, timeout=0)
            if hello[0] == "ok":
                a.pid, a.node, a.identity = hello[4], hello[5], hello[6]

    def hand(self, a: Actor, ids: np.ndarray) -> None:
        """Queue actor ``a``'s envs ``ids``; an idle actor gets them at once (one request in
        flight per actor)."""
        a.queue.append((ids, {k: take_rows(self.arrays[k], ids) for k in self._action_names}))
        if a.ref is None:
            self._submit(a)

    def _submit(self, a: Actor) -> None:
        """Send actor ``a`` everything queued for it, as one request."""
        parts, a.queue = a.queue, []
        a.ids = np.concatenate([p for p, _ in parts])
        a.ref = a.handle.step_some.remote(a.ids, {
            k: np.concatenate([acts[k] for _, acts in parts]) for k in self._action_names})

    def take_reports(self, timeout: float, phase: str) -> int:
        import ray

        busy = {a.ref: a for a in self.actors if a.ref is not None}
        ready, _ = ray.wait(list(busy), num_returns=1, timeout=timeout, fetch_local=True)
        return sum(self._report(busy[ref], phase) for ref in ready)

    def _report(self, a: Actor, phase: str) -> int:
        """Take actor ``a``'s answer: its envs are ready; returns how many."""
        import ray
        from ray.exceptions import RayActorError

        ref, ids = a.ref, a.ids
        a.ref, a.ids = None, None
        if a.restart is not None:
            return self._end_restart(a, ref)
        try:
            reply = ray.get(ref)
        except RayActorError as error:
            self._lost_actor(a, _death(error), phase, _ray_text(error))
            return self.fleet.first_ready.end_lost()
        if reply[0] != "ok":
            self.fleet.first_ready.arrived(ids.tolist(), ready=False)
            if a.queue:
                self._submit(a)
            _raise_error(reply)
        outputs, reports = reply[1], reply[2]
        for name in self._outputs:
            assign_rows(self.arrays[name], outputs[name], ids)
        self.fleet.first_ready.arrived(ids.tolist(), reports)
        if a.queue:
            self._submit(a)
        return len(ids)


class RayVectorEnv(ShareFleet):
    """``num_envs`` envs on Ray actors, each owning a contiguous share stepped by a local
    engine (``serial`` / ``pool`` for Gymnasium envs, ``numba`` for native ids), over
    ``RayTransport``."""

    backend = "ray"

    def __init__(self, envs: list[Callable[[], Any]] | NativeEnvs, *,
                 autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
                 seed: int | None = None, copy: bool = True,
                 num_workers: int | None = None, envs_per_worker: int | None = None,
                 address: str | None = None, num_cpus: float = 1, num_gpus: float = 0,
                 resources: dict[str, float] | None = None, placement: Any = "SPREAD",
                 runtime_env: dict[str, Any] | None = None, engine: str | None = None,
                 engine_options: dict[str, Any] | None = None,
                 step_timeout: float = DEFAULT_STEP_TIMEOUT, batch_size: int | None = None,
                 restart_failed: bool = False) -> None:
        native = envs if isinstance(envs, NativeEnvs) else None
        num_envs = native.num_envs if native is not None else len(envs)
        engine = choose_engine(engine, native is not None, check_batch_size(batch_size, num_envs),
                               num_envs)
        check_timeout(step_timeout)
        for name, value in (("engine_options", engine_options), ("runtime_env", runtime_env)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict, got {value!r}")
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if value is not None:
                check_count(name, value)
        for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
            check_number(name, value)
        self.engine = engine
        self.transport: RayTransport = RayTransport(
            envs, engine, num_workers, envs_per_worker, address, num_cpus, num_gpus, resources,
            placement, runtime_env, engine_options)
        super().__init__(self.transport, num_envs, autoreset_mode=autoreset_mode, seed=seed,
                         copy=copy, step_timeout=step_timeout, restart_failed=restart_failed,
                         batch_size=batch_size)

    @property
    def actor_nodes(self) -> list[str | None]:
        """The Ray node id of each actor (in env order)."""
        return [a.node for a in self.transport.actors]

    @property
    def actor_pids(self) -> list[int | None]:
        """The process id of each actor (on its node)."""
        return [a.pid for a in self.transport.actors]

    def call_at(self, env_indices: Any, name: str | Callable[..., Any], *args: Any,
                **kwargs: Any) -> tuple[Any, ...]:
        """As ``ExecutorVectorEnv.call_at``; native envs (one kernel per actor) have no per-env
        attributes: only ``call("render")`` runs there."""
        check_per_env(self.engine, name, args, kwargs)
        return super().call_at(env_indices, name, *args, **kwargs)

    def set_attr_at(self, env_indices: Any, name: str, values: Any) -> None:
        """As ``ExecutorVectorEnv.set_attr_at`` (not for native envs: no per-env attributes)."""
        check_per_env(self.engine, name, setting=True)
        super().set_attr_at(env_indices, name, values)


#: what a node that cannot import the envs' code needs, for the error of an actor that could
#: not be built
IMPORT_HINT = ("the actor's node could not import what the envs need: install it on every node, "
               "or ship it with Ray's runtime_env: ray.init(address=..., runtime_env="
               "{'py_modules': [module]} or {'working_dir': '.'}) before make (or `ray job "
               "submit --working-dir .`), or make(..., runtime_env=...) per actor (URIs, pip, "
               "env_vars); see docs/SCALING.md")


def _ray_text(error: BaseException) -> str:
    """Ray's message for ``error`` (the remote traceback of an actor's creation), uncoloured."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip() or type(error).__name__


def _death(error: BaseException) -> str:
    """What happened to a lost actor, in one line: its node was lost (which, and why), it could
    not be built on its node (the remote exception, and a hint when it is an import), or Ray's
    first line."""
    text = _ray_text(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    node = re.search(r"its node has died\. Node Id: ([0-9a-f]+)", text)
    if node:
        after = text[node.end():].strip().splitlines()
        reason = f": {after[0].strip()[:200]}" if after else ""
        return f"died: its node {node.group(1)[:12]} was lost{reason}"
    if getattr(error, "actor_init_failed", False):
        last = lines[-1][:300] if lines else type(error).__name__
        imports = any(k in text for k in ("ModuleNotFoundError", "ImportError",
                                          "No module named", "could not be computed"))
        return f"could not be built on its node ({last}){'; ' + IMPORT_HINT if imports else ''}"
    return f"died ({lines[0][:300] if lines else type(error).__name__})"


def _raise_error(reply: tuple) -> None:
    """Raise what an actor's error reply stands for (nothing for "ok" and ``LOST``)."""
    kind = reply[0]
    if kind == "error":
        raise failure_error(*reply[1])
    if kind == "env_error":
        _, message, index, tb = reply
        error = EnvWorkerError(message, env_index=index, worker_traceback=tb)
        raise error from RemoteTraceback(tb)
    if kind == "raise":
        raise reply[1] from RemoteTraceback(reply[2])
