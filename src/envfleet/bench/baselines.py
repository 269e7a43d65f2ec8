"""Baselines: what a user would pick instead of envfleet, built the way that user builds them.

Each baseline is N copies of the Gymnasium env (a native env's ``NativeEnvSpec.reference_id``,
or any Gymnasium id):

- ``gym-sync``: ``gymnasium.make_vec(id, N, vectorization_mode="sync")`` (a ``SyncVectorEnv``
  of N Python envs, stepped in a loop);
- ``gym-numpy``: ``gymnasium.make_vec(id, N, vectorization_mode="vector_entry_point")``
  (Gymnasium's own NumPy-vectorised env, e.g. ``CartPoleVectorEnv``);
- ``gym-async``: ``gymnasium.make_vec(id, N, vectorization_mode="async")`` (an
  ``AsyncVectorEnv``: one worker process per env, shared-memory observations);
- ``sb3-dummy``: Stable-Baselines3's ``DummyVecEnv`` over N ``gymnasium.make(id)`` envs;
- ``sb3-subproc``: Stable-Baselines3's ``SubprocVecEnv`` (one worker process per env, pipes);
- ``envpool``: EnvPool's own C++ env of the same id (``envpool.make_gymnasium(id, num_envs=N,
  batch_size=N, num_threads=T)``, sync mode), measured at every thread count T from 1 to the
  usable cores, its best kept (``thread_sweep``); an optional peer (``envfleet[envpool]``);
- ``pufferlib``: PufferLib's ``vector.Multiprocessing`` over ``GymnasiumPufferEnv`` wrappers
  (``num_workers`` as given, else the most usable cores dividing N); measured when asked for
  (``--study executors`` does), an optional peer (``pufferlib-core``);
- ``gymnax`` / ``gymnax-scan128``: gymnax's own JAX MinAtar game of a ``MinAtar/<Game>-vN`` id
  (``GymnaxMinAtar``) on JAX's CPU backend: ``jax.jit(jax.vmap(env.step))`` per call, or a
  jitted ``jax.lax.scan`` of 128 such steps per call (PureJaxRL's way); an optional peer
  (``scripts/install_gymnax.sh``); ``gymnax`` is in the default sweep of the ids it has
  (``native_default``), ``gymnax-scan128`` is measured when asked for.

Every contender is stepped with the same fixed batch of random actions, drawn from the batched
action space (the same seed gives the same actions, discrete or continuous).

The default sweep of a native id measures gym-numpy (where Gymnasium has a NumPy vector env:
CartPole-v1 only, in Gymnasium 1.4), gym-sync, sb3-dummy and envpool (``NATIVE_DEFAULT``); the
process-per-env baselines are for comparing envfleet's executors, and are measured by default
for other Gymnasium ids (envpool is not: ask for it).

Chess-v0 has no Gymnasium env: its peers (python-chess, OpenSpiel, pgx; ``benchmarks/chess/``,
which adds them here with ``register_peers``) are baselines that play one env id (``plays``)
and their own random legal moves (``BaselineEnv.action_space`` is None);
``native_default(env_id)`` gives them as its default.

This module only imports Gymnasium at module level; Stable-Baselines3 (which imports torch) is
imported when an ``sb3-*`` env is built, inside the measuring worker.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

#: Python-loop baselines hold one Python env object per env (~6-10 KB each, seconds to build
#: 65,536 of them): by default they are not measured above this many envs.
PYTHON_LOOP_MAX_ENVS = 65_536
#: baselines and executors that start one process per env are not measured above this many
#: envs by default
PROCESS_MAX_ENVS = 256


@dataclass(frozen=True)
class Baseline:
    """A way to get N copies of a Gymnasium env without envfleet."""

    name: str
    description: str
    #: builds one Python object per env (bounded by ``--baseline-max-envs``)
    python_loop: bool
    build: Callable[[str, int, int], BaselineEnv]
    requires: str | None = None  # an optional module it needs
    #: starts one worker process per env (bounded by ``--process-max-envs``)
    process_per_env: bool = False
    #: the one env id it plays (a game-specific peer), None: any Gymnasium id
    plays: str | None = None
    #: the threads it steps on (None: its own choice, e.g. XLA's)
    threads: int | None = 1
    #: build takes ``num_threads``: measured at 1 .. usable cores threads, the best kept
    thread_sweep: bool = False
    #: the extra that installs ``requires`` (default: bench)
    extra: str | None = None
    #: measured by default for a Gymnasium id that is not native (next to the executors)
    executor_default: bool = True
    #: the reference ids it has, when it runs its own envs rather than Gymnasium's (gymnax's
    #: MinAtar games); a native id among them has it in its default sweep (``native_default``)
    env_ids: Callable[[], frozenset[str]] | None = None
    #: how to install ``requires`` when one extra is not enough (default: the extra's line)
    install: str | None = None
    #: in the default sweep of the ids in ``env_ids`` (False: measured when asked for)
    default_sweep: bool = True

    def status(self, reference_id: str) -> str | None:
        """None when this baseline can run ``reference_id`` here, else the reason it cannot."""
        if self.plays is not None and reference_id != self.plays:
            return f"{self.name} plays {self.plays} only"
        if self.env_ids is not None and reference_id not in self.env_ids():
            return f"{self.name} has no {reference_id} env"
        if self.plays is None and self.env_ids is None and reference_id in GAME_PEER_IDS:
            return f"Gymnasium has no {reference_id} env"
        if self.requires and importlib.util.find_spec(self.requires) is None:
            install = self.install or f"pip install 'envfleet[{self.extra or 'bench'}]'"
            return f"not installed: needs {self.requires} ({install})"
        if self.env_ids is not None:  # its own envs: no Gymnasium env needed
            return None
        if self.plays is None and reference_id not in gymnasium.registry:
            return f"Gymnasium has no {reference_id} env here (is its package installed?)"
        if self.name == "gym-numpy" and gymnasium.spec(reference_id).vector_entry_point is None:
            return f"Gymnasium has no NumPy vector env for {reference_id}"
        if self.name == "envpool" and envpool_id(reference_id)[0] not in envpool_ids():
            return f"EnvPool has no {reference_id} env"
        return None


@dataclass
class BaselineEnv:
    """A built baseline with the one interface the measuring loop needs."""

    reset: Callable[[], Any]  # seeds and resets every env, returns the first observations
    #: steps every env with a batch of actions; without an action space, plays its own
    #: (random legal) actions: ``step()``
    step: Callable[..., Any]
    action_space: gymnasium.spaces.Space | None  # the batched action space
    close: Callable[[], None]
    #: how many times each call steps every env (a scan of steps per call: 128)
    steps_per_env: int = 1


#: namespace -> the function that builds one env of an id's reference stack, where the id's
#: peers play a preprocessed env (``ALE``: ``bench/engines``' ``reference_env``); other ids:
#: ``gymnasium.make(id)``
REFERENCE_STACKS: dict[str, Callable[[str], gymnasium.Env]] = {}
#: namespace -> (EnvPool's id of an id, the options giving it the same preprocessing)
ENVPOOL_IDS: dict[str, Callable[[str], tuple[str, dict[str, Any]]]] = {}


def reference_maker(env_id: str) -> Callable[[], gymnasium.Env]:
    """A picklable function that builds one env of ``env_id`` as the baselines play it."""
    stack = REFERENCE_STACKS.get(env_id.partition("/")[0]) if "/" in env_id else None
    return functools.partial(stack, env_id) if stack else functools.partial(gymnasium.make,
                                                                             env_id)


def _gym_vector(mode: str) -> Callable[[str, int, int], BaselineEnv]:
    def build(env_id: str, num_envs: int, seed: int) -> BaselineEnv:
        stacked = "/" in env_id and env_id.partition("/")[0] in REFERENCE_STACKS
        if stacked and mode in ("sync", "async"):  # the reference stack in each env
            vector = (gymnasium.vector.SyncVectorEnv if mode == "sync"
                      else gymnasium.vector.AsyncVectorEnv)
            env = vector([reference_maker(env_id)] * num_envs)
        else:
            env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
        return BaselineEnv(reset=lambda: env.reset(seed=seed)[0], step=env.step,
                           action_space=env.action_space, close=env.close)

    return build


def _sb3_dummy(env_id: str, num_envs: int, seed: int) -> BaselineEnv:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return _sb3_baseline(DummyVecEnv([reference_maker(env_id)] * num_envs), num_envs,
                         seed)


def _sb3_subproc(env_id: str, num_envs: int, seed: int) -> BaselineEnv:
    import multiprocessing

    from stable_baselines3.common.vec_env import SubprocVecEnv

    # SB3's default start method (forkserver) would import SB3 and torch again in every worker
    # (~1-3 s of CPU each: 32 workers took 90 s to build on 2 cores); preloading them in the
    # forkserver makes each worker a plain fork of it. The workers' code is unchanged.
    multiprocessing.set_forkserver_preload([SubprocVecEnv.__module__])
    return _sb3_baseline(SubprocVecEnv([reference_maker(env_id)] * num_envs), num_envs,
                         seed)


def _sb3_baseline(env: Any, num_envs: int, seed: int) -> BaselineEnv:
    """An SB3 VecEnv as a baseline: SB3 seeds through ``seed()`` before ``reset()``."""

    def reset() -> np.ndarray:
        env.seed(seed)
        return env.reset()

    return BaselineEnv(
        reset=reset, step=env.step,
        action_space=gymnasium.vector.utils.batch_space(env.action_space, num_envs),
        close=env.close,
    )


@functools.cache
def envpool_ids() -> frozenset[str]:
    """The env ids the installed EnvPool ships (importing it takes ~2-4 s, once)."""
    import envpool

    return frozenset(envpool.list_all_envs())


def envpool_id(env_id: str) -> tuple[str, dict[str, Any]]:
    """EnvPool's id for ``env_id`` and the options that make it play the same env
    (``ENVPOOL_IDS``; other ids: the same id, EnvPool's defaults)."""
    mapping = ENVPOOL_IDS.get(env_id.partition("/")[0]) if "/" in env_id else None
    return mapping(env_id) if mapping else (env_id, {})


def _envpool(env_id: str, num_envs: int, seed: int, num_threads: int = 1) -> BaselineEnv:
    """EnvPool's C++ env in sync mode: every env stepped each call, on ``num_threads``."""
    import envpool

    env_id, options = envpool_id(env_id)
    env = envpool.make_gymnasium(env_id, num_envs=num_envs, batch_size=num_envs,
                                 num_threads=num_threads, seed=seed, **options)
    return BaselineEnv(
        reset=lambda: env.reset()[0], step=env.step,
        action_space=gymnasium.vector.utils.batch_space(env.action_space, num_envs),
        close=env.close,
    )


def _puffer_env(env_id: str, buf: Any = None, seed: int = 0) -> Any:
    """One Gymnasium env as PufferLib wraps it (a module-level creator: workers pickle it)."""
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env=gymnasium.make(env_id), buf=buf,
                                                  seed=seed)


def _pufferlib(env_id: str, num_envs: int, seed: int, num_workers: int | None = None
               ) -> BaselineEnv:
    """PufferLib's multiprocessing vector env (its defaults; ``num_workers`` must divide
    ``num_envs``, default: the usable cores that do)."""
    import pufferlib.vector

    from envfleet.machine import usable_cores

    workers = num_workers or max(w for w in range(1, usable_cores() + 1) if num_envs % w == 0)
    env = pufferlib.vector.make(functools.partial(_puffer_env, env_id), num_envs=num_envs,
                                num_workers=workers, backend=pufferlib.vector.Multiprocessing,
                                overwork=True, seed=seed)  # overwork: allowed on 2 vCPUs
    return BaselineEnv(
        reset=lambda: env.reset(seed=seed)[0], step=env.step,
        action_space=gymnasium.vector.utils.batch_space(env.single_action_space, num_envs),
        close=env.close,
    )



# --- gymnax's MinAtar games on JAX's CPU backend ---------------------------------------------

#: gymnax's MinAtar games (``<Game>-MinAtar``); gymnax 1.0.1 has all five of MinAtar's
GYMNAX_MINATAR = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
#: the steps each call of ``gymnax-scan128`` runs (PureJaxRL's default rollout length)
GYMNAX_SCAN_STEPS = 128
#: how to install the gymnax peer: gymnax 1.0.1 pins gymnasium<1.4, which it does not need
GYMNAX_INSTALL = ("scripts/install_gymnax.sh: pip install 'envfleet[minatar-bench]', then "
                  "gymnax==1.0.1 with --no-deps")


def gymnax_ids() -> frozenset[str]:
    """The reference ids gymnax plays: ``MinAtar/<Game>-v1`` (the minimal action set, gymnax's
    default) and ``-v0`` (the six actions: ``use_minimal_action_set=False``)."""
    return frozenset(f"MinAtar/{game}-v{v}" for game in GYMNAX_MINATAR for v in (0, 1))


class GymnaxMinAtar:
    """gymnax's MinAtar game of ``reference_id`` on JAX's CPU backend, N envs.

    ``step(actions)``: one jitted call of ``jax.vmap(env.step)`` (gymnax's step resets an env
    whose episode ended in the same call) with the call's split of a key carried across calls,
    as gymnax's own examples step it; with ``scan``, one jitted ``jax.lax.scan`` of ``scan``
    such steps (PureJaxRL's rollout), each step's rewards, terminated flags and per-env sum of
    the observation kept (the sum makes XLA compute every observation, as a policy reading it
    would; unused, they would be dead code). Actions: the bench's fixed batch, put on the
    device once (on both sides, no action is drawn inside the clock). Outputs stay JAX arrays,
    waited for (``block_until_ready``) before the call returns.

    A speed peer, not a reference: gymnax's games have no sticky actions, end episodes at its
    ``max_steps_in_episode`` (1,000; Freeway 2,500), return float32 observations and draw
    their randomness with ``jax.random``.
    """

    def __init__(self, reference_id: str, num_envs: int, seed: int, scan: int = 0) -> None:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported (the worker's)
        import gymnax
        import jax
        import jax.numpy as jnp

        if reference_id not in gymnax_ids():
            raise ValueError(f"gymnax has no {reference_id} env (it has "
                             f"{', '.join(sorted(gymnax_ids()))})")
        game, version = reference_id.removeprefix("MinAtar/").rsplit("-v", 1)
        env, params = gymnax.make(f"{game}-MinAtar", use_minimal_action_set=version == "1")
        self.jax, self.jnp, self.num_envs, self.seed = jax, jnp, num_envs, seed
        self.action_space = gymnasium.vector.utils.batch_space(
            gymnasium.spaces.Discrete(env.num_actions), num_envs)
        vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))
        self._reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
        self._params = params

        def one(key: Any, state: Any, actions: Any) -> tuple[Any, ...]:
            key, sub = jax.random.split(key)
            obs, state, reward, terminated, truncated, _ = vstep(
                jax.random.split(sub, num_envs), state, actions, params)
            return key, state, obs, reward, terminated, truncated

        def rollout(key: Any, state: Any, actions: Any) -> tuple[Any, ...]:
            def body(carry: Any, _: Any) -> tuple[Any, Any]:
                key, state, obs, reward, terminated, _ = one(*carry, actions)
                return (key, state), (reward, terminated, obs.sum(axis=(1, 2, 3)))

            (key, state), outs = jax.lax.scan(body, (key, state), None, length=scan)
            return key, state, *outs

        self._call = jax.jit(rollout if scan else one, donate_argnums=(1,))
        self.steps_per_env = scan or 1
        self._actions: tuple[Any, Any] | None = None  # (the NumPy batch, its device copy)
        self.key: Any = None
        self.state: Any = None

    def reset(self) -> Any:
        """Every env reset from keys split off ``seed``; returns the first observations."""
        key, sub = self.jax.random.split(self.jax.random.PRNGKey(self.seed))
        obs, self.state = self._reset(self.jax.random.split(sub, self.num_envs), self._params)
        self.key = key
        return obs.block_until_ready()

    def step(self, actions: Any) -> Any:
        """One call (a step of every env, or a scan of steps): its outputs, computed."""
        if self._actions is None or self._actions[0] is not actions:
            self._actions = (actions, self.jnp.asarray(actions, dtype=self.jnp.int32))
        out = self._call(self.key, self.state, self._actions[1])
        self.key, self.state = out[0], out[1]
        return self.jax.block_until_ready(out[2:])

    def close(self) -> None:
        self.state = self._actions = None


def _gymnax(scan: int) -> Callable[[str, int, int], BaselineEnv]:
    def build(reference_id: str, num_envs: int, seed: int) -> BaselineEnv:
        env = GymnaxMinAtar(reference_id, num_envs, seed, scan)
        return BaselineEnv(reset=env.reset, step=env.step, action_space=env.action_space,
                           close=env.close, steps_per_env=env.steps_per_env)

    return build


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("gym-numpy", "Gymnasium's NumPy vector env (vector_entry_point)", False,
                 _gym_vector("vector_entry_point")),
        Baseline("gym-sync", "Gymnasium SyncVectorEnv (make_vec sync)", True, _gym_vector("sync")),
        Baseline("sb3-dummy", "Stable-Baselines3 DummyVecEnv", True, _sb3_dummy,
                 requires="stable_baselines3"),
        Baseline("gym-async", "Gymnasium AsyncVectorEnv (make_vec async)", True,
                 _gym_vector("async"), process_per_env=True),
        Baseline("sb3-subproc", "Stable-Baselines3 SubprocVecEnv", True, _sb3_subproc,
                 requires="stable_baselines3", process_per_env=True),
        Baseline("envpool", "EnvPool's C++ env (sync mode, its best thread count)", False,
                 _envpool, requires="envpool", thread_sweep=True, extra="envpool",
                 executor_default=False),
        Baseline("pufferlib", "PufferLib's Multiprocessing vector env", True, _pufferlib,
                 requires="pufferlib", extra="pufferlib", executor_default=False),
        Baseline("gymnax", "gymnax's MinAtar game on JAX's CPU backend, jit(vmap(step)) per "
                 "call", False, _gymnax(0), requires="gymnax", threads=None,
                 extra="minatar-bench", executor_default=False, env_ids=gymnax_ids,
                 install=GYMNAX_INSTALL),
        Baseline("gymnax-scan128", "gymnax's MinAtar game on JAX's CPU backend, a jitted "
                 f"lax.scan of {GYMNAX_SCAN_STEPS} steps per call", False,
                 _gymnax(GYMNAX_SCAN_STEPS), requires="gymnax", threads=None,
                 extra="minatar-bench", executor_default=False, env_ids=gymnax_ids,
                 install=GYMNAX_INSTALL, default_sweep=False),
    )
}
#: the baselines a native id's default sweep measures (each only where it can run that id)
NATIVE_DEFAULT = ("gym-numpy", "gym-sync", "sb3-dummy", "envpool")
#: env ids measured against their own peers instead of Gymnasium's envs (a game's bench
#: package adds them: ``register_peers``; benchmarks/chess for Chess-v0)
GAME_PEER_IDS: dict[str, tuple[str, ...]] = {}


def register_peers(env_id: str, peers: list[Baseline]) -> None:
    """Add ``peers``, baselines that play ``env_id`` only (``Baseline.plays``), to ``BASELINES``:
    ``env_id``'s default sweep measures them instead of Gymnasium's envs."""
    for peer in peers:
        if peer.plays != env_id:
            raise ValueError(f"peer {peer.name!r} plays {peer.plays!r}, not {env_id!r}")
        BASELINES[peer.name] = peer
    GAME_PEER_IDS[env_id] = tuple(peer.name for peer in peers)


def native_default(env_id: str) -> tuple[str, ...]:
    """The baselines a native id's default sweep measures: its game peers, else
    ``NATIVE_DEFAULT`` and the baselines that have the id among their own envs (gymnax's
    MinAtar games)."""
    if env_id in GAME_PEER_IDS:
        return GAME_PEER_IDS[env_id]
    own = tuple(b.name for b in BASELINES.values()
                if b.env_ids is not None and b.default_sweep and env_id in b.env_ids())
    return (*NATIVE_DEFAULT, *own)
#: the baselines envfleet's executors (``pool``) are compared with in the ratio columns
EXECUTOR_RIVALS = ("gym-sync", "gym-async", "sb3-subproc")
