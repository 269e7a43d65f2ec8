"""Default numba threads adapt: when the threaded kernel is slower than one thread (a core held
by other work), steps move to the serial kernel, and back when it is faster again; results are
the same bit for bit. An explicit ``num_threads`` is kept as asked."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import envfleet
from envfleet.native import numba_backend
from envfleet.native.numba_backend import PROBE_EVERY

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="needs 2 numba threads")
NUM_ENVS = 1024  # above PARALLEL_MIN_ENVS: the threaded kernel is the first choice


#: what a step costs on the virtual clock when a test adds nothing: threads are faster
BASE_COST = (100e-6, 60e-6)  # serial, threaded


class VirtualClock:
    """The engine's ``time`` in these tests: a ``perf_counter`` that only kernel calls move, by
    the costs each test scripts, so the adaptive choice sees exactly those costs whatever else
    the machine runs (real threads timed against a sleep failed on a core held by other work)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch) -> VirtualClock:
    virtual = VirtualClock()
    monkeypatch.setattr(numba_backend, "time", virtual)
    return virtual


def script_costs(engine, clock: VirtualClock, extra) -> None:
    """Each kernel call of ``engine`` moves ``clock`` by its base cost plus ``extra(kernel,
    previous kernel)`` seconds (the kernel still runs, so results stay real)."""
    call, last = engine._call, [None]
    base = dict(zip(engine._kernels[:2], BASE_COST, strict=True))

    def costed(kernel, *args):
        result = call(kernel, *args)
        clock.now += base.get(kernel, 0.0) + extra(kernel, last[0])
        last[0] = kernel
        return result

    engine._call = costed


def slow_down(engine, clock: VirtualClock, which: int, seconds: float = 0.002) -> None:
    """Make ``engine``'s serial (0) or threaded (1) step kernel take ``seconds`` longer."""
    slow = engine._kernels[which]
    script_costs(engine, clock, lambda kernel, _: seconds if kernel is slow else 0.0)


def play(env, steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        obs, rewards, terminated, truncated, _ = env.step(rng.integers(0, 2, NUM_ENVS))
        out += [obs.copy(), rewards.copy(), terminated | truncated]
    return out


def test_a_slow_threaded_step_moves_to_one_thread_with_the_same_results(clock):
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    twin = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", num_threads=1, seed=0)
    engine = env.unwrapped.engine
    assert engine.adaptive and engine.active_threads == 2
    slow_down(engine, clock, 1)
    env.reset(seed=0)
    twin.reset(seed=0)
    steps = 3 * PROBE_EVERY + 1
    ours, reference = play(env, steps), play(twin, steps)
    assert engine.active_threads == 1
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a, b)


def test_threads_come_back_when_the_serial_step_is_slower(clock):
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    engine._step = engine._kernels[0]  # as if it had moved to one thread
    slow_down(engine, clock, 0)
    env.reset(seed=0)
    play(env, 3 * PROBE_EVERY + 1)
    assert engine.active_threads == 2


def test_a_probe_is_timed_once_warm(clock):
    """The first threaded step after a run of serial ones pays for waking the threads and
    moving rows between the cores' caches (measured here: 1.53 ms against 1.35 ms steady at
    65,536 CartPole envs, 480 against 332 us at 16,384): a probe timed on that step alone
    kept the engine on one thread although two were faster."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    serial = engine._kernels[0]
    engine._step = serial  # as if it had moved to one thread under load

    def warm_up_costs(kernel, previous):
        if kernel is serial:
            return 0.002  # one thread is now the slower choice...
        return 0.02 if previous is serial else 0.0  # ...but the first threaded step is slower

    script_costs(engine, clock, warm_up_costs)
    env.reset(seed=0)
    play(env, 3 * PROBE_EVERY + 1)
    assert engine.active_threads == 2


def test_an_explicit_thread_count_is_kept(clock):
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", num_threads=2, seed=0)
    engine = env.unwrapped.engine
    assert not engine.adaptive
    slow_down(engine, clock, 1)
    env.reset(seed=0)
    play(env, 2 * PROBE_EVERY + 1)
    assert engine.active_threads == 2


def test_small_batches_never_probe():
    env = envfleet.make("CartPole-v1", 8, backend="numba", seed=0)
    assert env.unwrapped.engine.active_threads == 1
    assert not env.unwrapped.engine._adapt
    assert numba_backend.PARALLEL_MIN_ENVS > 8


def count_calls(engine, which: int) -> list[int]:
    """A one-item list counting the steps of ``engine``'s serial (0) or threaded (1) kernel."""
    counted, call, count = engine._kernels[which], engine._call, [0]

    def counting(kernel, *args):
        if kernel is counted:
            count[0] += 1
        return call(kernel, *args)

    engine._call = counting
    return count


def test_the_probe_kernel_is_ready_after_the_first_step():
    """The first step loads (or compiles) both step kernels: the probe's first step, 63 steps
    later, once compiled the serial kernel inside the caller's timed steps (seconds for chess:
    a 16-core bench read 0.10M plies/s at 4,096 boards)."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    env.reset(seed=0)
    play(env, 1)
    assert engine._step is engine._kernels[1]
    assert engine._kernels[0] in engine._entry_points


def test_a_much_slower_kernel_is_probed_less_often(clock):
    """A probe's two steps on a kernel far slower than the current one (one thread against 16
    on chess: ~12x) cost their extra time every probe; probes wait until that extra is at most
    ~3% of the time stepped since the last one. Every 64 steps, the serial kernel below
    (50 ms slower) would take most of the time."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    slow_down(engine, clock, 0, 0.05)
    serial_steps = count_calls(engine, 0)
    env.reset(seed=0)
    play(env, 3 * PROBE_EVERY + 1)
    assert engine.active_threads == 2
    assert serial_steps[0] == 2  # the first probe only (the next waits ~3 s of steps)


def test_a_probe_is_due_every_probe_every_steps_when_the_other_kernel_is_close():
    """Two threads at most halve a step: on 2 cores probes stay every ``PROBE_EVERY`` steps."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    serial, threaded = engine._kernels[:2]
    engine._times[serial].extend([2.0e-3] * 3)  # twice the threaded step
    engine._times[threaded].extend([1.0e-3] * 3)
    engine._calls, engine._stepped = PROBE_EVERY - 1, (PROBE_EVERY - 2) * 1.0e-3
    assert engine._probe_due(serial)
    engine._calls = PROBE_EVERY - 2
    assert not engine._probe_due(serial)
