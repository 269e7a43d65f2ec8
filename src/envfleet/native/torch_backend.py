"""The ``torch`` backend: the shared driver's semantics as whole-batch tensor ops on any device.

A family's ``reset_torch`` / ``step_torch`` step every env at once; the driver below wraps them
with the time limit and autoreset of ``driver.make_driver``, so the same code runs on CPU, CUDA
or any other torch device and keeps state and outputs there. Two routes:

- On the host (CPU tensors), the bookkeeping runs on NumPy views of the buffers; the actions
  are checked before anything moves, and the envs that reset are gathered by index into a
  smaller batch, so their random draws cost nothing for the others.
- On any other device, a step is two fixed pieces of work on buffers that never move, each
  ending in one read: check the actions (loaded into the engine's action buffer) and read
  whether any was refused; then step, with masked resets over the whole batch (``where``,
  ``masked_fill_``: no index read, no dynamic shape), and read how many episodes ended. On a
  GPU each piece is captured once as a CUDA graph and replayed (``graphs.Replay``): a step is
  two graph launches and two waits, not a hundred kernel launches.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from envfleet.contract import PEND, RESET_NOW, begin_episodes, check_action_batch, on_episode_end
from envfleet.native import tensor_math
from envfleet.native.driver import (
    DISABLED,
    ENDED,
    MODE_CODES,
    NEXT_STEP,
    REFUSED_AT,
    SAME_STEP,
    STEPS,
    action_format,
    refused_step_error,
)
from envfleet.native.graphs import Replay, graphs_wanted
from envfleet.native.spec import RNG, STATE, NativeEnvSpec, split_params

_ALIGN = 64  # byte alignment of each buffer inside the arena
#: the contract's one autoreset rule (``on_episode_end``) per driver mode code
_RULES = {code: on_episode_end(mode) for mode, code in MODE_CODES.items()}


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a NumPy dtype."""
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def state_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a state column: unsigned types wider than 8 bits become the signed
    type of the same width holding the same bits (as the RNG's seeds are), because torch
    implements little arithmetic on uint16/32/64 (no shifts, no addition)."""
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "u" and np_dtype.itemsize > 1:
        np_dtype = np.dtype(f"i{np_dtype.itemsize}")
    return torch_dtype(np_dtype)


def resolve_device(device: Any) -> torch.device:
    """``device`` (a str, ``torch.device`` or None for CPU) as a device torch can allocate on."""
    if device is None:
        device = "cpu"
    if isinstance(device, bool) or not isinstance(device, str | torch.device | int):
        raise ValueError(f"device must be a torch device or its name (e.g. 'cpu', 'cuda:0'), "
                         f"got {device!r}")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"invalid torch device {device!r}: {error}") from None
    if resolved.type == "meta":
        raise ValueError("torch device 'meta' holds no data: envs cannot be stepped on it")
    try:
        probe = torch.empty(1, device=resolved)
    except (RuntimeError, AssertionError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise ValueError(f"torch device {device!r} is not usable here: {first_line}") from None
    return probe.device  # "cuda" -> "cuda:0": the index the buffers really live on


def params_to_device(params: tuple, device: torch.device) -> tuple:
    """``params`` with its NumPy-array fields (per-env values) as tensors on ``device``.

    Scalars stay Python numbers: torch folds them into each op without a tensor.
    """
    if not hasattr(params, "_replace"):
        return params
    arrays = {name: torch.as_tensor(np.array(value), device=device)  # a writable copy
              for name, value in zip(params._fields, params, strict=True)
              if isinstance(value, np.ndarray)}
    return params._replace(**arrays) if arrays else params


class TorchEngine:
    """Structure-of-arrays buffers on a torch device, stepped by whole-batch tensor ops.

    The family's torch kernels see what its numba kernels see: observations as rows
    (num_envs, obs_size) whatever the obs shape, actions as ``int64`` of shape (num_envs,) for
    Discrete and rows (num_envs, action_size) of the space's dtype for Box; ``rng`` is the
    (seeds, episodes, steps) triple of int64 tensors that ``rng.env_uniform_torch`` takes.
    State columns keep their declared dtype, except wide unsigned ones (``state_dtype``).
    On the host ``reset_torch`` gets only the envs that reset, gathered into a smaller batch
    (``mask`` all set); on other devices the whole batch, with ``mask`` set for those envs.
    """

    def __init__(self, spec: NativeEnvSpec, num_envs: int, mode: int, params: tuple,
                 max_episode_steps: int, device: Any = None) -> None:
        if mode not in (NEXT_STEP, SAME_STEP, DISABLED):
            raise ValueError(f"unknown autoreset mode code {mode!r}")
        self.device = resolve_device(device)
        self._host = self.device.type == "cpu"  # host memory: NumPy views, no syncs
        self.spec, self.num_envs, self.mode = spec, num_envs, mode
        self.rule = _RULES[mode]
        self.max_episode_steps = max_episode_steps
        split_params(spec, params, num_envs)  # checks each per-env array's shape
        self.params = params_to_device(params, self.device)
        self._per_env = tuple(name for name, value in zip(
            getattr(self.params, "_fields", ()), self.params, strict=True)
            if isinstance(value, torch.Tensor))
        self._format = fmt = action_format(spec.action_space)
        self._action_dtype = torch_dtype(fmt.dtype)
        self._check_actions = self._discrete_ok if fmt.integer else self._box_ok
        if fmt.integer:
            self._low, self._high = fmt.bounds

        n = num_envs
        # every batch buffer as the spec declares it, carved from one arena; the per-env
        # params are ``self.params``' tensors (``params_to_device``: they hold values)
        layout = [(b.name, state_dtype(b.dtype) if b.role in (STATE, RNG)
                   else torch_dtype(b.dtype), b.shape) for b in spec.buffers(n)]
        views = self._allocate(layout)
        self.state = spec.state_from(views, {})
        self.obs = views["obs"]
        self.rewards = views["rewards"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.pending = views["pending"]
        self.final_obs = views["final_obs"]
        self._obs_rows = self.obs.view(n, -1)  # kernels see obs as rows
        self._final_obs_rows = self.final_obs.view(n, -1)
        seeds = views["seeds"]
        #: (seeds, episodes, steps): int64 tensors, seeds and episodes holding uint64 bits
        self.rng = (seeds, views["episodes"], views["steps"])
        self._done = torch.zeros(n, dtype=torch.bool, device=self.device)
        self._all = torch.ones(n, dtype=torch.bool, device=self.device)
        # The host route runs on NumPy views of these tensors (``tensor_math.HOST_NUMPY``: a
        # third of torch's per-call cost); every other device on the tensors.
        self._host = self._host and tensor_math.HOST_NUMPY
        #: NEXT_STEP on the host: the envs this step resets (those that ended the last one)
        self._pending_rows: np.ndarray | None = None
        #: SAME_STEP on the host: the rows of ``final_obs`` that are not zero
        self._final_rows: np.ndarray | None = None
        # The device route: actions loaded into a buffer that never moves, and the two reads
        # of a step (whether every action is valid, how many episodes ended) copied into pinned
        # host memory at the end of each piece of work, which a GPU replays as a CUDA graph.
        self._pinned = self.device.type == "cuda"
        self.replay = Replay(self._pinned and graphs_wanted())
        #: what the family's forms get: the tensors (the host route may swap in NumPy views)
        self._args = SimpleNamespace(
            state=self.state, params=self.params, rng=self.rng, obs_rows=self._obs_rows,
            rewards=self.rewards, terminated=self.terminated, all=self._all)
        if self._host:
            self._host_buffers()
        else:
            shape = (n,) if fmt.integer else (n, int(np.prod(fmt.shape)))
            self._actions = torch.zeros(shape, dtype=self._action_dtype, device=self.device)
            #: the action buffer as a batch of the action space
            self.actions = self._actions.view(n, *fmt.shape)
            self._valid = torch.zeros(1, dtype=torch.bool, pin_memory=self._pinned)
            self._ended = torch.zeros(1, dtype=torch.int64, pin_memory=self._pinned)
            self._valid_view, self._ended_view = self._valid.numpy(), self._ended.numpy()
            self._work = {resets: functools.partial(self._step_piece, resets)
                          for resets in (False, True)}
            # a rollout's counter (``driver.REFUSED``...; REFUSED unused: the rewind finds the
            # env again), its armed value, its host copy, and the backup it rewinds from
            self._armed = torch.tensor([n, 0, -1, 0], dtype=torch.int64, device=self.device)
            self._counters = self._armed.clone()
            self._counters_host = torch.zeros(4, dtype=torch.int64, pin_memory=self._pinned)
            self._backup: torch.Tensor | None = None
        # Host-side hint, from numbers already read back: may an env be pending?
        self._maybe_pending = False
        self._broken = ""  # why the buffers cannot be trusted until a full reset
        self._closed = False

    def _host_buffers(self) -> None:
        """The host route's NumPy views of the buffers (``_b``), what the family's forms get
        and the spare buffers that host resets gather into."""
        n, State = self.num_envs, self.spec.state_type
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

    def _allocate(self, layout: list[tuple[str, torch.dtype, tuple[int, ...]]]
                  ) -> dict[str, torch.Tensor]:
        """One zeroed byte arena holding every buffer in ``layout``, and a view per buffer."""
        offsets, size = [], 0
        for _, dtype, shape in layout:
            offsets.append(size)
            nbytes = int(np.prod(shape)) * dtype.itemsize
            size += -(-nbytes // _ALIGN) * _ALIGN
        arena = self._arena = torch.zeros(max(size, _ALIGN), dtype=torch.uint8,
                                          device=self.device)
        views = {}
        for (name, dtype, shape), start in zip(layout, offsets, strict=True):
            nbytes = int(np.prod(shape)) * dtype.itemsize
            views[name] = arena[start:start + nbytes].view(dtype).view(shape)
        return views

    # --- the Engine interface ------------------------------------------------------------------

    def compile(self) -> None:
        """Nothing to compile: torch runs eagerly (present for parity with the numba engine)."""

    def reset(self, mask: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
        """Reset the masked envs (all when None), reseeding them with ``new_seeds`` (one per
        env) if given."""
        self._check_open()
        if mask is not None and bool(np.all(mask)):
            mask = None
        if mask is not None and not np.any(mask):
            return
        if new_seeds is not None:
            new_seeds = np.ascontiguousarray(new_seeds, dtype=np.uint64).view(np.int64).copy()
        if not self._host:
            masked = (self._all if mask is None
                      else torch.as_tensor(np.asarray(mask, dtype=np.bool_), device=self.device))
            if new_seeds is not None:
                new_seeds = torch.as_tensor(new_seeds, device=self.device)
            self._reset_masked(masked, new_seeds)
            self.pending.masked_fill_(masked, False)
        elif mask is None:
            self._reset_rows(None, new_seeds)
            self._b.pending[...] = False
            self._pending_rows = None
        else:
            rows = np.flatnonzero(mask)
            self._reset_rows(rows, None if new_seeds is None else new_seeds[rows])
            self._b.pending[rows] = False
            if self.rule == PEND and self._pending_rows is not None:
                self._pending_rows = self._b.pending.nonzero()[0]
                if not len(self._pending_rows):
                    self._pending_rows = None
        if mask is None:
            self._maybe_pending, self._broken = False, ""

    def step(self, actions: Any) -> int:
        """Validate then step every env; return how many episodes ended.

        A refused step (a bad action, or DISABLED and an env that needs a reset) raises
        ``ValueError`` naming the first refused env before any buffer changes. A step that
        fails part-way (an error in the family's code, an interrupt) leaves the envs
        half-stepped: the engine then refuses to step until every env is reset.
        """
        self._check_open()
        if self._broken:
            raise RuntimeError(f"{self.spec.id}: an earlier step failed part-way "
                               f"({self._broken}); reset() every env before stepping again")
        if self._host:
            a = self._host_actions(actions)
            self._refuse(a)
        else:
            self.load_actions(actions)
            self.replay.run("validate", self._validate)
            self._wait()
            if not self._valid_view[0]:
                self._raise_refused(self._actions)
        try:
            ended = self._advance(a) if self._host else self._advance_on_device()
        except BaseException as error:  # the buffers are half-stepped: no step until a reset
            self._broken = f"{type(error).__name__}: {error}"
            raise
        self._maybe_pending = ended > 0
        return ended

    def map_rows(self, row_fn: Any, dtype: Any) -> torch.Tensor:
        """Per-row kernel functions are scalar code: the torch engine runs a family's batched
        tensor forms only."""
        raise NotImplementedError(
            f"{self.spec.id}: per-row kernel functions run on the numba and cuda backends; the "
            f"torch backend runs the family's batched tensor forms only")

    def ended_mask(self) -> torch.Tensor:
        if self._host:
            return torch.from_numpy(np.logical_or(self._b.terminated, self._b.truncated))
        return self.terminated | self.truncated

    def copy(self, array: Any) -> Any:
        """A copy of one of the buffers: through NumPy on the host (one thread: torch's
        parallel copy stalls when other processes hold the cores)."""
        if self._host:
            view = self._views.get(id(array))
            return torch.from_numpy((array.numpy() if view is None else view).copy())
        return array.clone()

    def close(self) -> None:
        """Drop the scratch buffers and graphs; the outputs stay readable until the engine is
        dropped."""
        if not self._closed:
            self._closed = True
            self._pending_rows = self._final_rows = None
            self.replay.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this torch engine is closed")

    # --- the host route: NumPy bookkeeping, resets gathered by index ---------------------------

    def _advance(self, actions: np.ndarray) -> int:
        """Step every env (NEXT_STEP: reset the pending ones instead); how many ended.

        As ``driver.make_driver``'s ``begin`` + ``advance`` + ``finish``: the family steps the
        whole batch, then the envs that were pending are reset over it, with reward 0 and both
        flags off; SAME_STEP keeps the ended envs' observations and resets them: the
        contract's one rule (``on_episode_end``, ``begin_episodes``) over the whole batch.
        """
        b, k = self._b, self._args
        if not self._arrays:
            actions = torch.from_numpy(actions if actions.flags.writeable else actions.copy())
        self.spec.step_torch(k.state, k.params, actions, k.rng, k.obs_rows, k.rewards,
                             k.terminated)
        b.steps += 1
        np.greater_equal(b.steps, self.max_episode_steps, out=b.truncated)
        rule, rows = self.rule, self._pending_rows
        if rule == PEND and rows is not None:
            self._reset_rows(rows, None)
            begin_episodes(b.rewards, b.terminated, b.truncated, rows)
        done = np.logical_or(b.terminated, b.truncated, out=b.done)
        rows = done.nonzero()[0]
        ended = len(rows)
        if rule != RESET_NOW:
            b.pending[...] = done
        if rule == PEND:
            self._pending_rows = rows if ended else None
        elif rule == RESET_NOW and ended:
            self._finish(rows)
        return ended

    def _finish(self, rows: np.ndarray) -> None:
        """SAME_STEP: keep the ended envs' final observations (the other rows of ``final_obs``
        zero), then start their next episode."""
        final = self._final_items
        if self._final_rows is not None:
            final[self._final_rows] = self._zero_item
        final[rows] = self._obs_items[rows]
        self._final_rows = rows
        self._reset_rows(rows, None)

    def _reset_rows(self, rows: np.ndarray | None, new_seeds: np.ndarray | None) -> None:
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

    # --- the device route: fixed buffers, masked resets, one read per piece of work -----------

    def load_actions(self, actions: Any) -> None:
        """Check shape and dtype kind, then copy the actions into the action buffer (the
        space's dtype; a float beyond float32's range becomes inf, then is refused)."""
        a = actions.detach() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        check_action_batch(a, self.spec.action_space, self.num_envs)
        if isinstance(a, np.ndarray):
            with np.errstate(over="ignore"):
                a = torch.from_numpy(np.array(a, dtype=self._format.dtype, order="C"))
        self._actions.copy_(a.reshape(self._actions.shape))

    def _steppable(self, ok: torch.Tensor) -> torch.Tensor:
        """Per env, whether it may step: its action is ``ok`` and, under DISABLED, it does not
        wait for a reset."""
        return ok & ~self.pending if self.mode == DISABLED else ok

    def _validate(self) -> None:
        """Whether every loaded action may step, copied to the host."""
        valid = self._steppable(self._check_actions(self._actions))
        self._valid.copy_(valid.all().view(1), non_blocking=self._pinned)

    def _advance_on_device(self) -> int:
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
        """``_advance`` with whole-batch masks instead of gathered rows: no index read, no
        dynamic shape, so it can be captured. ``resets``: whether envs may reset this step (the
        pending ones of NEXT_STEP, the ended ones of SAME_STEP); without it, it is skipped."""
        k = self._args
        self.spec.step_torch(k.state, k.params, self._actions, k.rng, k.obs_rows, k.rewards,
                             k.terminated)
        steps = self.rng[2]
        steps += 1
        torch.ge(steps, self.max_episode_steps, out=self.truncated)
        if resets and self.rule == PEND:
            self._reset_masked(self.pending, None)
            begin_episodes(self.rewards, self.terminated, self.truncated, self.pending)
        done = torch.logical_or(self.terminated, self.truncated, out=self._done)
        if self.rule != RESET_NOW:
            self.pending.copy_(done)
        elif resets:  # as ``_finish``: final_obs is rewritten on a step where an env ended
            final = self._final_obs_rows
            kept = torch.where(done.any(), 0, final)
            final.copy_(torch.where(done.unsqueeze(1), self._obs_rows, kept))
            self._reset_masked(done, None)

    def _reset_masked(self, mask: torch.Tensor, new_seeds: torch.Tensor | None) -> None:
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

    # --- rollouts off the host: steps enqueued, one wait at the end ---------------------------

    #: a refused rollout is undone by replaying its earlier steps (``collect``)
    rewinds = True

    @property
    def enqueues(self) -> bool:
        """Whether ``rollout`` enqueues this engine's steps with one wait at the end."""
        return not self._host

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

    def _raise_refused(self, a: torch.Tensor) -> None:
        """Raise the error naming the first refused env of the actions ``a``."""
        valid = self._steppable(self._check_actions(a))
        index = int(torch.nonzero(~valid)[0, 0])
        raise refused_step_error(self.spec, index, a[index],
                                 self.mode == DISABLED and bool(self.pending[index]))

    def _discrete_ok(self, a: torch.Tensor) -> torch.Tensor:
        return (a >= self._low) & (a < self._high)

    def _box_ok(self, a: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(a).all(dim=1)  # the bounds are the env's: it clips

    def __repr__(self) -> str:
        return f"TorchEngine({self.spec.id}, num_envs={self.num_envs}, device={self.device})"
