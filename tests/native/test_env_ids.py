"""Env ids: a user's native env named by its module (``module:Id``) on every path that builds
an env from an id (``make`` on every backend kind, worker processes, Gymnasium's registry), one
id per env in every form the docs show, and the natural wrong forms refused naming the right
ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import envfleet
from envfleet.registry import NATIVE_ENVS, gym_id
from tests.native.user_env import ENV_ID, MODULE, MODULE_ID, forget

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh():
    """MyGrid-v0 unknown here until an id names its module, and forgotten after the test."""
    forget()
    yield
    forget()


def steps(env, n: int = 6) -> list[np.ndarray]:
    """Observations and rewards of ``n`` steps of action 1 from ``reset(seed=3)``."""
    obs, _ = env.reset(seed=3)
    out = [np.asarray(obs)]
    for _ in range(n):
        obs, reward, *_ = env.step(np.ones(env.num_envs, dtype=np.int64))
        out += [np.asarray(obs), np.asarray(reward)]
    env.close()
    return out


def test_module_id_imports_the_module_then_makes_the_native_env(fresh) -> None:
    with pytest.raises(envfleet.UnknownEnvError, match="'module:Id' imports the module"):
        envfleet.make(ENV_ID, 2)  # nothing registered it yet
    env = envfleet.make(MODULE_ID, 3, seed=0)
    assert type(env).__name__ == "NativeVectorEnv" and env.single_observation_space.shape == (1,)
    env.close()
    assert envfleet.registry.REGISTERED_BY[ENV_ID] == MODULE  # what worker processes import
    assert envfleet.list_envs()[ENV_ID][0] == "numba"
    for form in (ENV_ID, f"envfleet/{ENV_ID}", f"{MODULE}:envfleet/{ENV_ID}"):
        assert envfleet.make(form, 1).single_action_space == gym.spaces.Discrete(2)


def test_module_id_runs_in_worker_processes(fresh) -> None:
    """The executors run a user's id that Gymnasium has no env of its own for as its
    ``envfleet/<id>`` (one native env each); their worker processes, which never imported the
    user's module, import it first: the same trajectories as ``serial``, never "did you mean
    'MyGrid-v0'" for MyGrid-v0 itself."""
    serial = steps(envfleet.make(MODULE_ID, 3, backend="serial"))
    for backend, options in (("pool", {"num_workers": 2}), ("subprocess", {})):
        got = steps(envfleet.make(MODULE_ID, 3, backend=backend, **options))
        for a, b in zip(serial, got, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=backend)
    # the bare id, once known here, runs in the workers too (its module travels with it)
    got = steps(envfleet.make(ENV_ID, 3, backend="pool", num_workers=3))
    np.testing.assert_array_equal(serial[-1], got[-1])


def test_gymnasium_knows_a_user_env_by_its_module_in_a_fresh_process(tmp_path) -> None:
    """Gymnasium's own ``module:Id`` form in a process that never imported the module, and
    Gymnasium's async vector env, whose spawned processes import it through the entry point."""
    script = tmp_path / "fresh_ids.py"
    script.write_text(
        "import gymnasium as gym\n"
        "import envfleet\n"
        "if __name__ == '__main__':  # spawned workers import this script: nothing above\n"
        f"    single = gym.make('{MODULE}:envfleet/{ENV_ID}')\n"
        "    print('single', single.reset(seed=0)[0].shape)\n"
        f"    vec = gym.make_vec('{MODULE}:envfleet/{ENV_ID}', 2,\n"
        "                       vectorization_mode='vector_entry_point')\n"
        "    print('vector', type(vec.unwrapped).__name__)\n"
        f"    env = gym.make_vec('envfleet/{ENV_ID}', 2, vectorization_mode='async',\n"
        "                       vector_kwargs={'context': 'spawn'})\n"
        "    print('async', env.reset(seed=0)[0].shape)\n"
        "    env.close()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, env={**_environ(), "ENVFLEET_QUIET": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "single (1,)" in done.stdout and "vector NativeVectorEnv" in done.stdout
    assert "async (2, 1)" in done.stdout


def _environ() -> dict[str, str]:
    import os

    paths = [str(ROOT), str(Path(envfleet.__file__).resolve().parents[1])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [*paths, *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_module_id_errors_name_the_module_and_what_it_lacks(fresh) -> None:
    with pytest.raises(envfleet.UnknownEnvError,
                       match=r"cannot import module 'no_such_module'.*PYTHONPATH"):
        envfleet.make("no_such_module:MyGrid-v0", 2)
    with pytest.raises(envfleet.UnknownEnvError,
                       match=rf"importing '{MODULE}' registered no such id.*'MyGrid-v0'"):
        envfleet.make(f"{MODULE}:MyGrid-v9", 2)
    with pytest.raises(envfleet.UnknownEnvError, match="expected 'module:Id'"):
        envfleet.make(":MyGrid-v0", 2)
    for path in ("tests/native/mygrid.py", "./tests/native/mygrid", "tests.native.mygrid.py"):
        with pytest.raises(envfleet.UnknownEnvError,
                           match=rf"is a file path; name the module instead, '{MODULE_ID}'"):
            envfleet.make(f"{path}:{ENV_ID}", 2)


# --- one id per env --------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["MinAtar/Breakout-v1", "envfleet/MinAtar-Breakout-v1",
                                  "envfleet:MinAtar/Breakout-v1",
                                  "envfleet:envfleet/MinAtar-Breakout-v1"])
def test_every_form_of_a_namespaced_id_makes_the_same_env(form) -> None:
    env = envfleet.make(form, 2, seed=0)
    assert env.single_observation_space.shape == (10, 10, 4)
    env.close()


def test_gymnasium_forms_of_a_namespaced_id() -> None:
    assert gym_id("MinAtar/Breakout-v1") == "envfleet/MinAtar-Breakout-v1"
    single = gym.make("envfleet/MinAtar-Breakout-v1")
    assert single.reset(seed=0)[0].shape == (10, 10, 4)
    vec = gym.make_vec("envfleet/MinAtar-Breakout-v1", 2,
                       vectorization_mode="vector_entry_point")
    assert vec.reset(seed=0)[0].shape == (2, 10, 10, 4)
    vec.close()


@pytest.mark.parametrize("wrong, right", [
    ("envfleet/MinAtar/Breakout-v1", "one namespace"),  # the old docs' envfleet/<id> rule
    ("MinAtar-Breakout-v1", ""),  # the Gymnasium id without its namespace
    ("minatar/breakout-v1", ""),
    ("ENVFLEET/cartpole-v1", ""),
])
def test_natural_wrong_forms_name_both_right_ones(wrong, right) -> None:
    with pytest.raises(envfleet.UnknownEnvError) as error:
        envfleet.make(wrong, 2)
    text = str(error.value)
    native = "CartPole-v1" if "cartpole" in wrong.lower() else "MinAtar/Breakout-v1"
    assert f"did you mean {native!r} (envfleet's id) or {gym_id(native)!r}" in text, text
    assert right in text


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_envfleet_id_the_docs_show_is_one_gymnasium_and_envfleet_take() -> None:
    """Every ``envfleet/...`` id and ``MinAtar/...`` id in the README and docs: a Gymnasium id
    (one namespace) that ``gymnasium.spec`` and ``make`` know (placeholders such as
    ``envfleet/<id>`` and the guide's own families aside), unless the docs show it as a wrong
    form (its sentence says it is refused), which ``make`` must then refuse."""
    shown = set()
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for pattern in (r"envfleet/[A-Za-z][\w./-]*-v\d+", r"(?<![\w/-])MinAtar/[A-Z]\w+-v\d"):
            for m in re.finditer(pattern, text):
                sentence = text[text.rfind(". ", 0, m.start()) + 1:text.find(". ", m.end())]
                shown.add((path.name, m.group(), "refused" in sentence))
    assert shown
    for page, env_id, refused in sorted(shown):
        name = env_id.removeprefix("envfleet/")
        if name != env_id and "/" not in name and not any(
                gym_id(i) == env_id for i in NATIVE_ENVS):
            continue  # a family the guide registers (GridWalk-v0, MyEnv-v0, ...)
        if envfleet.registry._native_name(env_id) is None:  # shown as a wrong form only
            assert refused, f"{page}: {env_id} is no id envfleet or Gymnasium takes"
            with pytest.raises(envfleet.UnknownEnvError, match="did you mean"):
                envfleet.registry._native_spec(env_id)
        elif name != env_id:
            assert gym.spec(env_id).id == env_id, f"{page}: {env_id}"
