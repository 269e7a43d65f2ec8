"""``ShareRunner``: the body of a share's remote owner (a Ray actor): envs ``start .. stop - 1``
and the local engine that steps them, answering the driver's requests with plain tuples.

The local engine is an ``EnvGroup`` (``engine="serial"``: the same calls, autoreset and
trajectories as every pool worker), a local ``pool`` for Gymnasium ids and factories, or the
native kernel (``engine="numba"``: ``native.build.build_native``) for native ids. Nothing here
knows the transport: ``ray.RayVectorEnv`` runs it as an actor (``ray.RayShareRunner`` adds
the node it runs on).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.contract import PEND, RESET_NOW, WAIT, begin_episodes, on_episode_end
from envfleet.executors.base import EnvWorkerError, buffer_layout
from envfleet.executors.group import EnvFailure, EnvGroup
from envfleet.executors.pool import PoolVectorEnv
from envfleet.executors.serial import check_same_spaces
from envfleet.executors.shared_memory import assign_rows, nest, take_rows

#: the local engines a share runs on
ENGINES = ("serial", "pool", "numba")


def choose_engine(engine: str | None, native: bool, batch_size: int, num_envs: int) -> str:
    """The local engine of every share: ``engine``, else ``numba`` for native ids and
    ``serial`` for Gymnasium envs; checked against what it runs (first-ready batches step
    envs one at a time: ``serial`` only)."""
    engine = engine or ("numba" if native else "serial")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if (engine == "numba") != native:
        raise ValueError("engine 'numba' runs native ids (envfleet.make('CartPole-v1', n, "
                         "backend='ray')); Gymnasium envs run on engine 'serial' or 'pool'")
    if batch_size < num_envs and engine != "serial":
        raise ValueError(f"first-ready async (batch_size < num_envs) steps envs one at a "
                         f"time: it needs engine='serial', not {engine!r}")
    return engine


def check_per_env(engine: str, name: Any, args: tuple = (), kwargs: dict | None = None,
                  setting: bool = False) -> None:
    """Refuse ``call(name, *args, **kwargs)`` (``setting``: ``set_attr(name)``) on native
    shares, which run one kernel per runner: no per-env attributes, only ``call("render")``."""
    if engine != "numba":
        return
    if setting:
        raise NotImplementedError(
            f"set_attr({name!r}): native envs on ray have no per-env attributes")
    if name != "render" or args or kwargs:
        raise NotImplementedError(
            f"call({name!r}): native envs on ray run as one kernel per actor, without "
            f"per-env attributes; only call('render') is supported")


#: where a local engine's messages name its envs: "env 3's step()", "env 3 raised" (at the
#: start), "(envs 0..3, pid ..)" / "(env 2, pid ..)" (a pool worker), "running env 3's"
_ENV_NUMBER = re.compile(r"(^env |\(envs? |running env )(\d+)(?:\.\.(\d+))?")


def output_names(arrays: dict[str, np.ndarray]) -> list[str]:
    """The leaves an engine writes: observations, rewards, flags, final observations."""
    return [k for k in arrays if k.split(".")[0] != "act"]


def shift_env_numbers(text: str, offset: int) -> str:
    """``text`` with its env numbers ("env 3", "envs 0..3") moved by ``offset`` (a local
    engine's indices as the driver's)."""
    def shift(m: re.Match) -> str:
        stop = f"..{int(m.group(3)) + offset}" if m.group(3) else ""
        return f"{m.group(1)}{int(m.group(2)) + offset}{stop}"
    return _ENV_NUMBER.sub(shift, text)


def _functions(spec: Any) -> list[Callable[..., Any]]:
    """Every plain function a native spec reaches: its fields' and, recursively, the functions
    they name as globals or hold in closures."""
    found: dict[int, Callable[..., Any]] = {}
    todo = [v for f in dataclasses.fields(spec) if inspect.isfunction(v := getattr(spec, f.name))]
    while todo:
        fn = todo.pop()
        if id(fn) in found:
            continue
        found[id(fn)] = fn
        codes, names = [fn.__code__], []
        while codes:
            code = codes.pop()
            names += code.co_names
            codes += [c for c in code.co_consts if inspect.iscode(c)]
        cells = [c.cell_contents for c in fn.__closure__ or () if c.cell_contents is not None]
        todo += [g for g in [*map(fn.__globals__.get, names), *cells] if inspect.isfunction(g)]
    return list(found.values())


def kernel_names(spec: Any) -> set[tuple[str, str]]:
    """(module, qualified name) of each kernel function (``kernel_function``) ``spec`` reaches:
    what ``mark_kernel_functions`` marks again where the spec arrives by value."""
    from envfleet.native.jit import is_kernel_function

    return {(fn.__module__, fn.__qualname__) for fn in _functions(spec) if is_kernel_function(fn)}


def mark_kernel_functions(spec: Any, names: set[tuple[str, str]]) -> None:
    """Mark ``spec``'s functions named in ``names`` as kernel functions again: a family defined
    in ``__main__`` reaches an actor as copies of its functions (cloudpickle), which numba's
    registry does not know."""
    from envfleet.native.jit import is_kernel_function, kernel_function

    for fn in _functions(spec):
        if (fn.__module__, fn.__qualname__) in names and not is_kernel_function(fn):
            kernel_function(fn)


def process_identity(pid: int | str = "self") -> tuple[str, str, str] | None:
    """Which process ``pid`` is: (this machine's boot id, its pid namespace, its start time),
    read from /proc (None elsewhere, or when it is gone). An actor reports its own; the driver
    kills a pid only when it finds the same triple (same machine, same namespace, not reused)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        with open(f"/proc/{pid}/stat") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
    return boot, namespace, started


class ShareRunner:
    """The body of one actor: envs ``start .. stop - 1`` and the local engine that steps
    them. Every method answers ("ok", ...) or an error tuple, never raises: ``("error",
    EnvFailure.as_tuple())``, ``("env_error", message, env index, traceback)`` (a local
    engine's EnvWorkerError, indices already the driver's) or ``("raise", exception,
    traceback)``."""

    def __init__(self, engine: str, payload: Any, start: int, stop: int, mode: AutoresetMode,
                 restart_failed: bool, engine_options: dict[str, Any]) -> None:
        self.start, self.stop, self.mode, self.engine = start, stop, mode, engine
        self.group: EnvGroup | None = None
        self.vec: Any = None
        self.pending_fresh = False  # native NEXT_STEP after a restart: next step = reset obs
        self.error: tuple | None = None
        try:
            self._build(payload, restart_failed, engine_options)
        except Exception as error:
            self.error = self._failed(error)

    def _build(self, payload: Any, restart_failed: bool, options: dict[str, Any]) -> None:
        k = self.stop - self.start
        if self.engine == "numba":
            from envfleet.envs import FAMILIES, NATIVE_ENVS
            from envfleet.native.build import build_native

            env_id, env_kwargs, max_steps, spec, kernels = payload  # (spec: a user's family)
            if spec is not None:
                mark_kernel_functions(spec, kernels)
            self.vec = build_native(spec or NATIVE_ENVS[env_id], k, "numba",
                                    autoreset_mode=self.mode,
                                    copy=False, max_episode_steps=max_steps,
                                    check_compile=env_id not in FAMILIES,
                                    **options, **env_kwargs)
        elif self.engine == "pool":
            self.vec = PoolVectorEnv(payload, autoreset_mode=self.mode, copy=False,
                                     restart_failed=restart_failed, **options)
        else:
            envs = []
            try:
                for j, factory in enumerate(payload):
                    try:
                        envs.append(factory())
                    except Exception as error:
                        raise EnvFailure(self.start + j, "make", error) from error
                check_same_spaces(envs, first=self.start)
            except BaseException:
                for env in envs:
                    with contextlib.suppress(Exception):
                        env.close()
                raise
            first = envs[0]
            self.spaces = (first.observation_space, first.action_space)
            self.meta = (getattr(first, "metadata", None), getattr(first, "render_mode", None))
        if self.vec is not None:
            self.spaces = (self.vec.single_observation_space, self.vec.single_action_space)
            self.meta = (self.vec.metadata, self.vec.render_mode)
        obs_space, act_space = self.spaces
        self.arrays = buffer_layout(obs_space, act_space, k, self.mode).local()
        if self.engine == "numba":  # rewards as the native env gives them
            self.arrays["rewards"] = np.zeros(k, np.asarray(self.vec.engine.rewards).dtype)
        self.outputs = output_names(self.arrays)
        self.obs = nest(obs_space, self.arrays, "obs")
        self.final_obs = (nest(obs_space, self.arrays, "final_obs")
                          if self.mode is AutoresetMode.SAME_STEP else None)
        if self.vec is None:
            self.group = EnvGroup(envs, self.start, 0, self.mode, obs_space, act_space,
                                  self.arrays, factories=payload if restart_failed else None)

    def _failed(self, error: BaseException) -> tuple:
        if isinstance(error, EnvFailure):
            return ("error", error.as_tuple())
        tb = "".join(traceback.format_exception(error))
        if isinstance(error, EnvWorkerError):
            index = None if error.env_index is None else error.env_index + self.start
            return ("env_error", shift_env_numbers(str(error), self.start), index,
                    error.worker_traceback or tb)
        return ("raise", error, tb)

    def hello(self) -> tuple:
        """The envs' spaces, metadata and this actor's process (pid, identity) and node (or
        what failed)."""
        if self.error is not None:
            return self.error
        return ("ok", self.spaces, self.meta, self.arrays["rewards"].dtype, os.getpid(),
                self._node(), process_identity())

    def _node(self) -> str | None:
        """The node this runner runs on (the transport's name for it; None: unknown)."""
        return None

    def reset(self, mask: np.ndarray | None, seeds: list | None,
              options: dict[str, Any] | None) -> tuple:
        """Reset the masked envs; ("ok", outputs, infos, [], batched info)."""
        try:
            if self.group is not None:
                infos = self.group.reset(mask, seeds, options)
                return ("ok", self._rows(), infos, [], None)
            options = dict(options or {})
            if mask is not None:
                options["reset_mask"] = mask
            obs, info = self.vec.reset(seed=seeds, options=options or None)
            self.pending_fresh = False
            assign_rows(self.obs, obs, slice(None))
            a = self.arrays
            begin_episodes(a["rewards"], a["terminated"], a["truncated"], slice(None))
            return ("ok", self._rows(), [], [], info or None)
        except Exception as error:
            return self._failed(error)

    def start_fresh(self) -> tuple:
        """After a restart during a step: the envs start under the autoreset rule
        (``contract.on_episode_end``): NEXT_STEP resets them on the next step (("ok",)),
        SAME_STEP now (the reset's reply); a native engine resets at once either way, and
        under NEXT_STEP its next step returns those observations."""
        rule = on_episode_end(self.mode)
        if rule == WAIT:
            return ("ok",)
        if self.group is not None:
            try:
                infos = self.group.start_fresh()
            except Exception as error:
                return self._failed(error)
            return ("ok", self._rows(), infos, [], None) if rule == RESET_NOW else ("ok",)
        reply = self.reset(None, None, None)
        self.pending_fresh = rule == PEND and reply[0] == "ok"
        return reply[:1] if self.pending_fresh else reply

    def step(self, actions: dict[str, np.ndarray]) -> tuple:
        """Step every env with ``actions`` (one array per action leaf); ("ok", outputs, infos,
        final infos, batched info)."""
        try:
            for name, value in actions.items():
                assign_rows(self.arrays[name], value, slice(None))
            if self.group is not None:
                infos, finals = self.group.step()
                return ("ok", self._rows(), infos, finals, None)
            a = self.arrays
            if self.pending_fresh:  # the reset observations, as NEXT_STEP's reset step
                self.pending_fresh = False
                begin_episodes(a["rewards"], a["terminated"], a["truncated"], slice(None))
                return ("ok", self._rows(), [], [], None)
            act = nest(self.spaces[1], a, "act")
            obs, rewards, terminated, truncated, info = self.vec.step(act)
            assign_rows(self.obs, obs, slice(None))
            a["rewards"][:], a["terminated"][:], a["truncated"][:] = \
                rewards, terminated, truncated
            info = dict(info)
            if "final_obs" in info:
                final = info.pop("final_obs")
                if isinstance(final, np.ndarray) and final.dtype != object:
                    assign_rows(self.final_obs, final, slice(None))
                else:  # Dict / Tuple observations: Sync's object array, None for the others
                    for j in np.flatnonzero(info["_final_obs"]).tolist():
                        assign_rows(self.final_obs, final[j], j)
            for key in ("_final_obs", "_final_info"):
                info.pop(key, None)
            if not info.get("final_info", True):
                del info["final_info"]
            return ("ok", self._rows(), [], [], info or None)
        except Exception as error:
            return self._failed(error)

    def step_some(self, ids: np.ndarray, actions: dict[str, np.ndarray]) -> tuple:
        """Async: step envs ``ids`` (the driver's indices) one at a time; ("ok", their
        outputs, [(id, info, final info)] for those with infos)."""
        local = ids - self.start
        try:
            for name, value in actions.items():
                assign_rows(self.arrays[name], value, local)
            reports = []
            for i, j in zip(ids.tolist(), local.tolist(), strict=True):
                info, final = self.group.step_one(j)
                if info or final:
                    reports.append((i, info, final))
            return ("ok", {k: take_rows(self.arrays[k], local) for k in self.outputs}, reports)
        except Exception as error:
            return self._failed(error)

    def call(self, rows: list[int], name: str | Callable[..., Any], args: tuple,
             kwargs: dict[str, Any]) -> tuple:
        """Local envs ``rows``' attribute ``name`` (Gymnasium's ``call``)."""
        try:
            if self.group is not None:
                return ("ok", self.group.call(rows, name, args, kwargs))
            if self.engine == "pool":
                return ("ok", list(self.vec.call_at(rows, name, *args, **kwargs)))
            check_per_env(self.engine, name, args, kwargs)
            return ("ok", list(self.vec.render(env_indices=rows)))
        except Exception as error:
            return self._failed(error)

    def set_attr(self, rows: list[int], name: str, values: list[Any]) -> tuple:
        """Set local env ``rows[k]``'s attribute ``name`` to ``values[k]``."""
        try:
            if self.group is not None:
                self.group.set_attr(rows, name, values)
            elif self.engine == "pool":
                self.vec.set_attr_at(rows, name, values)
            else:
                check_per_env(self.engine, name, setting=True)
            return ("ok",)
        except Exception as error:
            return self._failed(error)

    def close(self) -> None:
        """Close the envs (errors ignored)."""
        with contextlib.suppress(Exception):
            if self.group is not None:
                self.group.close()
            elif self.vec is not None:
                self.vec.close()

    def _rows(self) -> dict[str, np.ndarray]:
        return {k: self.arrays[k] for k in self.outputs}


@dataclass(frozen=True)
class NativeEnvs:
    """``num_envs`` envs of native id ``env_id`` (each actor runs its share as one kernel)."""

    env_id: str
    num_envs: int
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
