"""What the Atari and MuJoCo engines' threads share: envs handed out one at a time
(``native.handout.next_index``) and ``ThreadChoice``'s probes, which back off while they
confirm the current thread count and come back every ``PROBE_EVERY`` steps after a switch."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from envfleet.native.handout import next_index
from envfleet.native.numba_backend import PROBE_EVERY, PROBE_MAX, ThreadChoice


@numba.njit(parallel=True, nogil=True)
def _hand_out(threads: int, num_envs: int, slow_thread: int) -> tuple:
    """Each env's taker (its thread id) and how often it was taken, with ``slow_thread``
    spending ~20x longer per env than the others."""
    taker = np.full(num_envs, -1, np.int64)
    taken = np.zeros(num_envs, np.int64)
    counter = np.zeros(1, np.int64)
    for _worker in numba.prange(threads):
        while True:
            i = next_index(counter)
            if i >= num_envs:
                break
            me = numba.np.ufunc.parallel._iget_thread_id()
            total = 0.0
            for k in range(20_000 * (1 + 19 * (me == slow_thread))):
                total += np.sqrt(k)
            taker[i] = me + (total < 0)
            taken[i] += 1
    return taker, taken


@pytest.mark.parametrize("threads, num_envs", [(1, 5), (2, 1), (2, 64), (2, 3)])
def test_every_env_is_taken_exactly_once(threads, num_envs):
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs 2 numba threads")
    numba.set_num_threads(threads)
    taker, taken = _hand_out(threads, num_envs, -1)
    assert (taken == 1).all() and (taker >= 0).all()


def test_a_slow_thread_takes_fewer_envs():
    """Static blocks would give each of 2 threads 32 of 64 envs; a thread 20x slower per env
    takes far fewer when envs are handed out one at a time (a few tries: on a loaded machine
    the other thread may not run at all during one)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads")
    numba.set_num_threads(2)
    counts = []
    for _ in range(5):
        taker, taken = _hand_out(2, 64, 0)
        assert (taken == 1).all()
        counts.append(np.count_nonzero(taker == 0))
        if counts[-1] < 16:
            break
    assert min(counts) < 16, counts


def test_thread_choice_probes_back_off_while_they_confirm_and_reset_on_a_switch():
    choice = ThreadChoice(2, adaptive=True)
    steps = []  # (threads, timed) of every step

    def run(count: int, one_thread: float, two_threads: float) -> None:
        for _ in range(count):
            threads, timed = choice.for_step()
            steps.append(threads)
            if timed:
                choice.record(threads, one_thread if threads == 1 else two_threads)

    run(PROBE_EVERY, 2.0, 1.0)  # the first probe: nothing to compare yet
    assert choice.interval == PROBE_EVERY
    run(40 * PROBE_EVERY, 2.0, 1.0)  # two threads keep winning: probes back off
    assert choice.interval == PROBE_MAX and choice.active_threads == 2
    late = steps[-PROBE_MAX:]
    assert late.count(1) <= 2  # at most one probe (two steps) in the last PROBE_MAX steps
    # one thread becomes faster: the next probe sees it, probes come back every PROBE_EVERY
    # steps, and a switch follows within a few of them
    waited = 0
    while choice.active_threads == 2 and waited < 2 * PROBE_MAX:
        run(1, 0.5, 1.0)
        waited += 1
    assert choice.active_threads == 1 and waited <= PROBE_MAX + 4 * PROBE_EVERY, waited


def test_explicit_threads_never_probe():
    choice = ThreadChoice(2, adaptive=False)
    assert {choice.for_step() for _ in range(3 * PROBE_MAX)} == {(2, False)}
