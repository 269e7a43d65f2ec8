"""``--study workload``: the cost of a step grown k-fold, against num_envs, per backend.

Seed 000's Figures 5 and 6. The study-only env ``CartPoleWork-v0`` is CartPole-v1 whose step
first runs the cart-pole physics ``work - 1`` more times on a copy of the env's state (each
pass from the previous one's result: a chain the compiler must compute), then CartPole-v1's own
step. The chained result is only checked for NaN (it never is for a finite state), so the env's
observations, rewards and flags are exactly CartPole-v1's (``tests/bench/test_studies.py``
checks that against CartPole-v1) and the extra work cannot be removed as dead code. ``work`` is
a params field: numba compiles it in as a constant (one compile per k).

The same work runs on every backend: ``numba`` (CPU threads), ``torch`` (whole-batch tensor
ops, ``step_torch``), ``cuda`` (where a GPU is present), and the executors ``serial`` and
``pool`` stepping the Python twin ``CartPoleWorkPy-v0`` (Gymnasium's ``CartPoleEnv`` whose
``step`` runs the same Python physics ``work - 1`` more times first).

"Where runtime turns linear" (the seed's *turning point*): for each (backend, k), the smallest
num_envs ``n`` at which the linear growth from the largest num_envs measured,
``n * T(n_max) / n_max``, accounts for at least half of the time per call ``T(n)``: from there
on a call's time is mostly per-env work, not the per-call overhead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from benchmarks.studies.common import Job, StudyRun, md_table, ok, turning_point
from envfleet.bench.measure import PointSpec
from envfleet.bench.report import micros
from envfleet.envs import cartpole
from envfleet.kernels import NativeEnvSpec, kernel_function
from envfleet.registry import NATIVE_ENVS, register_native_env

NATIVE_ID = "CartPoleWork-v0"
PYTHON_ID = "CartPoleWorkPy-v0"
#: the id workers import (``module:Id``: a pool worker imports this module first)
PYTHON_IMPORT_ID = f"{__name__}:{PYTHON_ID}"
DEFAULT_WORK = (1, 10, 100, 1000)
DEFAULT_NATIVE_ENVS = (1, 100, 10_000, 1_000_000)
DEFAULT_EXECUTOR_ENVS = (1, 8, 64)
#: the largest num_envs x work a point may have, per backend (a call stays under ~1 s here)
WORK_BUDGET = {"numba": 1e7, "cuda": 1e10, "torch": 1e6, "serial": 2e4, "pool": 4e4}
DEFAULT_SECONDS = 0.2


#: CartPole-v1's params (its fields, in its order) and the work factor k: the physics runs
#: ``work`` times per step
CartPoleWorkParams = NamedTuple(
    "CartPoleWorkParams", [*cartpole.CartPoleParams.__annotations__.items(), ("work", int)])


def make_params(work: int = 1, **kwargs: Any) -> CartPoleWorkParams:
    """CartPole-v1's params (same keywords) and ``work`` >= 1."""
    if isinstance(work, bool) or not isinstance(work, int) or work < 1:
        raise ValueError(f"work must be an int >= 1, got {work!r}")
    return CartPoleWorkParams(*cartpole.make_params(**kwargs), work)


@kernel_function
def step_one(i: int, state: Any, params: Any, actions: Any, rng: Any, obs: Any,
             rewards: Any, terminated: Any) -> None:
    """``work - 1`` chained physics passes on a copy of env i's state, then CartPole's step."""
    x_, x_dot_, theta_, theta_dot_ = state
    x, x_dot, theta, theta_dot = x_[i], x_dot_[i], theta_[i], theta_dot_[i]
    force = params.force_mag if actions[i] == 1 else -params.force_mag
    for _ in range(params.work - 1):
        x, x_dot, theta, theta_dot = cartpole.dynamics(params, x, x_dot, theta, theta_dot, force)
    cartpole.step_one(i, state, params, actions, rng, obs, rewards, terminated)
    if x + x_dot + theta + theta_dot != x + x_dot + theta + theta_dot:  # NaN: never, here
        rewards[i] = x


def step_torch(state: Any, params: Any, actions: Any, rng: Any, obs: Any, rewards: Any,
               terminated: Any) -> None:
    """``step_one`` for the whole batch: ``work - 1`` chained tensor passes, then CartPole's."""
    import torch

    p = params
    x, x_dot, theta, theta_dot = (column.clone() for column in state)
    force_mag = torch.as_tensor(p.force_mag, dtype=x.dtype, device=x.device)
    force = torch.where(actions == 1, force_mag, -force_mag)
    for _ in range(p.work - 1):  # eager torch runs every op: nothing is removed
        x, x_dot, theta, theta_dot = cartpole.dynamics(p, x, x_dot, theta, theta_dot, force)
    cartpole.step_torch(state, params, actions, rng, obs, rewards, terminated)


class CartPoleWorkEnv(CartPoleEnv):
    """Gymnasium's CartPole-v1 whose ``step`` runs the physics ``work - 1`` more times first
    (``cartpole.dynamics`` in Python, on a copy of the state; the result is kept in
    ``self.sink``)."""

    def __init__(self, work: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work = make_params(work).work
        self.sink = 0.0
        #: this env's physics as CartPole-v1's params record (what ``cartpole.dynamics`` reads)
        self.params = cartpole.make_params(
            gravity=self.gravity, masscart=self.masscart, masspole=self.masspole,
            length=self.length, force_mag=self.force_mag, tau=self.tau,
            kinematics_integrator=self.kinematics_integrator)

    def step(self, action: Any) -> Any:
        x, x_dot, theta, theta_dot = (float(v) for v in self.state)
        force = self.force_mag if action == 1 else -self.force_mag
        for _ in range(self.work - 1):
            x, x_dot, theta, theta_dot = cartpole.dynamics(self.params, x, x_dot, theta,
                                                           theta_dot, force)
        self.sink = x
        return super().step(action)


SPEC = NativeEnvSpec(
    id=NATIVE_ID,
    observation_space=cartpole.SPEC.observation_space,
    action_space=cartpole.SPEC.action_space,
    state=cartpole.SPEC.state,
    make_params=make_params,
    max_episode_steps=cartpole.SPEC.max_episode_steps,
    reset_one=cartpole.reset_one,
    step_one=step_one,
    reset_torch=cartpole.reset_torch,
    step_torch=step_torch,
    reference_id="CartPole-v1",
    description="study-only: CartPole-v1 with its physics repeated `work` times per step",
)


def register() -> None:
    """Register ``CartPoleWork-v0`` (native) and ``CartPoleWorkPy-v0`` (Gymnasium), once."""
    if NATIVE_ID not in NATIVE_ENVS:
        register_native_env(SPEC)
    if PYTHON_ID not in gymnasium.registry:
        gymnasium.register(PYTHON_ID, entry_point=f"{__name__}:CartPoleWorkEnv",
                           max_episode_steps=500)


register()


# --- the study --------------------------------------------------------------------------------


def plan(backends: list[str], work: list[int], native_envs: list[int],
         executor_envs: list[int], seconds: float, repeats: int
         ) -> tuple[list[Job], list[dict[str, Any]]]:
    """One job per backend (all its k and num_envs), and the points over the work budget."""
    jobs, skipped = [], []
    for b in backends:
        items, labels = [], []
        sizes = executor_envs if b in ("serial", "pool") else native_envs
        for k in work:
            for n in sizes:
                label = {"backend": b, "work": k, "num_envs": n,
                         "label": f"{b} k={k} num_envs={n:,}"}
                if n * k > WORK_BUDGET[b]:
                    skipped.append({**label, "status": "skipped",
                                    "note": f"num_envs x k above {WORK_BUDGET[b]:.0e}"})
                    continue
                env_id, ref = (NATIVE_ID, PYTHON_IMPORT_ID)
                options: dict[str, Any] = {"work": k}
                if b == "torch":
                    options["device"] = "cpu"
                items.append(PointSpec(env_id, ref, b, n, seconds=seconds, repeats=repeats,
                                       min_calls=2, options=options, imports=(__name__,)))
                labels.append(label)
        if items:
            jobs.append(Job(items, labels))
    return jobs, skipped


def turning_points(rows: list[dict[str, Any]]) -> dict[tuple[str, int], int | None]:
    """(backend, k) -> where its runtime turns linear in num_envs (``common.turning_point``)."""
    series: dict[tuple[str, int], list] = {}
    for r in rows:
        if ok(r):
            series.setdefault((r["backend"], r["work"]), []).append(
                (r["num_envs"], r["us_per_call_median"]))
    return {key: turning_point(points) for key, points in series.items()}


def markdown(rows: list[dict[str, Any]], turning: dict, work: list[int]) -> str:
    """Time per call by (backend, k) and num_envs; growth over k=1; the turning points."""
    sizes = sorted({r["num_envs"] for r in rows})
    at = {(r["backend"], r["work"], r["num_envs"]): r for r in rows}
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    body, growth = [], []
    for b in backends:
        for k in work:
            cells, gcells = [], []
            for n in sizes:
                r, one = at.get((b, k, n)), at.get((b, 1, n))
                cells.append(micros(r["us_per_call_median"]) if ok(r) else
                             "–" if r is None or r["status"] == "skipped" else r["status"])
                gcells.append(f"{r['us_per_call_median'] / one['us_per_call_median']:.1f}"
                              if ok(r) and ok(one) else "")
            tp = turning.get((b, k))
            body.append([b, str(k), *cells, f"{tp:,}" if tp else ""])
            if k != 1:
                growth.append([b, str(k), *gcells])
    header = ["backend", "k", *(f"{n:,}" for n in sizes)]
    return "\n".join([
        "### Time per call (one step of every env) by num_envs", "",
        "`CartPoleWork-v0`: CartPole-v1's physics run k times per step (the env's results "
        "unchanged). `–`: not measured (num_envs x k above the backend's budget). Turning "
        "point: the smallest num_envs at which linear growth from the largest num_envs "
        "(n x T(n_max) / n_max) is at least half of the time per call (runtime linear in "
        "num_envs from there).", "",
        md_table([*header, "turning point"], body), "",
        "### Growth with the work: time per call at k / time per call at k = 1", "",
        "k would mean the whole call scales with the work; less: the per-call overhead "
        "still dominates.", "",
        md_table(header, growth),
    ])


def plot(rows: list[dict[str, Any]], turning: dict, title: str, path: Path) -> None:
    """One log-log panel per backend: time per call against num_envs, one line per k."""
    import matplotlib.pyplot as plt

    backends = list(dict.fromkeys(r["backend"] for r in rows if ok(r)))
    fig, axes = plt.subplots(1, max(len(backends), 1), figsize=(4.2 * max(len(backends), 1), 4.2),
                             layout="constrained", squeeze=False)
    for ax, b in zip(axes[0], backends, strict=False):
        for k in sorted({r["work"] for r in rows if r["backend"] == b}):
            rs = sorted((r for r in rows if ok(r) and r["backend"] == b and r["work"] == k),
                        key=lambda r: r["num_envs"])
            if not rs:
                continue
            (line,) = ax.plot([r["num_envs"] for r in rs],
                              [r["us_per_call_median"] * 1e-6 for r in rs], marker="o",
                              label=f"k={k}")
            tp = turning.get((b, k))
            if tp:
                r = next(r for r in rs if r["num_envs"] == tp)
                ax.plot([tp], [r["us_per_call_median"] * 1e-6], marker="*", markersize=14,
                        color=line.get_color(), linestyle="none")
        ax.set(xscale="log", yscale="log", xlabel="num_envs", title=b)
        ax.grid(alpha=0.4)
        ax.legend(fontsize=8, title="★ turning point", title_fontsize=7)
    axes[0][0].set_ylabel("seconds per call")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def default_backends() -> list[str]:
    """numba, torch (where installed), cuda (where a GPU is), serial and pool."""
    import os

    import envfleet

    available = envfleet.available_backends()
    native = [b for b in ("numba", "torch", "cuda") if b in available
              and not (b == "cuda" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1")]
    return [*native, "serial", "pool"]


def run(args: argparse.Namespace, envs: list[str]) -> int:
    """The workload study (``python -m benchmarks --study workload``)."""
    from envfleet.command import CommandError
    from envfleet.machine import usable_cores

    if envs and envs != ["CartPole-v1"]:
        raise CommandError("--study workload runs CartPole-v1's physics k times "
                           f"({NATIVE_ID}); --env can only be CartPole-v1")
    backends = args.backends or default_backends()
    unknown = [b for b in backends if b not in WORK_BUDGET]
    if unknown:
        raise CommandError(f"--study workload measures {', '.join(WORK_BUDGET)}; "
                           f"not {', '.join(unknown)}")
    work = args.work or list(DEFAULT_WORK)
    seconds = args.seconds or DEFAULT_SECONDS
    native_envs = args.num_envs or list(DEFAULT_NATIVE_ENVS)
    executor_envs = [n for n in (args.num_envs or DEFAULT_EXECUTOR_ENVS)
                     if n <= (args.baseline_max_envs or 256)]
    study = StudyRun("workload", args, {
        "env": NATIVE_ID, "python_env": PYTHON_ID, "backends": backends, "work": work,
        "native_num_envs": native_envs, "executor_num_envs": executor_envs,
        "work_budget": WORK_BUDGET, "seconds": seconds, "repeats": args.repeats})
    jobs, skipped = plan(backends, work, native_envs, executor_envs, seconds, args.repeats)
    rows = study.run(jobs, skipped)
    turning = turning_points(rows)
    title = (f"CartPole physics x k per step: {study.info['cpu']}, {usable_cores()} cores, "
             f"{study.info['date'][:10]}")
    return study.finish(markdown(rows, turning, work),
                        lambda path: plot(rows, turning, title, path),
                        {"turning_points": [{"backend": b, "work": k, "num_envs": n}
                                            for (b, k), n in turning.items()]})
