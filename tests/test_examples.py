"""Each script in examples/ (docs/CLIENTS.md: one per RL library) runs for a tiny budget and
prints what its library's users read: episode returns, evaluations, game results. An example
whose library is not installed here is skipped (Tianshou, TorchRL: run by hand, see the page)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import envfleet
from tests import test_readme

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: the examples this module runs (each skipped where a module it imports is missing)
RUN_HERE = ("cleanrl_ppo.py", "cleanrl_ppo_atari_envpool.py", "cleanrl_ppo_continuous_action.py",
            "sb3_ppo.py", "pettingzoo_chess.py", "tianshou_dqn.py", "torchrl_ppo.py")
CLIENT_BLOCKS = test_readme.python_blocks([ROOT / "docs" / "CLIENTS.md"])
#: examples run by another venv's tests (RLlib pins its own Gymnasium: scripts/test_rllib.sh)
RUN_ELSEWHERE = {"rllib_ppo.py": "tests/rllib/test_rllib.py"}


def run_example(name: str, *args: str, cwd: Path, timeout: float = 240) -> str:
    """Run examples/``name`` with ``args`` in a fresh interpreter; its stdout (failing on rc)."""
    path = EXAMPLES / name
    missing = test_readme.missing_modules(path.read_text())
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}, not installed here")
    source_root = str(Path(envfleet.__file__).resolve().parents[1])  # the envfleet under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [source_root, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "ENVFLEET_QUIET": "1"}
    proc = subprocess.run([sys.executable, str(path), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"examples/{name} {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_every_example_is_listed_and_on_the_clients_page():
    """A new example gets a smoke test here and a mention in docs/CLIENTS.md."""
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == sorted([*RUN_HERE, *RUN_ELSEWHERE])
    page = (ROOT / "docs" / "CLIENTS.md").read_text()
    assert [s for s in scripts if f"examples/{s}" not in page] == []


@pytest.mark.parametrize(("page", "line", "source"), CLIENT_BLOCKS,
                         ids=[f"{page}:{line}" for page, line, _ in CLIENT_BLOCKS])
def test_clients_page_block_runs(page, line, source, tmp_path):
    """docs/CLIENTS.md's complete snippets (```python) run as written, as the README's do."""
    test_readme.test_readme_block_runs(page, line, source, tmp_path)


def test_cleanrl_ppo_prints_episode_returns(tmp_path):
    """The CleanRL-style PPO logs its episodes from Gymnasium 1.x's ``info["episode"]`` (a
    0.29-style final_info loop would print none): CartPole's returns are the episode lengths,
    1 <= r <= 500, and every iteration prints its SPS line."""
    out = run_example("cleanrl_ppo.py", "--total-timesteps", "1024", "--num-steps", "64",
                      "--num-envs", "4", cwd=tmp_path)
    returns = [float(r) for r in re.findall(r"^global_step=\d+, episodic_return=(\S+)$", out,
                                            re.MULTILINE)]
    assert len(returns) >= 4, out  # ~45 random-play episodes of ~22 steps in 1024 steps
    assert all(r == int(r) and 1 <= r <= 500 for r in returns), returns
    assert len(re.findall(r"^SPS: \d+$", out, re.MULTILINE)) == 1024 // (64 * 4), out


#: a stand-in for CleanRL's ppo_atari_envpool.py, using EnvPool's env the ways that script does
#: (the gym-style 4-tuple, single-env spaces set as the batch's attributes, whole-game returns
#: summed from the unclipped info["reward"] and logged when the last life is gone), with random
#: actions for the policy
ENVPOOL_CLIENT = """
import envpool
import numpy as np

envs = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True,
                    reward_clip=True)
for name, value in {"num_envs": 2, "single_action_space": envs.action_space,
                    "single_observation_space": envs.observation_space}.items():
    setattr(envs, name, value)  # the script sets these on EnvPool's env
obs = envs.reset()
assert obs.shape == (2, *envs.single_observation_space.shape) == (2, 4, 84, 84)
rng = np.random.default_rng(0)
game_returns, lives_lost = np.zeros(2), 0
for step in range(1500):
    obs, reward, done, info = envs.step(rng.integers(0, envs.single_action_space.n, 2))
    assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0} and (info["reward"] >= reward).all()
    game_returns += info["reward"]
    game_over = done & (info["lives"] == 0)
    for env_id in np.flatnonzero(game_over):
        print(f"global_step={step}, episodic_return={game_returns[env_id]}")
    lives_lost += int((done & ~game_over).sum())
    game_returns[info["terminated"] == 1] = 0
print(f"lives_lost={lives_lost}")
"""


def test_cleanrl_ppo_atari_envpool_swaps_only_the_env(tmp_path):
    """The runner puts envfleet's ``make`` where CleanRL's script imports envpool: EnvPool's
    gym API and info keys, a lost life ends an episode for the learner (done, lives left),
    whole games' unclipped returns are logged as CleanRL's script logs them."""
    client = tmp_path / "client.py"
    client.write_text(ENVPOOL_CLIENT)
    out = run_example("cleanrl_ppo_atari_envpool.py", str(client), cwd=tmp_path)
    returns = [float(r) for r in re.findall(r"^global_step=\d+, episodic_return=(\S+)$", out,
                                            re.MULTILINE)]
    assert returns and all(r == int(r) and r >= 0 for r in returns), out
    assert int(re.search(r"^lives_lost=(\d+)$", out, re.MULTILINE).group(1)) >= 4, out


#: a stand-in for CleanRL's ppo_continuous_action.py, using the env the ways that script does
#: (a SameStep SyncVectorEnv over make_env(env_id, idx, capture_video, run_name, gamma) thunks,
#: Box actions from a Gaussian, unclipped; returns read from infos["final_info"]), with random
#: actions for the policy; it prints what the script logs and the extremes the learner sees
MUJOCO_CLIENT = """
import gymnasium as gym
import numpy as np


def make_env(env_id, idx, capture_video, run_name, gamma):
    def thunk():  # the example reads env_id and gamma from here, without calling it
        env = gym.make(env_id, render_mode="rgb_array" if capture_video and idx == 0 else None)
        return gym.wrappers.NormalizeReward(gym.wrappers.RecordEpisodeStatistics(env),
                                            gamma=gamma)
    return thunk


envs = gym.vector.SyncVectorEnv([make_env("Hopper-v5", i, False, "run", 0.99) for i in range(2)],
                                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
assert isinstance(envs.single_action_space, gym.spaces.Box)
next_obs, _ = envs.reset(seed=1)
rng = np.random.default_rng(0)
largest_obs = largest_reward = 0.0
raw_returns = np.zeros(2)  # summed from Hopper's reward terms in the infos
terms = ("reward_forward", "reward_ctrl", "reward_survive")
for global_step in range(2, 802, 2):
    action = rng.normal(0.0, 2.0, (2, *envs.single_action_space.shape))  # beyond the Box too
    next_obs, reward, terminations, truncations, infos = envs.step(action)
    largest_obs = max(largest_obs, float(np.abs(next_obs).max()))
    largest_reward = max(largest_reward, float(np.abs(reward).max()))
    raw_returns += sum(infos[k] for k in terms)
    if "final_info" in infos:  # an ended episode's last terms are there (SameStep)
        episodes_over = np.nonzero(infos["final_info"]["_episode"])[0]
        last = sum(infos["final_info"][k] for k in terms) - sum(infos[k] for k in terms)
        raw_returns[episodes_over] += last[episodes_over]
        for i, r, l in zip(episodes_over, infos["final_info"]["episode"]["r"][episodes_over],
                           infos["final_info"]["episode"]["l"][episodes_over]):
            print(f"global_step={global_step}, episodic_return={r}, episodic_length={l}, "
                  f"raw={raw_returns[i]}")
        raw_returns[episodes_over] = 0.0
print(f"largest_obs={largest_obs} largest_reward={largest_reward}")
envs.close()
"""


def test_cleanrl_ppo_continuous_action_swaps_only_the_env(tmp_path):
    """The runner puts envfleet's ``make`` where CleanRL's script builds its SyncVectorEnv:
    the learner sees observations and rewards normalised and clipped to +-10, and CleanRL's
    logging lines print the raw returns of whole episodes (the sums of Hopper's reward
    terms, which its infos carry)."""
    client = tmp_path / "client.py"
    client.write_text(MUJOCO_CLIENT)
    out = run_example("cleanrl_ppo_continuous_action.py", str(client), cwd=tmp_path)
    episodes = [(float(r), float(raw)) for r, raw in re.findall(
        r"^global_step=\d+, episodic_return=(\S+), episodic_length=\d+, raw=(\S+)$", out,
        re.MULTILINE)]
    assert len(episodes) >= 4, out
    assert all(abs(r - raw) < 1e-6 * max(1.0, abs(raw)) for r, raw in episodes), episodes
    largest = re.search(r"^largest_obs=(\S+) largest_reward=(\S+)$", out, re.MULTILINE)
    assert 1.0 < float(largest.group(1)) <= 10.0 and float(largest.group(2)) <= 10.0, out


#: CleanRL's make_env (its Gymnasium 1.x version, every wrapper) stepped through the swapped
#: SyncVectorEnv and through Gymnasium's own (still at gym.vector.sync_vector_env), one env
#: each, with the same float32 actions (the script's, from a torch Gaussian); then the env that
#: records video (--capture-video, or CleanRL's evaluation after --save-model) and a
#: SyncVectorEnv built as CleanRL's Gymnasium 0.29 script builds it (no autoreset_mode)
MUJOCO_EXACT_CLIENT = """
import gymnasium as gym
import numpy as np


def make_env(env_id, idx, capture_video, run_name, gamma):
    def thunk():
        video = capture_video and idx == 0  # CleanRL wraps this one in RecordVideo
        env = gym.make(env_id, render_mode="rgb_array" if video else None)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10),
                                                env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        return gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
    return thunk


thunks = [make_env("Hopper-v5", 0, False, "run", 0.99)]
envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
own = gym.vector.sync_vector_env.SyncVectorEnv(thunks,
                                               autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
ours, theirs = envs.reset(seed=1)[0], own.reset(seed=1)[0]
differing = int(not np.array_equal(ours, theirs))
rng = np.random.default_rng(0)
episodes = 0
for _ in range(400):
    action = rng.normal(0.0, 1.0, (1, *envs.single_action_space.shape)).astype(np.float32)
    ours, theirs = envs.step(action), own.step(action)
    differing += int(not all(np.array_equal(a, b) for a, b in zip(ours[:4], theirs[:4])))
    episodes += int(ours[2][0] or ours[3][0])
print(f"steps=400 episodes={episodes} differing={differing}")
video = gym.vector.SyncVectorEnv([make_env("Hopper-v5", 0, True, "run", 0.99)],
                                 autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
print(f"video_env={type(video).__module__}")
try:
    gym.vector.SyncVectorEnv(thunks)
except ValueError as error:
    print(f"refused: {error}")
"""


def test_cleanrl_ppo_continuous_action_matches_the_scripts_own_envs(tmp_path):
    """With CleanRL's one env, the swapped batch's observations, rewards and episode ends are
    bit for bit those of the script's own wrapped env over episodes that end by termination;
    the envs that record video stay Gymnasium's (envfleet's render no frames); the Gymnasium
    0.29 version of the script (no SameStep asked) is refused at once."""
    client = tmp_path / "client.py"
    client.write_text(MUJOCO_EXACT_CLIENT)
    out = run_example("cleanrl_ppo_continuous_action.py", str(client), cwd=tmp_path)
    match = re.search(r"^steps=400 episodes=(\d+) differing=(\d+)$", out, re.MULTILINE)
    assert match and int(match.group(1)) >= 5 and match.group(2) == "0", out
    assert "video_env=gymnasium.vector.sync_vector_env\n" in out, out
    assert re.search(r"^refused: .*Gymnasium 0\.29", out, re.MULTILINE), out


def test_sb3_ppo_logs_episodes_and_evaluates(tmp_path):
    """SB3's PPO on the facade logs ``rollout/ep_rew_mean`` (VecMonitor) and evaluates."""
    out = run_example("sb3_ppo.py", "--total-timesteps", "512", cwd=tmp_path)
    assert re.search(r"ep_rew_mean\s+\|\s+[\d.]+", out), out
    match = re.search(r"^evaluation: mean_return=([\d.]+) \+/- [\d.]+ over 10 episodes$", out,
                      re.MULTILINE)
    assert match and 1 <= float(match.group(1)) <= 500, out


def test_pettingzoo_chess_plays_games(tmp_path):
    """Two random games to their end: zero-sum returns, a final position per game."""
    out = run_example("pettingzoo_chess.py", "--games", "2", cwd=tmp_path)
    games = re.findall(r"^game=(\d), plies=(\d+), returns=\{'player_0': (\S+), "
                       r"'player_1': (\S+)\}, final=\S+ [wb] ", out, re.MULTILINE)
    assert [g[0] for g in games] == ["0", "1"], out
    assert all(int(p) > 0 and float(a) + float(b) == 0 for _, p, a, b in games), games


def test_tianshou_dqn_trains_and_tests(tmp_path):
    """DQN with Tianshou on single native envs: an epoch, then a 10-episode greedy test."""
    out = run_example("tianshou_dqn.py", "--epochs", "1", "--epoch-num-steps", "500",
                      "--num-test-envs", "10", cwd=tmp_path)
    match = re.search(r"test: mean_return=([\d.]+) over 10 episodes$", out, re.MULTILINE)
    assert match and 1 <= float(match.group(1)) <= 500, out


def test_torchrl_ppo_logs_episode_returns(tmp_path):
    """TorchRL's PPO on one batched native env: each 256-frame batch logs its finished
    episodes' returns (RewardSum), 1 <= mean <= 500."""
    out = run_example("torchrl_ppo.py", "--total-frames", "1024", cwd=tmp_path)
    batches = re.findall(r"^frames=(\d+), episodes=(\d+), mean_return=([\d.]+)$", out,
                         re.MULTILINE)
    assert [int(f) for f, _, _ in batches] == [256, 512, 768, 1024], out
    assert all(1 <= float(r) <= 500 for _, _, r in batches), batches
