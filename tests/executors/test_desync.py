"""An executor never hands out stale data: after an interrupted call (Ctrl-C) it refuses to go
on until ``reset()``, which waits for what the workers were still doing; a worker that stops
answering is the one blamed (and restarted); a restart racing a finishing worker loses nothing."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import envfleet
from envfleet.executors import EnvWorkerError
from envfleet.executors.fleet import ShareFleet
from tests.executors.envs import CountingEnv, SlowEnv
from tests.executors.helpers import (
    BACKENDS,
    PROCESS_BACKENDS,
    assert_nothing_left,
    our_names,
    pid_gone,
    worker_pids,
)

N = 4
ZEROS = np.zeros(N, dtype=np.int64)


class SlowResetEnv(CountingEnv):
    """A CountingEnv whose resets take 0.3 s and that has a slow method."""

    def reset(self, *, seed=None, options=None):
        time.sleep(0.3)
        return super().reset(seed=seed, options=options)

    def slow_index(self) -> int:
        time.sleep(0.3)
        return self.index


@contextlib.contextmanager
def interrupt_after(seconds: float):
    """Raise KeyboardInterrupt in the main thread after ``seconds`` (as Ctrl-C would)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def slow(backend: str, delay: float = 0.3, **options):
    factories = [functools.partial(SlowEnv, i, 1000, delay) for i in range(N)]
    if backend == "pool":
        options.setdefault("num_workers", 2)
    return envfleet.make(factories, N, backend=backend, **options)


def assert_steps_from(env, t: int) -> None:
    """The next step returns every env's count ``t`` (its own fresh results)."""
    obs, rewards, *_ = env.step(ZEROS)
    assert obs[:, 3].tolist() == [t] * N
    assert rewards.tolist() == [10.0 * t] * N


@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupted_step_is_refused_until_reset(backend) -> None:
    env = slow(backend)
    env.reset(seed=0)
    assert_steps_from(env, 1)
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.1):
        env.step(ZEROS)
    with pytest.raises(RuntimeError, match=r"interrupted by KeyboardInterrupt.*call reset\(\)"):
        env.step(ZEROS)
    with pytest.raises(RuntimeError, match="reset every env"):
        env.reset(options={"reset_mask": np.array([True, False, False, False])})
    obs, _ = env.reset(seed=0)
    assert obs[:, 3].tolist() == [0] * N and obs[:, 1].tolist() == list(range(N))
    assert_steps_from(env, 1)
    assert_steps_from(env, 2)
    env.close()


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_interrupted_reset_is_waited_for(backend) -> None:
    factories = [functools.partial(SlowResetEnv, i, 1000) for i in range(N)]
    env = envfleet.make(factories, N, backend=backend,
                        **({"num_workers": 2} if backend == "pool" else {}))
    env.reset(seed=0)
    assert_steps_from(env, 1)
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.1):
        env.reset(seed=5)
    with pytest.raises(RuntimeError, match="interrupted"):
        env.step(ZEROS)
    obs, info = env.reset(seed=7)
    assert obs[:, 1].tolist() == [7, 8, 9, 10] and obs[:, 3].tolist() == [0] * N
    assert info["index"].tolist() == list(range(N))
    assert_steps_from(env, 1)
    env.close()


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_interrupted_call_is_refused_until_reset(backend) -> None:
    factories = [functools.partial(SlowResetEnv, i, 1000) for i in range(N)]
    env = envfleet.make(factories, N, backend=backend,
                        **({"num_workers": 2} if backend == "pool" else {}))
    env.reset(seed=0)
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.1):
        env.call("slow_index")
    with pytest.raises(RuntimeError, match="interrupted"):
        env.call("slow_index")
    with pytest.raises(RuntimeError, match="interrupted"):
        env.get_attr("index")
    env.reset(seed=0)
    assert env.get_attr("index") == (0, 1, 2, 3)
    assert_steps_from(env, 1)
    env.close()


def test_interrupted_recv_is_refused_until_reset() -> None:
    env = envfleet.make([functools.partial(SlowEnv, i, 1000, 0.3) for i in range(N)], N,
                        backend="pool", batch_size=2, num_workers=N)
    env.reset(seed=0)
    env.recv()
    env.recv()
    env.send(ZEROS, np.arange(N))
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.1):
        env.recv()
    for call in (env.recv, lambda: env.send(ZEROS[:2], [0, 1])):
        with pytest.raises(RuntimeError, match="interrupted"):
            call()
    obs, _ = env.reset(seed=0)
    assert obs[:, 3].tolist() == [0] * N
    seen = {}
    for _ in range(2):
        obs, *_, info = env.recv()
        seen.update(zip(info["env_id"].tolist(), obs[:, 3].tolist(), strict=True))
    assert seen == dict.fromkeys(range(N), 0)  # the reset observations, not late step results
    env.send(ZEROS, np.arange(N))
    for _ in range(2):
        obs, rewards, *_ = env.recv()
        assert obs[:, 3].tolist() == [1, 1] and rewards.tolist() == [10.0, 10.0]
    env.close()


# --- a worker that stops answering while idle ----------------------------------------------


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_stopped_while_idle_is_the_one_blamed(backend) -> None:
    env = envfleet.make(CountingEnv, N, backend=backend, step_timeout=1.0,
                        **({"num_workers": 2} if backend == "pool" else {}))
    pids, shm = worker_pids(env), our_names(env)
    env.reset(seed=0)
    os.kill(pids[-1], signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"did not answer within step_timeout=1 s") \
            as caught:
        env.step(ZEROS)
    assert time.monotonic() - t0 < 1.8  # the timeout, then the stopped worker is killed at once
    text = str(caught.value)
    assert f"pid {pids[-1]}" in text and f"worker {len(pids) - 1} " in text
    # the stopped worker's envs, all of them (pool: 2..3, subprocess: 3); env_index the first
    first = N - 2 if backend == "pool" else N - 1
    assert caught.value.env_indices == tuple(range(first, N))
    assert caught.value.env_index == first
    assert_nothing_left(pids, shm)
    env.close()


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_stopped_while_idle_is_the_one_restarted(backend) -> None:
    env = envfleet.make(functools.partial(CountingEnv, length=1000), N, backend=backend,
                        step_timeout=1.0, restart_failed=True,
                        **({"num_workers": 2} if backend == "pool" else {}))
    pids = worker_pids(env)
    env.reset(seed=0)
    os.kill(pids[-1], signal.SIGSTOP)
    lost = [N - 1] if backend == "subprocess" else [2, 3]
    kept = [i for i in range(N) if i not in lost]
    result: list = []
    stepper = threading.Thread(target=lambda: result.append(env.step(ZEROS)), daemon=True)
    t0 = time.monotonic()
    stepper.start()
    stepper.join(10.0)
    try:
        assert result, "step() did not return"
        assert time.monotonic() - t0 < 2.5
        obs, _, terminated, truncated, info = result[0]
        assert truncated.tolist() == [i in lost for i in range(N)] and not terminated.any()
        assert info["_env_failure"].tolist() == [i in lost for i in range(N)]
        assert "did not answer" in str(info["env_failure"][lost[0]])
        assert worker_pids(env)[:len(kept) if backend == "subprocess" else 1] == \
            pids[:len(kept) if backend == "subprocess" else 1]  # the healthy ones were kept
        assert pid_gone(pids[-1])
        obs, *_ = env.step(ZEROS)
        assert obs[kept, 3].tolist() == [2] * len(kept) and obs[lost, 3].tolist() == [0] * len(lost)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[-1], signal.SIGKILL)
        env.close()


def test_restart_racing_a_finishing_worker_loses_nothing(monkeypatch) -> None:
    """A dead worker found while sending, restarted slowly while the other finishes: the batch
    still completes at once, and the healthy worker's real terminations are kept."""
    original = ShareFleet._restart

    def slow_restart(self, *args, **kwargs):
        time.sleep(0.05)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ShareFleet, "_restart", slow_restart)
    env = envfleet.make(functools.partial(CountingEnv, length=3), N, backend="pool",
                        num_workers=2, restart_failed=True, step_timeout=5.0)
    pids = worker_pids(env)
    env.reset(seed=0)
    env.step(ZEROS)
    env.step(ZEROS)  # (the third step has no infos: nothing but the done byte wakes the parent)
    os.kill(pids[1], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not pid_gone(pids[1]) and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    _, _, terminated, truncated, info = env.step(ZEROS)
    assert time.monotonic() - t0 < 2.5
    assert terminated.tolist() == [True, True, False, False]  # envs 0, 1 really ended
    assert truncated.tolist() == [False, False, True, True]
    assert info["_env_failure"].tolist() == [False, False, True, True]
    assert worker_pids(env)[0] == pids[0]
    env.close()


# --- start-up mistakes ---------------------------------------------------------------------


class LockEnv(CountingEnv):
    def __init__(self, lock) -> None:
        super().__init__()
        self.lock = lock


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_unpicklable_factory_is_named(backend) -> None:
    factories = [CountingEnv, CountingEnv, functools.partial(LockEnv, threading.Lock())]
    with pytest.raises(TypeError, match=r"env 2's factory .*LockEnv.* cannot be sent to a worker "
                                        r"process.*must be picklable"):
        envfleet.make(factories, 3, backend=backend)


UNGUARDED = """
import numpy as np
import envfleet

env = envfleet.make("CartPole-v1", 2, backend="{backend}")
env.reset(seed=0)
env.close()
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_script_without_main_guard_gets_one_clear_error(tmp_path, backend) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(UNGUARDED.format(backend=backend)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr
    assert done.stderr.count("Traceback") <= 1, done.stderr
    assert len(done.stderr.splitlines()) < 40, done.stderr
