"""The torch engine's host route: CPU tensors stepped through NumPy views of their memory.

The bookkeeping (time limit, the batched driver's autoreset) runs on NumPy views of the
buffers; the actions are checked before anything moves, and the envs that reset are gathered
by index into a smaller batch, so their random draws cost nothing for the others.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from envfleet.contract import PEND, check_action_batch
from envfleet.native.driver import DISABLED, make_batch_driver
from envfleet.native.spec import NativeEnvSpec
from envfleet.native.torch_engine import TorchEngine


class HostTorchEngine(TorchEngine):
    """``TorchEngine`` on the host: NumPy bookkeeping, resets gathered by index."""

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> None:
        super().__init__(spec, num_envs, mode, params, max_episode_steps, device)
        n, State = self.num_envs, self.spec.state_type
        #: NEXT_STEP: the envs this step resets (those that ended the last one)
        self._pending_rows: np.ndarray | None = None
        #: SAME_STEP: the rows of ``final_obs`` that are not zero
        self._final_rows: np.ndarray | None = None
        #: NumPy views of the buffers
        self._b = b = SimpleNamespace(
            state=tuple(c.numpy() for c in self.state), seeds=self.rng[0].numpy(),
            episodes=self.rng[1].numpy(), steps=self.rng[2].numpy(),
            obs_rows=self._obs_rows.numpy(), final_rows=self._final_obs_rows.numpy(),
            rewards=self.rewards.numpy(), terminated=self.terminated.numpy(),
            truncated=self.truncated.numpy(), pending=self.pending.numpy(),
            done=self._done.numpy(),
            per_env={name: getattr(self.params, name).numpy() for name in self._per_env})
        # NumPy views of the buffers for the family's forms when they take them
        # (``tensor_math.takes_arrays``: no conversion per call), else the tensors.
        self._arrays = all(getattr(form, "takes_arrays", False)
                           for form in (self.spec.reset_torch, self.spec.step_torch))
        if self._arrays:
            params = self.params
            if self._per_env:
                params = params._replace(**b.per_env)
            self._args = SimpleNamespace(
                state=State(*b.state), params=params, rng=(b.seeds, b.episodes, b.steps),
                obs_rows=b.obs_rows, rewards=b.rewards, terminated=b.terminated,
                all=np.ones(n, dtype=np.bool_))
        self._tensor = (lambda t: t) if self._arrays else torch.from_numpy
        #: NumPy views of the outputs, for ``copy``
        self._views = {id(t): t.numpy() for t in (
            self.obs, self.final_obs, self.rewards, self.terminated, self.truncated,
            *self.state)}
        # Host resets gather rows into spare buffers (``_gather``), and move observation rows
        # as single items (``_rows_of``): ~4x quicker than fresh arrays and per-element copies.
        self._spare = {id(a): np.empty_like(a) for a in (
            b.seeds, b.episodes, b.obs_rows, *b.state, *b.per_env.values())}
        self._zeros = np.zeros(n, dtype=np.int64)
        self._obs_items = self._rows_of(b.obs_rows)
        self._final_items = self._rows_of(b.final_rows)
        self._zero_item = self._rows_of(np.zeros_like(b.obs_rows[:1]))[0]
        #: the contract's rule over the NumPy views, the envs that reset as indices
        self._begin, self._end = make_batch_driver(
            self.rule, b.rewards, b.terminated, b.truncated, b.done, b.pending, _nonzero_rows,
            self._keep_final, self._reset_rows)

    def _reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        if mask is None:
            self._reset_rows(None, new_seeds)
            self._b.pending[...] = False
            self._pending_rows = None
            return
        rows = np.flatnonzero(mask)
        self._reset_rows(rows, None if new_seeds is None else new_seeds[rows])
        self._b.pending[rows] = False
        if self.rule == PEND and self._pending_rows is not None:
            self._pending_rows = self._b.pending.nonzero()[0]
            if not len(self._pending_rows):
                self._pending_rows = None

    def _checked(self, actions: Any) -> np.ndarray:
        a = self._host_actions(actions)
        self._refuse(a)
        return a

    def _advance(self, actions: np.ndarray) -> int:
        """Step every env (NEXT_STEP: reset the pending ones instead); how many ended.

        The family steps the whole batch, then the batched driver runs the contract's rule
        over it (``driver.make_batch_driver``) on NumPy views, the envs that reset gathered
        by index (``_reset_rows``).
        """
        b, k = self._b, self._args
        if not self._arrays:
            actions = torch.from_numpy(actions if actions.flags.writeable else actions.copy())
        self.spec.step_torch(k.state, k.params, actions, k.rng, k.obs_rows, k.rewards,
                             k.terminated)
        b.steps += 1
        np.greater_equal(b.steps, self.max_episode_steps, out=b.truncated)
        self._begin(self._pending_rows)
        rows = self._end()
        if self.rule == PEND:
            self._pending_rows = rows
        return 0 if rows is None else len(rows)

    def _keep_final(self, rows: np.ndarray) -> None:
        """SAME_STEP: keep the ended envs' final observations (the other rows of ``final_obs``
        zero)."""
        final = self._final_items
        if self._final_rows is not None:
            final[self._final_rows] = self._zero_item
        final[rows] = self._obs_items[rows]
        self._final_rows = rows

    def _reset_rows(self, rows: np.ndarray | None, new_seeds: np.ndarray | None = None) -> None:
        """Start a new episode in the envs ``rows`` (all when None): their episode counter
        advances (or restarts at 0 with ``new_seeds``, one per row), their step counter restarts,
        and the family resets them, seeing only those rows (gathered into a smaller batch)."""
        b = self._b
        if rows is None:
            if new_seeds is None:
                b.episodes += 1
            else:
                b.seeds[...] = new_seeds
                b.episodes[...] = 0
            b.steps[...] = 0
            k = self._args
            self.spec.reset_torch(k.all, k.state, k.params, k.rng, k.obs_rows)
            return
        k = len(rows)
        gather = self._gather
        if new_seeds is None:
            row_seeds = gather(b.seeds, rows)
            row_episodes = gather(b.episodes, rows)
            row_episodes += 1
        else:
            row_seeds, row_episodes = new_seeds, np.zeros_like(new_seeds)
        tensor = self._tensor
        state = tuple(gather(column, rows) for column in b.state)
        obs = self._spare[id(b.obs_rows)][:k]
        params = self._args.params
        if self._per_env:
            params = params._replace(**{name: tensor(gather(column, rows))
                                        for name, column in b.per_env.items()})
        zeros = self._zeros[:k]
        zeros.fill(0)
        row_rng = (tensor(row_seeds), tensor(row_episodes), tensor(zeros))
        self.spec.reset_torch(self._args.all[:k], type(self.state)(*map(tensor, state)),
                              params, row_rng, tensor(obs))
        for column, values in zip(b.state, state, strict=True):
            column[rows] = values
        self._obs_items[rows] = self._rows_of(obs)
        if new_seeds is not None:
            b.seeds[rows] = row_seeds
        b.episodes[rows] = row_episodes
        b.steps[rows] = 0

    def _gather(self, array: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``array[rows]`` into the spare buffer kept for ``array`` (valid until the next
        gather of it)."""
        return np.take(array, rows, axis=0, out=self._spare[id(array)][:len(rows)], mode="clip")

    def _rows_of(self, rows: Any) -> Any:
        """Rows of a host array (a C-contiguous one) as one item each, or the tensor itself."""
        if not isinstance(rows, np.ndarray) or rows.ndim < 2:
            return rows
        item = np.dtype((np.void, rows.itemsize * int(np.prod(rows.shape[1:]))))
        return rows.reshape(len(rows), -1).view(item).reshape(len(rows))

    def _host_actions(self, actions: Any) -> np.ndarray:
        """Check shape and dtype kind (as ``numba_backend.as_numpy_actions``); the actions as a
        C-contiguous NumPy array (the caller's, when it is one: only read)."""
        n = self.num_envs
        a = actions.detach() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        check_action_batch(a, self.spec.action_space, n)
        if isinstance(a, torch.Tensor):
            a = a.cpu().numpy()
        fmt = self._format
        if fmt.integer:
            return np.ascontiguousarray(a, dtype=fmt.dtype)
        with np.errstate(over="ignore"):  # beyond float32's range: inf, then refused
            return np.ascontiguousarray(a, dtype=fmt.dtype).reshape(n, -1)

    def _refuse(self, values: np.ndarray) -> None:
        """Raise the error for the first refused env (a bad action, or DISABLED and an env that
        needs a reset), before anything moves."""
        if not self._format.integer:
            ok = bool(np.isfinite(values).all())
        elif values.size <= 8:  # a few: Python is quicker than two reductions
            ok = all(self._low <= v < self._high for v in values.tolist())
        elif self._low == 0:  # one reduction: a negative action reads as a huge uint64
            ok = values.view(np.uint64).max() < self._high
        else:
            ok = values.min() >= self._low and values.max() < self._high
        if ok and not (self.mode == DISABLED and self._maybe_pending
                       and self._b.pending.any()):
            return
        self._raise_refused(torch.from_numpy(np.array(values)))

    def ended_mask(self) -> torch.Tensor:
        return torch.from_numpy(np.logical_or(self._b.terminated, self._b.truncated))

    def copy(self, array: Any) -> Any:
        """A copy of one of the buffers, through NumPy (one thread: torch's parallel copy
        stalls when other processes hold the cores)."""
        view = self._views.get(id(array))
        return torch.from_numpy((array.numpy() if view is None else view).copy())

    def close(self) -> None:
        super().close()
        self._pending_rows = self._final_rows = None


def _nonzero_rows(done: np.ndarray) -> np.ndarray | None:
    """The indices of the envs that ended (None: none), as the host route's resets take them."""
    rows = done.nonzero()[0]
    return rows if len(rows) else None
