"""The on-disk kernel cache (``envfleet.native.kernel_cache``): a second process loads the
kernels a first one compiled, without compiling or announcing a compile, and steps identically;
a changed family (its ``step_one``, or a helper module it calls) compiles again and runs the new
code; processes writing the cache at once, a damaged cache file and ``ENVFLEET_CACHE=0`` all
work. Each process is a fresh interpreter with its own temporary cache directory. What the
cache trusts (owner, permissions, file type) and what its pruning deletes is tested in process,
on one tiny kernel."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest

import envfleet
from envfleet.native.kernel_cache import cache_dir, disk_cached, fingerprint, prune_unused

NOTICE = "envfleet: compiling"

#: steps CartPole-v1 on numba, then prints what it saw and how its kernels were obtained
CARTPOLE = """
import json, sys
import numpy as np
import envfleet

env = envfleet.make("CartPole-v1", 3, backend="numba", seed=0)
obs, _ = env.reset(seed=7)
seen = [obs.tolist()]
for t in range(30):
    obs, rewards, terminated, truncated, _ = env.step(np.array([t % 2, 1, 0]))
    seen.append([obs.tolist(), rewards.tolist(), terminated.tolist(), truncated.tolist()])
kernels = env.engine._kernels
print(json.dumps({"seen": seen,
                  "hits": sum(sum(k.stats.cache_hits.values()) for k in kernels),
                  "misses": sum(sum(k.stats.cache_misses.values()) for k in kernels)}))
"""


def _environ(cache: Path | None, cwd: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ENVFLEET_QUIET", "ENVFLEET_CACHE", "ENVFLEET_CACHE_DIR")}
    # the envfleet under test (absolute: a script may run elsewhere), then the script's folder
    env["PYTHONPATH"] = os.pathsep.join([str(Path(envfleet.__file__).parents[1]),
                                         *([str(cwd)] if cwd else [])])
    if cache is not None:
        env["ENVFLEET_CACHE_DIR"] = str(cache)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # an edited module is read from its source
    env.update(extra)
    return env


def _start(script: str, cache: Path | None, cwd: Path | None = None,
           **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_environ(cache, cwd, **extra),
                            cwd=cwd)


def _finish(proc: subprocess.Popen) -> tuple[dict, str]:
    """(the JSON the script printed, its stderr)."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _run(script: str, cache: Path | None, cwd: Path | None = None,
         **extra: str) -> tuple[dict, str]:
    return _finish(_start(script, cache, cwd, **extra))


def test_second_process_loads_the_kernels_and_steps_identically(tmp_path):
    cache = tmp_path / "cache"
    # two processes compile at once into an empty cache: both succeed, each writing its files
    first, second = _start(CARTPOLE, cache), _start(CARTPOLE, cache)
    (a, a_err), (b, b_err) = _finish(first), _finish(second)
    assert NOTICE in a_err and NOTICE in b_err
    assert a["misses"] > 0 and a["hits"] == 0
    files = sorted(p.name for p in cache.iterdir())
    assert files and all(name.endswith(".nbk") for name in files), files  # no temporaries
    # a later process loads reset and step from disk: no compile, no notice, same steps
    warm, warm_err = _run(CARTPOLE, cache)
    assert NOTICE not in warm_err, warm_err
    assert (warm["hits"], warm["misses"]) == (2, 0)
    assert warm["seen"] == a["seen"] == b["seen"]


def test_damaged_cache_file_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    reference, _ = _run(CARTPOLE, cache)
    for path in cache.iterdir():
        path.write_bytes(path.read_bytes()[:100])  # e.g. a full disk
    again, err = _run(CARTPOLE, cache)
    assert NOTICE in err and again["misses"] > 0
    assert again["seen"] == reference["seen"]
    warm, err = _run(CARTPOLE, cache)  # the damaged files were replaced
    assert NOTICE not in err and warm["hits"] == 2 and warm["seen"] == reference["seen"]


def test_disabled_cache_compiles_in_every_process(tmp_path):
    cache = tmp_path / "cache"
    runs = [_run(CARTPOLE, cache, ENVFLEET_CACHE="0") for _ in range(2)]
    assert not cache.exists()
    for result, err in runs:
        assert NOTICE in err and result["hits"] == 0
    assert runs[0][0]["seen"] == runs[1][0]["seen"]


def test_unused_files_are_pruned_and_loaded_files_kept(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)  # the cache trusts no directory others can write (umask 002)
    long_ago = time.time() - 40 * 86400
    # an edited family's old kernel (named as the cache names its files: 40 hex digits)
    stale = cache / f"step_serial-{'0123' * 10}.nbk"
    stale.write_bytes(b"old machine code")
    os.utime(stale, (long_ago, long_ago))
    unrelated = cache / "notes.txt"
    unrelated.write_text("not ours")
    os.utime(unrelated, (long_ago, long_ago))
    _run(CARTPOLE, cache)  # compiles and saves: the save prunes
    assert not stale.exists() and unrelated.exists()
    kernels = list(cache.glob("*.nbk"))
    almost = time.time() - 29 * 86400
    for path in kernels:
        os.utime(path, (almost, almost))
    warm, _ = _run(CARTPOLE, cache)  # loads mark the files used
    assert warm["hits"] == 2
    used = [p for p in kernels if p.stat().st_mtime > time.time() - 3600]
    assert len(used) == 2, [p.name for p in kernels]


#: steps CartPole-v1 in the modes named by MODES (one env each, in that order) and prints the
#: SAME_STEP run's outputs
MODES_SCRIPT = """
import json, os
import numpy as np
import envfleet

seen = {}
for mode in os.environ["MODES"].split(","):
    env = envfleet.make("CartPole-v1", 3, backend="numba", seed=0, autoreset_mode=mode,
                        max_episode_steps=4)
    env.reset(seed=1)
    out = []
    for t in range(10):
        obs, rewards, terminated, truncated, info = env.step(np.array([t % 2, 1, 0]))
        out.append([obs.tolist(), truncated.tolist(),
                    np.asarray(info.get("_final_obs", [])).tolist()])
    seen[mode] = out
print(json.dumps(seen))
"""


def test_kernels_compiled_in_different_processes_load_side_by_side(tmp_path):
    """Two processes that compile different kernels in the same order give their functions
    the same internal names (numba numbers functions per process); a third process that
    loads both must still run each one's own code (it ran NEXT_STEP's inner loop for
    SAME_STEP's kernel before)."""
    alone, _ = _run(MODES_SCRIPT, tmp_path / "same", MODES="SameStep")
    _run(MODES_SCRIPT, tmp_path / "next", MODES="NextStep")
    both = tmp_path / "both"
    both.mkdir(mode=0o700)  # the cache trusts no directory or file others can write
    for part in ("same", "next"):
        for path in (tmp_path / part).iterdir():
            shutil.copy(path, both / path.name)  # with its mode, 0600
    loaded, err = _run(MODES_SCRIPT, both, MODES="NextStep,SameStep")
    assert NOTICE not in err, err  # every kernel came from the files
    assert loaded["SameStep"] == alone["SameStep"]


# --- a user's family in its own files, edited between processes ---------------------------

HELPER = """
from envfleet.kernels import kernel_function

SCALE = {scale}


@kernel_function
def scaled(x):
    return x * SCALE
"""

FAMILY = """
from typing import NamedTuple

import numpy as np
from gymnasium import spaces

import counter_helper
from envfleet.kernels import NativeEnvSpec, kernel_function


class Params(NamedTuple):
    start: float


@kernel_function
def reset_one(i, state, params, rng, obs):
    state.count[i] = params.start
    obs[i, 0] = np.float32(state.count[i])


@kernel_function
def step_one(i, state, params, actions, rng, obs, rewards, terminated):
    state.count[i] += actions[i]
    obs[i, 0] = np.float32(state.count[i])
    rewards[i] = {reward}
    terminated[i] = False


SPEC = NativeEnvSpec(
    id="Counter-v0",
    observation_space=spaces.Box(-np.inf, np.inf, (1,), np.float32),
    action_space=spaces.Discrete(3),
    state={{"count": (np.float64, ())}},
    make_params=lambda start=0.0: Params(float(start)),
    max_episode_steps=100,
    reset_one=reset_one,
    step_one=step_one,
    backends=("numba",),
)
"""

COUNTER = """
import json
import numpy as np
import envfleet
import counter_family

envfleet.register_native_env(counter_family.SPEC)
env = envfleet.make("envfleet/Counter-v0", 2, backend="numba")
env.reset(seed=0)
obs, rewards, *_ = env.step(np.array([1, 2]))
kernels = env.engine._kernels
print(json.dumps({"obs": obs.tolist(), "rewards": rewards.tolist(),
                  "hits": sum(sum(k.stats.cache_hits.values()) for k in kernels),
                  "misses": sum(sum(k.stats.cache_misses.values()) for k in kernels)}))
"""


def _write_family(where: Path, reward: str, scale: str) -> None:
    (where / "counter_family.py").write_text(textwrap.dedent(FAMILY.format(reward=reward)))
    (where / "counter_helper.py").write_text(textwrap.dedent(HELPER.format(scale=scale)))


def test_changed_family_source_compiles_again_and_runs_the_new_code(tmp_path):
    cache = tmp_path / "cache"
    _write_family(tmp_path, "1.0", "1.0")
    cold, err = _run(COUNTER, cache, cwd=tmp_path)
    assert NOTICE in err and cold["rewards"] == [1.0, 1.0]
    warm, err = _run(COUNTER, cache, cwd=tmp_path)
    assert NOTICE not in err and (warm["hits"], warm["misses"]) == (2, 0)

    # step_one's own code changes
    _write_family(tmp_path, "2.5", "1.0")
    edited, err = _run(COUNTER, cache, cwd=tmp_path)
    assert NOTICE in err and edited["misses"] > 0
    assert edited["rewards"] == [2.5, 2.5]

    # a helper in another module (its constant) changes: numba's own cache would miss it
    (tmp_path / "counter_family.py").write_text(
        (tmp_path / "counter_family.py").read_text().replace(
            "rewards[i] = 2.5", "rewards[i] = counter_helper.scaled(2.5)"))
    _run(COUNTER, cache, cwd=tmp_path)
    (tmp_path / "counter_helper.py").write_text(textwrap.dedent(HELPER.format(scale="4.0")))
    helper_edit, err = _run(COUNTER, cache, cwd=tmp_path)
    assert NOTICE in err and helper_edit["misses"] > 0
    assert helper_edit["rewards"] == [10.0, 10.0]
    assert helper_edit["obs"] == cold["obs"] == [[1.0], [2.0]]


def test_family_defined_in_a_script_without_a_file_is_cached(tmp_path):
    cache = tmp_path / "cache"
    _write_family(tmp_path, "1.0", "1.0")
    inline = COUNTER.replace("import counter_family\n", textwrap.dedent(
        FAMILY.format(reward="3.0")).replace("class Params", "class CounterParams")
        .replace("Params(float(start))", "CounterParams(float(start))") + "\n")
    inline = inline.replace("counter_family.SPEC", "SPEC")
    cold, err = _run(inline, cache, cwd=tmp_path)
    assert NOTICE in err and cold["rewards"] == [3.0, 3.0]
    warm, err = _run(inline, cache, cwd=tmp_path)
    assert NOTICE not in err and warm["hits"] == 2 and warm["rewards"] == [3.0, 3.0]


# --- the fingerprint and the cache directory (in process: nothing compiles) ---------------

K = 2.0


def _constant_user(x):
    return x * K


def test_fingerprint_follows_code_cells_and_globals():
    def make(scale, offset):
        def kernel(x):
            return _constant_user(x) * scale + offset
        return kernel

    base = fingerprint(make(1.0, 0))
    assert fingerprint(make(1.0, 0)) == base  # a new closure with the same content
    assert fingerprint(make(1.5, 0)) != base  # a cell's value
    assert fingerprint(make(1.0, np.int64(0))) != base  # a cell's type
    global K
    saved, K = K, 3.0
    try:
        assert fingerprint(make(1.0, 0)) != base  # a global read by a function it calls
    finally:
        K = saved


def test_fingerprint_is_the_same_in_every_process(tmp_path):
    script = ("from envfleet.native.kernel_cache import fingerprint\n"
              "from envfleet.envs.chess import env\n"
              "print(fingerprint(env.step_one), fingerprint(env.action_check))")
    prints = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True, env=_environ(None, None, PYTHONHASHSEED=seed)).stdout
              for seed in ("1", "2")}
    assert len(prints) == 1


def test_cache_dir_default_override_and_off(monkeypatch, tmp_path):
    for name in ("ENVFLEET_CACHE", "ENVFLEET_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "envfleet" / "numba"
    monkeypatch.setenv("ENVFLEET_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("ENVFLEET_CACHE", "0")
    assert cache_dir() is None


#: Gymnasium's registration of envfleet's CartPole (a 1-env numba env) in two worker processes
WORKERS = """
import json
import numpy as np
import envfleet

env = envfleet.make("envfleet/CartPole-v1", 2, backend="subprocess", seed=3)
obs, _ = env.reset(seed=3)
obs, rewards, *_ = env.step(np.array([0, 1]))
env.close()
print(json.dumps({"obs": obs.tolist()}))
"""


def test_executor_workers_load_the_kernels(tmp_path):
    cache = tmp_path / "cache"
    cold, err = _run(WORKERS, cache)
    assert NOTICE in err  # the workers compiled
    warm, err = _run(WORKERS, cache)
    assert NOTICE not in err, err
    assert warm == cold


# --- trust: what is loaded, written and deleted (in process, one tiny kernel) --------------


def _plus_one(x):
    return x + 1


def _tiny(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A new dispatcher of ``_plus_one`` on the disk cache in ``cache`` (the same file every
    time: the same fingerprint)."""
    monkeypatch.setenv("ENVFLEET_CACHE_DIR", str(cache))
    monkeypatch.delenv("ENVFLEET_CACHE", raising=False)
    return disk_cached(numba.njit(_plus_one))


def _counts(dispatcher: Any) -> tuple[int, int]:
    """(loads from disk, compiles) of ``dispatcher``."""
    return (sum(dispatcher.stats.cache_hits.values()),
            sum(dispatcher.stats.cache_misses.values()))


class _Payload:
    """What a hostile cache file holds: unpickling it runs ``os.mkdir(marker)``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.mkdir, (str(self.marker),)


def _kernel_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Compile the tiny kernel into ``cache``; its one file."""
    assert _tiny(cache, monkeypatch)(1) == 2
    (path,) = cache.iterdir()
    return path


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("planting another user's files needs root (os.chown to uid 65534)")


def _other_users_file(path: Path, cache: Path, payload: Path) -> None:
    _needs_root()
    os.chown(path, 65534, 65534)


def _other_users_directory(path: Path, cache: Path, payload: Path) -> None:
    _needs_root()
    os.chown(path, 65534, 65534)
    os.chown(cache, 65534, 65534)


def _symbolic_link(path: Path, cache: Path, payload: Path) -> None:
    path.unlink()
    path.symlink_to(payload)


#: how each planted file is refused: (how it is planted, the path named, the reason given,
#: whether the directory is trusted: then the kernel compiled replaces the file)
PLANTED = {
    "another user's file": (_other_users_file, "file", "owned by uid 65534, not by this user",
                            True),
    "a file writable by others": (lambda path, cache, payload: path.chmod(0o646), "file",
                                  "writable by its group or others (mode 646)", True),
    "a symbolic link": (_symbolic_link, "file", "a symbolic link", True),
    "another user's directory": (_other_users_directory, "cache",
                                 "owned by uid 65534, not by this user", False),
    "a directory writable by others": (lambda path, cache, payload: cache.chmod(0o777),
                                       "cache", "writable by its group or others (mode 777)",
                                       False),
    "a directory writable by its group": (lambda path, cache, payload: cache.chmod(0o770),
                                          "cache", "writable by its group or others (mode 770)",
                                          False),
    "a sticky directory writable by all, as /tmp": (
        lambda path, cache, payload: cache.chmod(0o1777), "cache",
        "writable by its group or others (mode 1777)", False),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_untrusted_cache_files_are_refused_not_unpickled(case, tmp_path, monkeypatch, capsys):
    """A cache file unpickled runs whatever its writer put in it: one that this user (or root)
    did not write, or that others could have replaced, is refused with one line on stderr and
    the kernel compiles as with an empty cache (saved only into a trusted directory)."""
    plant, named, reason, trusted = PLANTED[case]
    cache = tmp_path / "cache"
    path = _kernel_file(cache, monkeypatch)
    marker = tmp_path / "payload ran"
    payload = tmp_path / "elsewhere.nbk"
    for hostile in (path, payload):
        hostile.write_bytes(pickle.dumps(_Payload(marker)))
    plant(path, cache, payload)
    listing = sorted(cache.iterdir())
    capsys.readouterr()

    again = _tiny(cache, monkeypatch)
    assert again(41) == 42
    assert not marker.exists(), "the planted file was unpickled"
    assert _counts(again) == (0, 1)
    refused = {"file": path, "cache": cache}[named]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"envfleet: kernel cache: not using {refused}: {reason}"), lines
    if trusted:  # the compiled kernel replaced the planted file, and loads
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.geteuid()
        loaded = _tiny(cache, monkeypatch)
        assert loaded(1) == 2 and _counts(loaded) == (1, 0)
    else:  # nothing written into a directory others control
        assert sorted(cache.iterdir()) == listing
        assert path.read_bytes() == payload.read_bytes()


def test_fifo_at_a_cache_file_does_not_block(tmp_path, monkeypatch, capsys):
    """Opening a FIFO for reading waits for a writer: the cache opens without blocking and
    refuses anything but a regular file."""
    cache = tmp_path / "cache"
    path = _kernel_file(cache, monkeypatch)
    path.unlink()
    os.mkfifo(path, 0o600)
    capsys.readouterr()
    again = _tiny(cache, monkeypatch)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(again(1)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    blocked = worker.is_alive()
    if blocked:  # give the reader its end of file, so the thread finishes
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=60)
    assert not blocked, "loading the kernel blocked on the FIFO"
    assert result == [2] and _counts(again) == (0, 1)
    err = capsys.readouterr().err
    assert f"not using {path}: not a regular file (a FIFO)" in err, err
    assert stat.S_ISREG(path.lstat().st_mode)  # replaced by the compiled kernel


def test_cache_directory_is_created_private(tmp_path, monkeypatch):
    """The directories the cache creates are 0700 and its files 0600, with no temporaries
    left: only this user can read, list or replace them."""
    cache = tmp_path / "a" / "b" / "cache"
    path = _kernel_file(cache, monkeypatch)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", cache):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert re.fullmatch(r"_plus_one-[0-9a-f]{40}\.nbk", path.name), path.name


def test_pruning_deletes_only_the_caches_own_files(tmp_path, monkeypatch):
    """A save deletes kernel files unused for 30 days and stray temporaries, by the cache's
    own naming; a user's dotfiles and other files in the directory, and anything outside it,
    are kept however old."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    key = "0123456789abcdef" * 2 + "01234567"
    ours = [f"step_serial-{key}.nbk", f".step_serial-{key}.nbk.k3_x9q2a"]
    theirs = [".env", ".my_notes", "notes.txt", ".hidden.nbk", "results.nbk",
              f"step_serial-{key}.nbk.bak", f".step_serial-{key}.nbk"]
    long_ago = time.time() - 40 * 86400
    for name in ours + theirs:
        (cache / name).write_text("x")
    (cache / ".git").mkdir()
    outside = tmp_path / f"step_serial-{key}.nbk"
    outside.write_text("x")
    for path in (*cache.iterdir(), outside):
        os.utime(path, (long_ago, long_ago))

    assert _tiny(cache, monkeypatch)(1) == 2  # compiles and saves: the save prunes
    left = {p.name for p in cache.iterdir()}
    assert not left & set(ours), left
    assert left >= {*theirs, ".git"}, left
    assert outside.exists()
    prune_unused(cache)  # the new kernel file is in use: kept
    assert any(re.fullmatch(r"_plus_one-[0-9a-f]{40}\.nbk", name)
               for name in (p.name for p in cache.iterdir()))


def test_a_fingerprint_does_not_depend_on_what_the_process_imported():
    """A kernel helper that reaches ``sys.modules`` (elementwise's batch test) keeps its key
    when the process imports more (the same kernel compiled again in a process that had built
    another env first)."""
    import importlib

    from envfleet.native import elementwise
    from envfleet.native.kernel_cache import fingerprint

    before = fingerprint(elementwise.is_batch)
    name = next(m for m in ("xml.dom.minidom", "wsgiref.simple_server", "mailbox", "ftplib")
                if m not in sys.modules)
    importlib.import_module(name)
    assert fingerprint(elementwise.is_batch) == before


#: steps the MuJoCo and Atari engines once (their compiled loops call C through addresses)
ENGINES = """
import json
import numpy as np
import envfleet

for env_id, actions in (("HalfCheetah-v5", np.zeros((2, 6), np.float32)),
                        ("ALE/Pong-v5", np.zeros(2, np.int64))):
    env = envfleet.make(env_id, 2, seed=0)
    env.reset()
    env.step(actions)
    env.close()
print(json.dumps({}))
"""


def test_the_engines_kernels_load_from_the_cache_in_a_second_process(tmp_path):
    """Nothing the Atari and MuJoCo loops compile in keeps numba from saving them (a
    ``numba.set_num_threads`` inside a loop would: its code holds a pointer)."""
    pytest.importorskip("mujoco")
    pytest.importorskip("ale_py")
    cache = tmp_path / "cache"
    _, cold = _run(ENGINES, cache)
    assert NOTICE in cold
    _, warm = _run(ENGINES, cache)
    assert NOTICE not in warm, warm
