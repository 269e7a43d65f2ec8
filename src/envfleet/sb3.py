"""Stable-Baselines3 facade: ``to_sb3(env)`` turns a Gymnasium ``VectorEnv`` into an SB3 ``VecEnv``.

SB3 resets an env in the step its episode ends and hands the final observation over in
``infos[i]["terminal_observation"]``: Gymnasium's SAME_STEP autoreset mode. So the facade needs
the vector env in that mode (``envfleet.make(..., autoreset_mode="SameStep")``), or builds it
itself from what ``envfleet.make`` takes: ``to_sb3("CartPole-v1", 8, seed=0)``. It relies only
on Gymnasium's public vector API (plus ``call`` / ``get_attr`` / ``set_attr``, or the sub-envs
themselves in ``env.envs``, where the env has them), so it serves every envfleet backend, native
or executor, and any Gymnasium vector env.

    model = PPO("MlpPolicy", to_sb3("CartPole-v1", 8, seed=0))
"""

from __future__ import annotations

import functools
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from envfleet.contract import parse_autoreset_mode

try:
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(
        'envfleet.sb3 needs Stable-Baselines3: pip install "envfleet[sb3]"'
    ) from error

__all__ = ["SB3VecEnv", "to_sb3"]

#: Vector-info keys that carry SAME_STEP's episode-end data (not per-env step info).
_FINAL_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})
#: why a packed action mask (Chess-v0's ``packed=True``) is refused
_PACKED = ("its legal-action masks are bits (uint8, one bit per action: Chess-v0's packed=True, "
           "with the planes as uint64 bitboards), which SB3 and sb3-contrib's MaskablePPO cannot "
           "read: build it without packed=True for SB3 (to_sb3('Chess-v0', num_envs, ...)); "
           "envfleet.chess.unpack_mask / unpack_planes unpack them for a policy of your own")


def to_sb3(env: Any, num_envs: int | None = None, **make_kwargs: Any) -> SB3VecEnv:
    """An SB3 ``VecEnv`` over ``env``: a ``VectorEnv`` in SAME_STEP mode, or what
    ``envfleet.make`` builds one from (an env id, a factory or a list of factories).

    To build, ``to_sb3(env, num_envs, **make_kwargs)`` calls ``envfleet.make(env, num_envs,
    autoreset_mode="SameStep", **make_kwargs)`` (``backend``, ``seed``, ``max_episode_steps``,
    ... go in ``make_kwargs``). The returned ``VecEnv`` owns the env: its ``close()`` closes it.
    """
    if isinstance(env, VectorEnv):
        if num_envs is not None or make_kwargs:
            raise TypeError(
                "num_envs and make() keyword arguments apply only when to_sb3 builds the env "
                "(from an env id or factories); this env is already built"
            )
    elif isinstance(env, str | Sequence) or (callable(env) and not isinstance(env, VecEnv)):
        if num_envs is None:
            raise TypeError(f"to_sb3({env!r}) needs num_envs: to_sb3(env, num_envs, ...)")
        mode = parse_autoreset_mode(make_kwargs.pop("autoreset_mode", AutoresetMode.SAME_STEP))
        if mode is not AutoresetMode.SAME_STEP:
            raise ValueError(
                f"to_sb3 builds its env in SAME_STEP mode (what SB3 expects); got "
                f"autoreset_mode={mode.value!r}: leave autoreset_mode out"
            )
        from envfleet.registry import make

        built = make(env, num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **make_kwargs)
        try:
            return SB3VecEnv(built)
        except BaseException:  # refused (e.g. packed chess): nothing of it is left behind
            built.close()
            raise
    return SB3VecEnv(env)


class SB3VecEnv(VecEnv):
    """Stable-Baselines3's ``VecEnv`` API over a Gymnasium ``VectorEnv`` in SAME_STEP mode.

    ``step_wait`` returns NumPy arrays (torch tensors are copied to the host), float32 rewards,
    ``dones = terminated | truncated`` and one info dict per env: the env's step info, with
    ``terminal_observation`` where its episode ended and ``TimeLimit.truncated`` (truncated and
    not terminated). The reset info of an env that was autoreset goes to ``reset_infos[i]``.
    ``env_method("action_masks")`` serves rows of the last batched ``info["action_mask"]``.

    Masks asked for before the first ``reset()`` (sb3-contrib's ``MaskableEvalCallback`` asks
    ``has_attr("action_masks")`` of a fresh eval env) are answered as sb3-contrib's own masked
    envs answer them, which are reset when built: the envs are reset then, on demand, with the
    seeds and options set so far, and the next ``reset()`` returns that reset's observations
    without resetting again (unless a step, or new seeds or options, came in between).
    """

    def __init__(self, env: VectorEnv) -> None:
        _check_vector_env(env)
        self.vector_env = env
        self._actions: Any = None
        self._action_masks: np.ndarray | None = None  # last info["action_mask"], (n, ...)
        self._has_reset = False
        self._fresh_obs: VecEnvObs | None = None  # an on-demand reset's, for the next reset()
        self.render_mode = getattr(env, "render_mode", None)
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # -- reset and step ------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds from ``seed()`` and the options from ``set_options()``
        (both used once, as in SB3); return the observations only.

        A vector env's reset takes one options dict for the envs it resets: when envs were given
        different options, every env is reset with the first env's, then each other group of
        envs with its own (``reset_mask``) and the same seeds. After a reset on demand (masks
        asked for first) and nothing new since, that reset's observations, without a reset."""
        fresh, self._fresh_obs = self._fresh_obs, None
        if fresh is not None and all(s is None for s in self._seeds) and \
                not any(self._options):
            return fresh
        self._has_reset = True
        seed = self._batch_seed()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        for k, (options, rows) in enumerate(self._option_groups()):
            options = dict(options or {})
            if k > 0:
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[rows] = True
                options["reset_mask"] = mask
            obs, info = self.vector_env.reset(seed=seed, options=options or None)
            info = _to_numpy(info)
            for i, env_info in _unbatch(info, self.num_envs, rows=rows).items():
                self.reset_infos[i] = env_info
            self._keep_action_masks(info)
        self._reset_seeds()
        self._reset_options()
        return _to_numpy(obs, copy=True)

    def step_async(self, actions: np.ndarray) -> None:
        """Take one action per env: a batch, or (as SB3 passes Dict and Tuple actions, and as
        DummyVecEnv indexes them) a list with one action per env, batched here."""
        self._fresh_obs = None  # the envs move on: the next reset() resets
        if hasattr(actions, "shape"):
            self._actions = actions
        elif isinstance(self.action_space, spaces.Dict | spaces.Tuple) and \
                not isinstance(actions, dict | tuple):
            rows = list(actions)
            if len(rows) != self.num_envs:
                raise ValueError(f"step needs one action per env (num_envs={self.num_envs}), "
                                 f"got {len(rows)}")
            batch = create_empty_array(self.action_space, self.num_envs)
            self._actions = concatenate(self.action_space, rows, batch)
        else:
            self._actions = actions if isinstance(actions, dict | tuple) else np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("call step_async(actions) before step_wait()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, info = self.vector_env.step(actions)
        terminated = np.asarray(_to_numpy(terminated), dtype=bool)
        truncated = np.asarray(_to_numpy(truncated), dtype=bool)
        dones = terminated | truncated
        info = _to_numpy(info)
        infos = self._step_infos(info, dones, (truncated & ~terminated).tolist())
        self._keep_action_masks(info)
        rewards = np.array(_to_numpy(rewards), dtype=np.float32)  # a copy, as SB3's envs give
        return _to_numpy(obs, copy=True), rewards, dones, infos

    def _step_infos(self, info: dict[str, Any], dones: np.ndarray,
                    time_limit: list[bool]) -> list[dict[str, Any]]:
        """Per-env step infos. SAME_STEP's top-level entries of an env that ended are its reset
        info (they go to ``reset_infos``); its step info is in ``final_info``."""
        step_info = {k: v for k, v in info.items() if k not in _FINAL_KEYS}
        if step_info:
            infos = _unbatch(step_info, self.num_envs)
            for env_info, truncated in zip(infos, time_limit, strict=True):
                env_info["TimeLimit.truncated"] = truncated
        else:  # the common case, kept cheap: one small dict per env
            infos = [{"TimeLimit.truncated": truncated} for truncated in time_limit]
        ended = np.flatnonzero(dones).tolist()
        if not ended:
            return infos
        if "final_obs" not in info:
            raise RuntimeError(
                f"env {ended[0]} ended but {self.vector_env!r} gave no info['final_obs'] "
                "(SAME_STEP mode promises it)"
            )
        final_obs = _take(info["final_obs"], ended)
        final_infos = _unbatch(info.get("final_info", {}), self.num_envs, rows=ended)
        for i, terminal_observation in zip(ended, final_obs, strict=True):
            reset_info = infos[i]
            env_info = final_infos[i]
            env_info["TimeLimit.truncated"] = reset_info.pop("TimeLimit.truncated")
            env_info["terminal_observation"] = terminal_observation
            self.reset_infos[i] = reset_info
            infos[i] = env_info
        return infos

    # -- action masks ----------------------------------------------------------------------

    def _keep_action_masks(self, info: dict[str, Any]) -> None:
        """Keep ``info["action_mask"]`` (the masks of the current observations) in a fresh
        array, so that rows handed out earlier are not overwritten."""
        if "action_mask" not in info:
            return
        value = np.asarray(info["action_mask"])
        space = self.action_space
        if (isinstance(space, spaces.Discrete) and value.dtype == np.uint8 and space.n > 8
                and value.shape[1:] == (-(-int(space.n) // 8),)):
            raise ValueError(f"{self.vector_env!r}: {_PACKED}")
        present = info.get("_action_mask")
        if self._action_masks is None or present is None or np.all(present):
            self._action_masks = np.array(value)
        else:
            masks = self._action_masks.copy()
            masks[present] = value[present]
            self._action_masks = masks

    def _masks_on_demand(self) -> np.ndarray | None:
        """The current masks (None if the env gives none); before the first ``reset()``, those
        of a reset done now, whose observations the next ``reset()`` returns (see the class
        doc: sb3-contrib's masked envs are reset when built)."""
        if self._action_masks is None and not self._has_reset:
            self._fresh_obs = self.reset()
        return self._action_masks

    def _action_mask_row(self, i: int) -> np.ndarray:
        assert self._action_masks is not None
        return self._action_masks[i]

    # -- attributes and methods ------------------------------------------------------------
    # Three kinds of vector env. Sub-envs in this process (Gymnasium's SyncVectorEnv, envfleet's
    # serial executor: ``env.envs``) are served as SB3's DummyVecEnv serves its envs. Sub-envs
    # in other processes (pool, subprocess, AsyncVectorEnv) are reached through Gymnasium's
    # ``call`` / ``get_attr`` / ``set_attr``, which act on every env: what needs some envs only
    # and cannot be done that way is refused, never done on the others. Any other vector env
    # (a native batch) is one object for all its envs: its attributes are the batch's.

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of each env in ``indices``."""
        rows = self._rows(indices)
        if attr_name == "action_masks" and self._masks_on_demand() is not None:
            return [functools.partial(self._action_mask_row, i) for i in rows]
        envs = self._local_envs()
        if envs is not None:
            return [envs[i].get_wrapper_attr(attr_name) for i in rows]
        sub_envs = self._sub_envs()
        if sub_envs is not None:
            values = sub_envs.get_attr(attr_name)
            return [values[i] for i in rows]
        value = getattr(self._batch_owner(attr_name), attr_name)
        return [value for _ in rows]

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has ``attr_name`` (without calling it, as ``get_attr`` of a method
        through Gymnasium's ``get_attr`` would). ``action_masks``: also when the env gives
        ``info["action_mask"]`` (before the first reset: a reset on demand tells)."""
        if attr_name == "action_masks" and self._masks_on_demand() is not None:
            return True
        sub_envs = None if self._local_envs() is not None else self._sub_envs()
        if sub_envs is not None:
            try:
                return all(sub_envs.call("has_wrapper_attr", attr_name))
            except AttributeError:  # sub-envs that are not gymnasium.Env
                pass
        return super().has_attr(attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set the attribute of each env in ``indices`` to ``value``."""
        rows = self._rows(indices)
        envs = self._local_envs()
        if envs is not None:
            for i in rows:
                envs[i].set_wrapper_attr(attr_name, value)
            return
        sub_envs = self._sub_envs()
        if sub_envs is not None:
            if set(rows) == set(range(self.num_envs)):
                sub_envs.set_attr(attr_name, [value] * self.num_envs)
                return
            if hasattr(sub_envs, "set_attr_at"):  # envfleet's executors: those envs only
                sub_envs.set_attr_at(rows, attr_name, value)
                return
            # Gymnasium's set_attr takes every env's value: the others keep their own
            try:
                values = list(sub_envs.get_attr(attr_name))
            except AttributeError:
                raise AttributeError(
                    f"cannot set the new attribute {attr_name!r} on env(s) {rows} only: "
                    f"{self.vector_env!r} sets attributes on every env (Gymnasium's set_attr); "
                    "use indices=None, or the serial backend"
                ) from None
            for i in rows:
                values[i] = value
            sub_envs.set_attr(attr_name, values)
            return
        self._require_whole_batch(rows, f"set attribute {attr_name!r}")
        try:
            owner = self._batch_owner(attr_name)
        except AttributeError:
            owner = self.vector_env
        setattr(owner, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call a method of each env in ``indices`` (only those); ``action_masks`` comes from
        the last ``info["action_mask"]``."""
        rows = self._rows(indices)
        if method_name == "action_masks" and self._masks_on_demand() is not None:
            return [self._action_masks[i] for i in rows]
        envs = self._local_envs()
        if envs is not None:
            return [envs[i].get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                    for i in rows]
        sub_envs = self._sub_envs()
        if sub_envs is not None and hasattr(sub_envs, "call_at"):  # envfleet's executors
            return list(sub_envs.call_at(rows, method_name, *method_args, **method_kwargs))
        if sub_envs is not None:
            if set(rows) != set(range(self.num_envs)):
                raise NotImplementedError(
                    f"cannot call {method_name!r} on env(s) {rows} only: {self.vector_env!r} "
                    "calls methods on every env (Gymnasium's call takes no indices); use "
                    "indices=None, or the serial backend"
                )
            results = sub_envs.call(method_name, *method_args, **method_kwargs)
            return [results[i] for i in rows]
        method = getattr(self._batch_owner(method_name), method_name)
        self._require_whole_batch(rows, f"call {method_name!r}")
        result = method(*method_args, **method_kwargs)
        return [result for _ in rows]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        """Whether each env in ``indices`` is wrapped in ``wrapper_class`` (SB3's
        ``evaluate_policy`` asks about ``Monitor``). Envs in other processes are asked for
        their wrapper chain as Gymnasium prints it (``<Monitor<TimeLimit<...>>>``): a wrapper
        counts when its class name is ``wrapper_class``'s or a subclass's. Native envs have no
        wrappers."""
        rows = self._rows(indices)
        envs = self._local_envs()
        if envs is not None:
            return [is_wrapped(envs[i], wrapper_class) for i in rows]
        sub_envs = self._sub_envs()
        if sub_envs is None:
            return [False for _ in rows]
        if hasattr(sub_envs, "call_at"):  # envfleet's executors: SB3's own test, in the worker
            return list(sub_envs.call_at(rows, is_wrapped, wrapper_class))
        names = {c.__name__ for c in _subclasses(wrapper_class)}
        chains = sub_envs.call("__str__")
        return [bool(names & set(_WRAPPER_NAME.findall(chains[i]))) for i in rows]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's frame (``render_mode="rgb_array"``), as DummyVecEnv's ``get_images``."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is "
                "`rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        envs = self._local_envs()
        if envs is not None:
            return [env.render() for env in envs]
        sub_envs = self._sub_envs()
        if sub_envs is not None:
            return list(sub_envs.call("render"))
        return list(self.vector_env.render())

    def close(self) -> None:
        """Close the vector env (idempotent if the env's close is)."""
        self.vector_env.close()

    def __repr__(self) -> str:
        return f"SB3VecEnv({self.vector_env!r})"

    # -- helpers -----------------------------------------------------------------------------

    def _rows(self, indices: VecEnvIndices) -> list[int]:
        rows = [int(i) for i in self._get_indices(indices)]
        for i in rows:
            if not -self.num_envs <= i < self.num_envs:
                raise IndexError(f"env index {i} out of range for num_envs={self.num_envs}")
        return [i % self.num_envs for i in rows]

    def _local_envs(self) -> list[gym.Env] | None:
        """The sub-envs themselves when they live in this process (``env.envs``), else None."""
        envs = getattr(self.vector_env.unwrapped, "envs", None)
        if isinstance(envs, list | tuple) and len(envs) == self.num_envs and \
                all(isinstance(e, gym.Env) for e in envs):
            return list(envs)
        return None

    def _sub_envs(self) -> Any:
        """The outermost of env / env.unwrapped with Gymnasium's per-sub-env protocol, or None."""
        for owner in (self.vector_env, self.vector_env.unwrapped):
            if all(callable(getattr(owner, m, None)) for m in ("call", "get_attr", "set_attr")):
                return owner
        return None

    def _batch_owner(self, name: str) -> Any:
        """The outermost of env / env.unwrapped that has attribute ``name``."""
        for owner in (self.vector_env, self.vector_env.unwrapped):
            if hasattr(owner, name):
                return owner
        raise AttributeError(f"{self.vector_env!r} has no attribute {name!r}")

    def _require_whole_batch(self, rows: list[int], what: str) -> None:
        if set(rows) != set(range(self.num_envs)):
            raise ValueError(
                f"cannot {what} for env(s) {rows} only: {self.vector_env!r} is one batch "
                "object, whose attributes and methods belong to all its envs; use indices=None"
            )

    def _batch_seed(self) -> int | list[int | None] | None:
        """SB3's per-env seeds as Gymnasium's batch seed: ``s`` when they are ``s + i``."""
        seeds = self._seeds
        if all(s is None for s in seeds):
            return None
        first = seeds[0]
        if first is not None and all(s == first + i for i, s in enumerate(seeds)):
            return int(first)
        return list(seeds)

    def _option_groups(self) -> list[tuple[dict[str, Any] | None, list[int]]]:
        """SB3's per-env options as (options, env rows) groups, one per distinct options dict
        (in order of first appearance; one group when every env has the same options)."""
        groups: list[tuple[dict[str, Any] | None, list[int]]] = []
        for i, options in enumerate(self._options):
            options = options or None
            for group_options, rows in groups:
                if _same(group_options, options):
                    rows.append(i)
                    break
            else:
                groups.append((options, [i]))
        return groups


def _check_vector_env(env: Any) -> None:
    if isinstance(env, VecEnv):
        raise TypeError(f"{env!r} is already a Stable-Baselines3 VecEnv: use it as it is")
    if isinstance(env, gym.Env):
        raise TypeError(
            f"to_sb3 takes a gymnasium.vector.VectorEnv (e.g. envfleet.make(id, num_envs, "
            f"autoreset_mode='SameStep')) or an env id, not a single gymnasium.Env ({env!r}); "
            "for one env use SB3's DummyVecEnv([lambda: env])"
        )
    if not isinstance(env, VectorEnv):
        raise TypeError(
            "to_sb3 takes a gymnasium.vector.VectorEnv, an env id or env factories, got "
            f"{type(env).__name__}"
        )
    mode = parse_autoreset_mode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode is not AutoresetMode.SAME_STEP:
        raise ValueError(
            f"{env!r} is in {mode.value} autoreset mode, but SB3 needs SAME_STEP (an ended env "
            "is reset in the same step; its last observation goes to "
            "infos[i]['terminal_observation']). Build it with "
            "envfleet.make(id, num_envs, autoreset_mode='SameStep', ...), or let to_sb3 build "
            "it: to_sb3(id, num_envs, ...)"
        )
    if getattr(getattr(env.unwrapped, "chess_params", None), "packed", False):
        raise ValueError(f"{env!r}: {_PACKED}")


#: a class name in Gymnasium's printed wrapper chain, ``<Monitor<TimeLimit<CartPoleEnv<...>>>>``
_WRAPPER_NAME = re.compile(r"<([A-Za-z_]\w*)")


def _subclasses(cls: type) -> list[type]:
    """``cls`` and every subclass of it defined so far."""
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # e.g. arrays inside: no single truth value
        return False


def _to_numpy(x: Any, copy: bool = False) -> Any:
    """NumPy arrays for arrays and torch tensors (any device), through dicts and tuples."""
    if isinstance(x, np.ndarray):
        return np.array(x) if copy else x
    if isinstance(x, dict):
        return {k: _to_numpy(v, copy) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_to_numpy(v, copy) for v in x)
    torch = sys.modules.get("torch")  # a tensor implies torch is imported already
    if torch is not None and isinstance(x, torch.Tensor):
        array = x.detach().cpu().numpy()
        on_cpu = x.device.type == "cpu"  # then the array is a view of the tensor
        return np.array(array) if copy and on_cpu else array
    return x


def _take(batch: Any, rows: list[int]) -> list[Any]:
    """The entries of ``rows`` in a batched observation (array, dict or tuple), copied out of
    the batch in one go: the engine may overwrite its buffers at the next step."""
    if isinstance(batch, dict):
        columns = {k: _take(v, rows) for k, v in batch.items()}
        return [{k: c[j] for k, c in columns.items()} for j in range(len(rows))]
    if isinstance(batch, tuple):
        columns = [_take(v, rows) for v in batch]
        return [tuple(c[j] for c in columns) for j in range(len(rows))]
    return list(np.asarray(batch)[rows])  # fancy indexing copies; rows are views of the copy


def _unbatch(info: dict[str, Any], n: int, rows: Any = None) -> Any:
    """Gymnasium's batched info (arrays with ``_key`` masks, nested dicts alike) as one dict per
    env: a list of ``n`` dicts, or with ``rows`` a ``{row: dict}`` of those rows only."""
    out: dict[int, dict[str, Any]] = {i: {} for i in (range(n) if rows is None else rows)}
    for key, value in info.items():
        if key.startswith("_") and key[1:] in info:
            continue
        mask = info.get(f"_{key}")
        present = [i for i in out if mask is None or mask[i]]
        if isinstance(value, dict):
            nested = _unbatch(value, n, present)
            for i in present:
                out[i][key] = nested[i]
        elif mask is None and not (hasattr(value, "__len__") and len(value) == n):
            for i in present:  # one value for the whole batch
                out[i][key] = value
        else:
            for i in present:
                out[i][key] = value[i]
    return list(out.values()) if rows is None else out
