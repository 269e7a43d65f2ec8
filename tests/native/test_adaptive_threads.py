"""Default numba threads adapt: when the threaded kernel is slower than one thread (a core held
by other work), steps move to the serial kernel, and back when it is faster again; results are
the same bit for bit. An explicit ``num_threads`` is kept as asked."""

from __future__ import annotations

import time

import numba
import numpy as np
import pytest

import envfleet
from envfleet.native import numba_backend
from envfleet.native.numba_backend import PROBE_EVERY

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="needs 2 numba threads")
NUM_ENVS = 1024  # above PARALLEL_MIN_ENVS: the threaded kernel is the first choice


def slow_down(engine, which: int, seconds: float = 0.002) -> None:
    """Make ``engine``'s serial (0) or threaded (1) step kernel take ``seconds`` longer."""
    slow, call = engine._kernels[which], engine._call

    def delayed(kernel, *args):
        if kernel is slow:
            time.sleep(seconds)
        return call(kernel, *args)

    engine._call = delayed


def play(env, steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        obs, rewards, terminated, truncated, _ = env.step(rng.integers(0, 2, NUM_ENVS))
        out += [obs.copy(), rewards.copy(), terminated | truncated]
    return out


def test_a_slow_threaded_step_moves_to_one_thread_with_the_same_results():
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    twin = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", num_threads=1, seed=0)
    engine = env.unwrapped.engine
    assert engine.adaptive and engine.active_threads == 2
    slow_down(engine, 1)
    env.reset(seed=0)
    twin.reset(seed=0)
    steps = 3 * PROBE_EVERY + 1
    ours, reference = play(env, steps), play(twin, steps)
    assert engine.active_threads == 1
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a, b)


def test_threads_come_back_when_the_serial_step_is_slower():
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    engine._step = engine._kernels[0]  # as if it had moved to one thread
    slow_down(engine, 0, seconds=0.005)
    env.reset(seed=0)
    # a probe lost to a machine busy elsewhere (the threads' wake-up descheduled) is retried at
    # the next one: the threads must come back within a few probes, not at the first
    for _ in range(12):
        play(env, PROBE_EVERY)
        if engine.active_threads == 2:
            break
    assert engine.active_threads == 2


def test_a_probe_is_timed_once_warm():
    """The first threaded step after a run of serial ones pays for waking the threads and
    moving rows between the cores' caches (measured here: 1.53 ms against 1.35 ms steady at
    65,536 CartPole envs, 480 against 332 us at 16,384): a probe timed on that step alone
    kept the engine on one thread although two were faster."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    serial = engine._kernels[0]
    engine._step = serial  # as if it had moved to one thread under load
    call, last = engine._call, [None]

    def warm_up_costs(kernel, *args):
        if kernel is serial:
            time.sleep(0.002)  # one thread is now the slower choice...
        elif last[0] is serial:
            time.sleep(0.02)  # ...but the first threaded step after serial ones is slower still
        last[0] = kernel
        return call(kernel, *args)

    engine._call = warm_up_costs
    env.reset(seed=0)
    play(env, 3 * PROBE_EVERY + 1)
    assert engine.active_threads == 2


def test_an_explicit_thread_count_is_kept():
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", num_threads=2, seed=0)
    engine = env.unwrapped.engine
    assert not engine.adaptive
    slow_down(engine, 1)
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


def test_a_much_slower_kernel_is_probed_less_often():
    """A probe's two steps on a kernel far slower than the current one (one thread against 16
    on chess: ~12x) cost their extra time every probe; probes wait until that extra is at most
    ~3% of the time stepped since the last one. Every 64 steps, the serial kernel below
    (50 ms slower) would take most of the time."""
    env = envfleet.make("CartPole-v1", NUM_ENVS, backend="numba", seed=0)
    engine = env.unwrapped.engine
    slow_down(engine, 0, 0.05)
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
