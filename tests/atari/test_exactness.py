"""``envfleet.make("ALE/<Game>-v5", n, seed=s)``: env i is bit for bit Gymnasium's
``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)))`` reset with ``s + i``
(frames, rewards, terminated, truncated, lives), across autoresets, in every autoreset mode."""

from __future__ import annotations

import numpy as np
import pytest

from tests.atari.reference import lockstep, reference


def test_breakout_defaults_with_life_loss_next_step():
    """Gymnasium's defaults (sticky actions 0.25, up to 30 no-ops, 84x84, stack 4) and
    terminal_on_life_loss: random play loses lives often, so autoresets happen (NEXT_STEP)."""
    ended = lockstep("ALE/Breakout-v5", 3, 120, terminal_on_life_loss=True)
    assert ended >= 4


def test_breakout_defaults_to_game_over():
    """Every default (no life-loss termination): random play ends a game (all lives lost)
    within the run, and the next episode starts from the autoreset."""
    ended = lockstep("ALE/Breakout-v5", 2, 150)
    assert ended >= 1


def test_pong_without_sticky_actions_truncated_same_step():
    """Sticky actions off, episodes truncated by ALE's frame limit; SAME_STEP's final_obs."""
    ended = lockstep("ALE/Pong-v5", 2, 110, autoreset_mode="SameStep",
                     repeat_action_probability=0.0, max_num_frames_per_episode=180)
    assert ended >= 4


def test_space_invaders_non_default_preprocessing_disabled():
    """Another screen size (64: each frame resized on its own), frame skip, no-op range and
    stack; the full action set; DISABLED mode's masked resets."""
    ended = lockstep("ALE/SpaceInvaders-v5", 2, 100, autoreset_mode="Disabled",
                     terminal_on_life_loss=True, screen_size=64, frame_skip=3, noop_max=5,
                     stack_size=2, full_action_space=True, max_num_frames_per_episode=240)
    assert ended >= 2


@pytest.mark.parametrize("options", [{"frame_skip": 1, "noop_max": 0, "stack_size": 1},
                                     {"screen_size": (80, 105), "frame_skip": 2}])
def test_breakout_other_shapes(options):
    """Frame skip 1 (no max-pool) without no-ops; a (width, height) screen."""
    lockstep("ALE/Breakout-v5", 2, 60, terminal_on_life_loss=True, **options)


@pytest.mark.parametrize(("env_id", "options"), [
    ("ALE/AirRaid-v5", {}),  # a 250-row screen; its episodes start 8 frames in
    ("ALE/Backgammon-v5", {"noop_max": 0}),  # action 0 is FIRE: no no-op starts
])
def test_other_screens_and_action_sets(env_id, options):
    lockstep(env_id, 2, 40, max_num_frames_per_episode=120, **options)


def test_episodes_that_start_truncated():
    """NameThisGame's episodes start 134 frames in: with a 100-frame limit every episode
    starts truncated (and each no-op resets the game again: few no-ops, few steps)."""
    assert lockstep("ALE/NameThisGame-v5", 2, 8, max_num_frames_per_episode=100,
                    noop_max=2) == 8


def test_games_without_noop_refuse_noop_starts_as_gymnasium_does():
    with pytest.raises(ValueError, match="the first action meaning must be 'NOOP'"):
        reference("ALE/Backgammon-v5")
    with pytest.raises(ValueError, match="noop_max > 0 needs NOOP as action 0"):
        lockstep("ALE/Backgammon-v5", 1, 1)


@pytest.mark.parametrize(("height", "width"), [(84, 84), (105, 80), (42, 40), (64, 64)])
def test_batched_resize_matches_each_frame(height, width):
    """The one cv2.resize of every env's frame at once (where the engine uses it) gives each
    frame's own cv2.resize(INTER_AREA), bit for bit."""
    import cv2

    from envfleet.atari.engine import batched_resize_is_exact

    frames = np.random.default_rng(height).integers(0, 256, (5, 210, 160), dtype=np.uint8)
    own = np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA)
                    for f in frames])
    batched = cv2.resize(frames.reshape(-1, 160), (width, 5 * height),
                         interpolation=cv2.INTER_AREA).reshape(5, height, width)
    assert batched_resize_is_exact(210, height) == (height != 64)
    if batched_resize_is_exact(210, height):
        np.testing.assert_array_equal(batched, own)


@pytest.mark.parametrize(("height", "width"), [(84, 84), (64, 64), (84, 100), (50, 30)])
def test_compiled_resize_matches_cv2(height, width):
    """The step loop's own area resize (OpenCV's general INTER_AREA path, compiled) gives
    cv2.resize's frame bit for bit; the engine uses it for these sizes."""
    import cv2

    from envfleet.atari.engine import _resize_tables
    from envfleet.atari.kernels import kernels

    tables = _resize_tables(210, 160, height, width, cv2)
    assert tables[0].size  # the compiled path applies and agreed with cv2 on its samples
    rng = np.random.default_rng(height * width)
    scratch = np.zeros((3, 160), np.float32)
    ours = np.zeros(height * width, np.uint8)
    for frame in rng.integers(0, 256, (20, 210, 160), dtype=np.uint8):
        frame[rng.random(frame.shape) < 0.5] = rng.integers(0, 256)  # flat areas too
        kernels().resize(frame.reshape(-1), tables, scratch, ours)
        theirs = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(ours.reshape(height, width), theirs)


@pytest.mark.slow
def test_every_installed_game():
    """Every ALE/<Game>-v5 ale-py installs, briefly (one env, episodes cut at 80 frames so
    that autoresets happen; 80 frames: some games start truncated); the games whose action
    0 is not NOOP without no-op starts (~1.5 min on 2 busy cores)."""
    from envfleet.atari import installed_games

    games = installed_games()
    assert len(games) >= 100
    for env_id in games:
        noops = {"noop_max": 0} if env_id in ("ALE/Backgammon-v5",
                                              "ALE/VideoCheckers-v5") else {}
        lockstep(env_id, 1, 30, max_num_frames_per_episode=80, **noops)


@pytest.mark.parametrize("frame_limit", [201, 202, 203, 204])
def test_episodes_cut_on_each_frame_of_a_step(frame_limit):
    """Episodes cut by ALE's frame limit on each frame of a step: one cut on the step's last
    frame returns the pool of the previous pooled frame and the step's second-to-last frame
    (what the wrapper's buffers hold then), not of two fresh frames: with 201 frames, the
    ball's previous second-to-last position stays in the final frame."""
    assert lockstep("ALE/Breakout-v5", 2, 120, max_num_frames_per_episode=frame_limit) >= 4
