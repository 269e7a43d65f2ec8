"""``NativeVectorEnv.rollout``: T steps of env + policy with one wait at the end, not one per step.

On the ``cuda`` backend, and on ``torch`` off the host (a GPU), each step is enqueued on torch's
current stream (the policy's ops, the action load, the validation and step, the recording
copies) and nothing waits for the GPU until the rollout ends; a device counter
(``driver.REFUSED``...) reports the first refused step and the episodes that ended once, at the
end. From the third rollout with the same policy (or with an action batch) and length, the whole
rollout is a captured CUDA graph, replayed with one launch. A refused step moves no env on cuda;
the torch engine rewinds a refused rollout instead (its backup from the arming, then the earlier
steps again from the actions log). Other backends run the same loop with their usual per-step
checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

#: the rollouts one env keeps ready at most (each holds its recording buffers and graph)
MAX_GRAPHS = 4


class Rollout(NamedTuple):
    """What a rollout recorded, one row per step (``None`` when ``record=False``)."""

    obs: Any  # (T, num_envs, *obs_shape): what each step's actions were chosen from
    actions: Any  # (T, num_envs, *action_shape), as the env took them (its dtype)
    rewards: Any  # (T, num_envs)
    terminated: Any  # (T, num_envs)
    truncated: Any  # (T, num_envs)
    next_obs: Any  # (num_envs, *obs_shape): the observation after the last step
    episodes: int  # episodes that ended during the rollout


class _Recording(NamedTuple):
    obs: Any
    actions: Any
    rewards: Any
    terminated: Any
    truncated: Any


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
        return _checked_each_step(env, policy, given, num_steps, record)
    return _enqueued(env, policy, given, num_steps, record)


def _empty_like(array: Any, steps: int) -> Any:
    """A ``(steps, *array.shape)`` buffer of ``array``'s kind (torch tensor or NumPy), dtype
    and device."""
    if hasattr(array, "new_empty"):
        return array.new_empty((steps, *array.shape))
    return np.empty((steps, *array.shape), dtype=array.dtype)


def _recording(env: Any, steps: int, actions_like: Any) -> _Recording:
    e = env.engine
    return _Recording(_empty_like(e.obs, steps), actions_like, _empty_like(e.rewards, steps),
                      _empty_like(e.terminated, steps), _empty_like(e.truncated, steps))


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
        actions = np.empty((steps, env.num_envs, *space_shape), dtype=env.action_space.dtype)
        if hasattr(e.obs, "new_empty"):
            import torch

            actions = torch.from_numpy(actions).to(e.obs.device)
        rec = _recording(env, steps, actions)
    episodes = 0
    for t in range(steps):
        a = policy[t] if given else policy(e.obs)
        if rec is not None:
            _put(rec.obs, t, e.obs)
        try:
            episodes += e.step(a)
        except ValueError as error:
            raise ValueError(f"rollout step {t}: {error}") from None
        if rec is not None:
            for buffer, value in zip(rec[1:], (a, e.rewards, e.terminated, e.truncated),
                                     strict=True):
                _put(buffer, t, value)
    return _result(env, rec, episodes, copy=False)


def _result(env: Any, rec: _Recording | None, episodes: int, copy: bool) -> Rollout:
    e = env.engine
    next_obs = e.copy(e.obs) if env.copy else e.obs
    if rec is None:
        return Rollout(None, None, None, None, None, next_obs, episodes)
    if copy:
        rec = _Recording(*(e.copy(buffer) for buffer in rec))
    return Rollout(*rec, next_obs, episodes)


def _enqueued(env: Any, policy: Any, given: bool, steps: int, record: bool) -> Rollout:
    """Engines that enqueue (cuda, torch off the host): steps enqueued without a wait, as one
    piece of work per (policy or action batch, length, record) that the engine replays as a
    CUDA graph once warmed up (``graphs.Replay``); its buffers (the recording, the action batch,
    the actions log) stay put."""
    import torch

    e = env.engine
    cache: dict[tuple, Any] = env.__dict__.setdefault("_rollouts", {})
    key = ("rollout", "actions" if given else id(policy), steps, record)
    entry = cache.get(key)
    if entry is None:
        if len(cache) >= MAX_GRAPHS:
            e.replay.forget(cache.pop(next(iter(cache)))["key"])
        rec = _recording(env, steps, _empty_like(e.actions, steps)) if record else None
        static = (torch.as_tensor(policy, device=e.actions.device).clone() if given else None)
        # the actions as the env took them, which an engine that ``rewinds`` (torch) replays
        # to undo the steps after a refused one
        log = rec.actions if rec is not None else (
            _empty_like(e.actions, steps) if getattr(e, "rewinds", False) else None)
        # the entry holds the policy too: its id is in the key, so it must outlive the entry
        entry = cache[key] = {"key": key, "rec": rec, "actions": static, "log": log,
                              "policy": None if given else policy}

        def enqueue() -> None:
            e.arm()
            for t in range(steps):
                a = static[t] if given else policy(e.obs)
                if rec is not None:
                    rec.obs[t].copy_(e.obs)
                e.load_actions(a)
                if log is not None:
                    log[t].copy_(e.actions)
                e.enqueue_step()
                if rec is not None:
                    rec.rewards[t].copy_(e.rewards)
                    rec.terminated[t].copy_(e.terminated)
                    rec.truncated[t].copy_(e.truncated)

        entry["work"] = enqueue
    elif given:  # the batch goes where the captured work reads it
        source = torch.as_tensor(policy, device=e.actions.device)
        if tuple(source.shape) != tuple(entry["actions"].shape):
            raise ValueError(f"actions must have shape {tuple(entry['actions'].shape)}, got "
                             f"{tuple(source.shape)}")
        entry["actions"].copy_(source)
    with torch.no_grad():
        e.replay.run(key, entry["work"])
        episodes = e.collect("rollout step {step}: ", entry["log"])
    return _result(env, entry["rec"], episodes, copy=env.copy)
