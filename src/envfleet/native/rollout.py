"""``NativeVectorEnv.rollout``: T steps of env + policy with one wait at the end, not one per step.

On the ``cuda`` backend, and on ``torch`` off the host (a GPU), each step is enqueued on torch's
current stream (the policy's ops, the action load, the validation and step, the recording
copies) and nothing waits for the GPU until the rollout ends; a device counter
(``driver.REFUSED``...) reports the first refused step and the episodes that ended once, at the
end. From the third rollout with the same policy (or with an action batch) and length, the whole
rollout is a captured CUDA graph, replayed with one launch. A refused step moves no env on cuda;
the torch engine rewinds a refused rollout instead (its backup from the arming, then the earlier
steps again from the actions log). Other backends run the same loop with their usual per-step
checks. Every route hands the policy a copy of each step's observations when the env copies
(``copy=True``), refuses a rollout whose recording cannot fit in memory before allocating it,
and raises the closed-env error at the step whose policy closed the env.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

from envfleet.contract import ClosedEnvError
from envfleet.native.memory import (
    InsufficientMemoryError,
    _device_memory,
    available_host_memory,
    check_memory,
)

#: the rollouts one env keeps ready at most (each holds its recording buffers and graph)
MAX_GRAPHS = 4
#: recordings smaller than this are allocated without asking how much memory is available
CHECK_MIN_BYTES = 64 * 2**20


class Rollout(NamedTuple):
    """What a rollout recorded, one row per step (``None`` when ``record=False``)."""

    obs: Any  # (T, num_envs, *obs_shape): what each step's actions were chosen from
    actions: Any  # (T, num_envs, *action_shape), as the env took them (its dtype)
    rewards: Any  # (T, num_envs)
    terminated: Any  # (T, num_envs)
    truncated: Any  # (T, num_envs)
    next_obs: Any  # (num_envs, *obs_shape): the observation after the last step
    episodes: int  # episodes that ended during the rollout
    #: SAME_STEP: (T, num_envs, *obs_shape), row [t, i] env i's last observation of the episode
    #: that ended at step t (zero rows for envs that did not end, as ``info["final_obs"]``);
    #: None in the other modes, where ``obs`` already holds it
    final_obs: Any = None


class _Recording(NamedTuple):
    obs: Any
    actions: Any
    rewards: Any
    terminated: Any
    truncated: Any
    final_obs: Any  # SAME_STEP only, else None


def rollout(env: Any, policy: Callable[[Any], Any] | Any, num_steps: int | None,
            record: bool) -> Rollout:
    """Run ``env`` (a started ``NativeVectorEnv``) for ``num_steps`` steps; see
    ``NativeVectorEnv.rollout``."""
    e = env.engine
    given = not callable(policy)
    if given:
        steps = len(policy)
        if num_steps is not None and num_steps != steps:
            raise ValueError(f"num_steps={num_steps} but the action batch has {steps} steps")
        num_steps = steps
    if (isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer))
            or num_steps < 1):
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    num_steps = int(num_steps)
    if not getattr(e, "enqueues", False):
        _check_memory(env, num_steps, _step_bytes(env, record, False))
        return _checked_each_step(env, policy, given, num_steps, record)
    return _enqueued(env, policy, given, num_steps, record)


def _empty_like(array: Any, steps: int) -> Any:
    """A ``(steps, *array.shape)`` buffer of ``array``'s kind (torch tensor or NumPy), dtype
    and device."""
    if hasattr(array, "new_empty"):
        return array.new_empty((steps, *array.shape))
    return np.empty((steps, *array.shape), dtype=array.dtype)


def _recording(env: Any, steps: int, actions_like: Any) -> _Recording:
    """The rollout's buffers (SAME_STEP's ``final_obs`` zeroed: only ended envs' rows are
    written)."""
    e = env.engine
    final = None
    if env.autoreset_mode is AutoresetMode.SAME_STEP:
        final = _empty_like(e.final_obs, steps)
        final[...] = 0
    return _Recording(_empty_like(e.obs, steps), actions_like, _empty_like(e.rewards, steps),
                      _empty_like(e.terminated, steps), _empty_like(e.truncated, steps), final)


def _nbytes(array: Any) -> int:
    """Bytes of a NumPy array or torch tensor."""
    return int(array.nbytes)


def _step_bytes(env: Any, record: bool, log: bool) -> int:
    """Bytes a rollout allocates per step: the recording (``record``; SAME_STEP's
    ``final_obs`` too), else the actions ``log`` when the engine keeps one."""
    e = env.engine
    actions = (int(np.prod(env.single_action_space.shape or ())) * env.num_envs
               * np.dtype(env.action_space.dtype).itemsize)
    if not record:
        return actions if log else 0
    final = _nbytes(e.final_obs) if env.autoreset_mode is AutoresetMode.SAME_STEP else 0
    return (_nbytes(e.obs) + actions + _nbytes(e.rewards) + _nbytes(e.terminated)
            + _nbytes(e.truncated) + final)


def _check_memory(env: Any, steps: int, step_bytes: int) -> None:
    """Refuse a rollout whose buffers cannot fit where the engine allocates them
    (``InsufficientMemoryError``, worded alike on every backend), before allocating them."""
    needed = steps * step_bytes
    if needed < CHECK_MIN_BYTES:
        return
    what = f"{env!r}.rollout with num_steps={steps}"
    device = _device_memory(env.backend, {"device": getattr(env.engine, "device", None)})
    if device is None:
        check_memory(needed, available_host_memory(), what, "memory (MemAvailable)",
                     "use fewer steps")
    else:
        check_memory(needed, device[0], what, f"free memory on {device[1]}", "use fewer steps")


def _check_open(env: Any, t: int | None) -> None:
    """The closed-env error, naming the step ``t`` (when known), once the policy closed the
    env."""
    try:
        env._check_open()
    except ClosedEnvError as error:
        raise ClosedEnvError(str(error) if t is None else f"rollout step {t}: {error}") from None


def _allocated(env: Any, steps: int, build: Callable[[], Any]) -> Any:
    """``build()``'s buffers; an allocation that fails (where ``_check_memory`` could not tell:
    the memory available unknown) is ``InsufficientMemoryError`` on every backend too."""
    try:
        return build()
    except (MemoryError, RuntimeError, ValueError) as error:
        raise InsufficientMemoryError(f"{env!r}.rollout with num_steps={steps}: its buffers "
                                      f"could not be allocated ({error}): use fewer "
                                      "steps") from None


def _policy_input(env: Any) -> Any:
    """What the policy gets: a copy of the observations when the env copies (the policy may
    keep it, or edit it in place), else the engine's own buffer."""
    e = env.engine
    return e.copy(e.obs) if env.copy else e.obs


def _put(buffer: Any, t: int, value: Any) -> None:
    """``buffer[t] = value`` for a torch or NumPy buffer (torch values move to its device)."""
    if hasattr(buffer, "copy_"):
        import torch

        buffer[t].copy_(torch.as_tensor(value).reshape(buffer[t].shape))
    else:
        buffer[t] = np.asarray(value).reshape(buffer[t].shape)


def _checked_each_step(env: Any, policy: Any, given: bool, steps: int,
                       record: bool) -> Rollout:
    """Backends that check each step as it runs (``numba``, ``torch`` on the host): the same
    loop as a user's, raising at the refused step."""
    e = env.engine
    space_shape = tuple(env.single_action_space.shape)
    rec = None
    if record:
        def build() -> _Recording:
            actions = np.empty((steps, env.num_envs, *space_shape),
                               dtype=env.action_space.dtype)
            if hasattr(e.obs, "new_empty"):
                import torch

                actions = torch.from_numpy(actions).to(e.obs.device)
            return _recording(env, steps, actions)

        rec = _allocated(env, steps, build)
    episodes = 0
    for t in range(steps):
        if rec is not None:  # before the policy runs: what it does to its input is its own
            _put(rec.obs, t, e.obs)
        if given:
            a = policy[t]
        else:
            a = policy(_policy_input(env))
            _check_open(env, t)
        try:
            ended = e.step(a)
        except ValueError as error:
            raise ValueError(f"rollout step {t}: {error}") from None
        episodes += ended
        if rec is not None:
            for buffer, value in zip(rec[1:5], (a, e.rewards, e.terminated, e.truncated),
                                     strict=True):
                _put(buffer, t, value)
            if ended and rec.final_obs is not None:  # other rows stay zero
                _put(rec.final_obs, t, e.final_obs)
    return _result(env, rec, episodes, copy=False)


def _result(env: Any, rec: _Recording | None, episodes: int, copy: bool) -> Rollout:
    e = env.engine
    next_obs = e.copy(e.obs) if env.copy else e.obs
    if rec is None:
        return Rollout(None, None, None, None, None, next_obs, episodes)
    if copy:
        rec = _Recording(*(None if buffer is None else e.copy(buffer) for buffer in rec))
    return Rollout(*rec[:5], next_obs, episodes, rec.final_obs)


def _enqueued(env: Any, policy: Any, given: bool, steps: int, record: bool) -> Rollout:
    """Engines that enqueue (cuda, torch off the host): steps enqueued without a wait, as one
    piece of work per (policy or action batch, length, record) that the engine replays as a
    CUDA graph once warmed up (``graphs.Replay``); its buffers (the recording, the action batch,
    the actions log) stay put. A step that fails while being enqueued (the policy raises or
    closes the env, its actions have the wrong shape) raises after an earlier refused step's
    error, if any: the step loop would have raised that one first."""
    import torch

    e = env.engine
    cache: dict[tuple, Any] = env.__dict__.setdefault("_rollouts", {})
    # an action batch on the device; one entry per shape and dtype: each step's batch is
    # checked as the step loop checks it (a batch copied into another's would be converted)
    source = torch.as_tensor(policy, device=e.actions.device) if given else None
    key = ("rollout", ("actions", tuple(source.shape), source.dtype) if given else id(policy),
           steps, record)
    entry = cache.get(key)
    if entry is None:
        rewinds = getattr(e, "rewinds", False)
        # the recording or the log (the recording twice: copy=True hands out copies), and
        # the action batch
        kept = _step_bytes(env, record, rewinds) * (2 if record and env.copy else 1)
        _check_memory(env, steps, kept + (_step_bytes(env, False, True) if given else 0))
        if len(cache) >= MAX_GRAPHS:
            e.replay.forget(cache.pop(next(iter(cache)))["key"])
        rec = (_allocated(env, steps, lambda: _recording(env, steps,
                                                         _empty_like(e.actions, steps)))
               if record else None)
        static = source.clone() if given else None
        # the actions as the env took them, which an engine that ``rewinds`` (torch) replays
        # to undo the steps after a refused one
        log = rec.actions if rec is not None else (
            _allocated(env, steps, lambda: _empty_like(e.actions, steps)) if rewinds else None)
        # the entry holds the policy too: its id is in the key, so it must outlive the entry
        entry = cache[key] = {"key": key, "rec": rec, "actions": static, "log": log,
                              "policy": None if given else policy}

        def enqueue() -> None:
            e.arm()
            for t in range(steps):
                if rec is not None:  # before the policy runs: what it does to its input is its own
                    rec.obs[t].copy_(e.obs)
                try:
                    if given:
                        a = static[t]
                    else:
                        a = policy(_policy_input(env))
                        _check_open(env, t)
                    try:
                        e.load_actions(a)
                    except ValueError as error:
                        raise ValueError(f"rollout step {t}: {error}") from None
                except Exception:
                    if not _capturing(e):  # a failed capture is Replay's (it warns, launches)
                        entry["failed_at"] = t
                    raise
                if log is not None:
                    log[t].copy_(e.actions)
                e.enqueue_step()
                if rec is not None:
                    rec.rewards[t].copy_(e.rewards)
                    rec.terminated[t].copy_(e.terminated)
                    rec.truncated[t].copy_(e.truncated)
                    if rec.final_obs is not None:  # the ended envs' rows, zero elsewhere
                        ended = rec.terminated[t] | rec.truncated[t]
                        shape = (-1,) + (1,) * (rec.final_obs.dim() - 2)
                        rec.final_obs[t].copy_(e.final_obs).masked_fill_(~ended.view(shape), 0)

        entry["work"] = enqueue
    elif given:  # the batch goes where the captured work reads it
        entry["actions"].copy_(source)
    failure = None
    with torch.no_grad():
        try:
            e.replay.run(key, entry["work"])
        except Exception as error:
            failure = error
        failed_at = entry.pop("failed_at", None)
        _check_open(env, failed_at)  # a closed engine has nothing left to read
        if failure is not None:
            if failed_at is not None:  # steps 0..t-1 are enqueued: one of them refused?
                e.collect("rollout step {step}: ", entry["log"])
            raise failure
        episodes = e.collect("rollout step {step}: ", entry["log"])
    return _result(env, entry["rec"], episodes, copy=env.copy)


def _capturing(engine: Any) -> bool:
    """Whether the engine's work is being captured into a CUDA graph now (not run)."""
    if not engine.replay.enabled:
        return False
    import torch

    return torch.cuda.is_current_stream_capturing()
