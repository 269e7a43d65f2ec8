"""The torch engine's device route: fixed buffers, masked resets, one read per piece of work.

A step is two fixed pieces of work on buffers that never move, each ending in one read: check
the actions (loaded into the engine's action buffer) and read whether any was refused; then
step, with the batched driver's resets masked over the whole batch (``where``,
``masked_fill_``: no index read, no dynamic shape), and read how many episodes ended. On a GPU
each piece is captured once as a CUDA graph and replayed (``graphs.Replay``). Rollouts enqueue
their steps with one wait at the end, and rewind a refused one from a backup.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from envfleet.contract import PEND, RESET_NOW, check_action_batch
from envfleet.native.driver import ENDED, REFUSED_AT, STEPS, make_batch_driver
from envfleet.native.spec import NativeEnvSpec
from envfleet.native.torch_engine import TorchEngine


class DeviceTorchEngine(TorchEngine):
    """``TorchEngine`` off the host (or on it with ``tensor_math.HOST_NUMPY`` off): every op a
    tensor op, no host read inside a piece of work."""

    enqueues = True

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> None:
        super().__init__(spec, num_envs, mode, params, max_episode_steps, device)
        n, fmt = self.num_envs, self._format
        shape = (n,) if fmt.integer else (n, int(np.prod(fmt.shape)))
        self._actions = torch.zeros(shape, dtype=self._action_dtype, device=self.device)
        #: the action buffer as a batch of the action space
        self.actions = self._actions.view(n, *fmt.shape)
        # the two reads of a step (whether every action is valid, how many episodes ended),
        # copied into pinned host memory at the end of each piece of work
        self._valid = torch.zeros(1, dtype=torch.bool, pin_memory=self._pinned)
        self._ended = torch.zeros(1, dtype=torch.int64, pin_memory=self._pinned)
        self._valid_view, self._ended_view = self._valid.numpy(), self._ended.numpy()
        self._work = {resets: functools.partial(self._step_piece, resets)
                      for resets in (False, True)}
        # a rollout's counter (``driver.REFUSED``...; REFUSED unused: the rewind finds the env
        # again), its armed value, its host copy, and the backup it rewinds from
        self._armed = torch.tensor([n, 0, -1, 0], dtype=torch.int64, device=self.device)
        self._counters = self._armed.clone()
        self._counters_host = torch.zeros(4, dtype=torch.int64, pin_memory=self._pinned)
        self._backup: torch.Tensor | None = None
        #: the contract's rule over whole-batch masks, with resets in the work (the ended
        #: envs named by their mask) or without (no env can be pending, none resets now)
        self._drivers = {resets: make_batch_driver(
            self.rule, self.rewards, self.terminated, self.truncated, self._done, self.pending,
            rows_of, self._keep_final, self._reset_masked)
            for resets, rows_of in ((True, _the_mask), (False, _no_rows))}

    def _reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        masked = (self._all if mask is None
                  else torch.as_tensor(np.asarray(mask, dtype=np.bool_), device=self.device))
        seeds = None if new_seeds is None else torch.as_tensor(new_seeds, device=self.device)
        self._reset_masked(masked, seeds)
        self.pending.masked_fill_(masked, False)

    def load_actions(self, actions: Any) -> None:
        """Check shape and dtype kind, then copy the actions into the action buffer (the
        space's dtype; a float beyond float32's range becomes inf, then is refused)."""
        a = actions.detach() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        check_action_batch(a, self.spec.action_space, self.num_envs)
        if isinstance(a, np.ndarray):
            with np.errstate(over="ignore"):
                a = torch.from_numpy(np.array(a, dtype=self._format.dtype, order="C"))
        self._actions.copy_(a.reshape(self._actions.shape))

    def _checked(self, actions: Any) -> None:
        self.load_actions(actions)
        self.replay.run("validate", self._validate)
        self._wait()
        if not self._valid_view[0]:
            self._raise_refused(self._actions)

    def _validate(self) -> None:
        """Whether every loaded action may step, copied to the host."""
        valid = self._steppable(self._check_actions(self._actions))
        self._valid.copy_(valid.all().view(1), non_blocking=self._pinned)

    def _advance(self, checked: None) -> int:
        """Step every env with the loaded actions (the piece of work with masked resets when a
        reset can be due); how many episodes ended."""
        resets = self.rule == RESET_NOW or (self.rule == PEND and self._maybe_pending)
        self.replay.run(("step", resets), self._work[resets])
        self._wait()
        return int(self._ended_view[0])

    def _step_piece(self, resets: bool) -> None:
        """The second piece of work of a step: advance, then copy out how many ended."""
        self._advance_masked(resets)
        self._ended.copy_(self._done.sum().view(1), non_blocking=self._pinned)

    def _advance_masked(self, resets: bool) -> None:
        """The family's step, then the batched driver with whole-batch masks instead of
        gathered rows: no index read, no dynamic shape, so it can be captured. ``resets``:
        whether envs may reset this step (the pending ones of NEXT_STEP, the ended ones of
        SAME_STEP); without it, the resets are left out of the work."""
        k = self._args
        self.spec.step_torch(k.state, k.params, self._actions, k.rng, k.obs_rows, k.rewards,
                             k.terminated)
        steps = self.rng[2]
        steps += 1
        torch.ge(steps, self.max_episode_steps, out=self.truncated)
        driver = self._drivers[resets]
        driver.begin(self.pending if resets else None)
        driver.end()

    def _keep_final(self, done: torch.Tensor) -> None:
        """SAME_STEP: ``final_obs`` rewritten on a step where an env ended (its rows the ended
        envs' observations, the others zero), without reading ``done`` on the host."""
        final = self._final_obs_rows
        kept = torch.where(done.any(), 0, final)
        final.copy_(torch.where(done.unsqueeze(1), self._obs_rows, kept))

    def _reset_masked(self, mask: torch.Tensor, new_seeds: torch.Tensor | None = None) -> None:
        """Start a new episode in the envs where ``mask`` is set, the family resetting the
        whole batch with that mask (the other envs keep their state)."""
        seeds, episodes, steps = self.rng
        if new_seeds is None:
            episodes.add_(mask)
        else:
            seeds.copy_(torch.where(mask, new_seeds, seeds))
            episodes.masked_fill_(mask, 0)
        steps.masked_fill_(mask, 0)
        k = self._args
        self.spec.reset_torch(mask, k.state, k.params, k.rng, k.obs_rows)

    def ended_mask(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def copy(self, array: Any) -> Any:
        return array.clone()

    # --- rollouts: steps enqueued, one wait at the end -----------------------------------------

    def arm(self) -> None:
        """Start a rollout: the counter re-armed, every buffer backed up (``collect`` rewinds a
        refused rollout from this copy)."""
        if self._backup is None:
            self._backup = torch.empty_like(self._arena)
        self._counters.copy_(self._armed)
        self._backup.copy_(self._arena)

    def enqueue_step(self) -> None:
        """Validate and step every env with the action buffer, without waiting: the first
        refused step is recorded in the counter (the envs move regardless, a refused action
        replaced by a valid one so that no op sees it: ``collect`` rewinds them to that step).
        Resets are always in the work: the host does not know who is pending."""
        c, a = self._counters, self._actions
        ok = self._check_actions(a)
        first = (c[REFUSED_AT] < 0) & ~self._steppable(ok).all()
        c[REFUSED_AT] = torch.where(first, c[STEPS], c[REFUSED_AT])
        a.copy_(torch.where(ok if a.dim() == 1 else ok.unsqueeze(1), a,
                            self._low if self._format.integer else 0))
        self._advance_masked(True)
        c[ENDED] += self._done.sum()
        c[STEPS] += 1

    def collect(self, what: str = "", actions: Any = None) -> int:
        """Wait for the enqueued steps; return the count of ended episodes, or, for a refused
        step, rewind every env to it (the backup, then the earlier steps again with
        ``actions``, the rollout's ``(steps, num_envs, ...)`` log: the same ops give the same
        bits) and raise its error prefixed by ``what`` (formatted with the ``step``)."""
        self._counters_host.copy_(self._counters, non_blocking=self._pinned)
        self._wait()
        self._maybe_pending = True  # any env may have ended on the last step
        _, ended, refused_at, _ = self._counters_host.tolist()
        if refused_at < 0:
            return ended
        self._arena.copy_(self._backup)
        for a in actions[:refused_at]:
            self._actions.copy_(a.reshape(self._actions.shape))
            self._advance_masked(True)
        try:
            self._raise_refused(actions[refused_at].reshape(self._actions.shape))
        except ValueError as error:
            raise ValueError(what.format(step=refused_at) + str(error)) from None
        raise AssertionError(f"step {refused_at} was refused but its actions are valid")

    def _wait(self) -> None:
        """Wait for the work enqueued on the device (its reads are in pinned memory)."""
        if self._pinned:
            torch.cuda.current_stream(self.device).synchronize()


def _the_mask(done: torch.Tensor) -> torch.Tensor:
    """Ended envs named by the mask itself (no index read: the work can be captured)."""
    return done


def _no_rows(done: torch.Tensor) -> None:
    """No resets in this piece of work (no env can be pending, none resets now)."""
    return None
