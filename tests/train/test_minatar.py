"""``envfleet eval --video`` on MinAtar's native games: a video of a game in the reference
colours, at a size one can watch."""

from __future__ import annotations

import math

import numpy as np

import envfleet
from envfleet.cli import main
from envfleet.train.cli import MIN_VIDEO_SIDE, video_frame

GAMES = ["MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1"]
TINY = ["--num-envs", "4", "--num-steps", "16", "--total-steps", "128", "--eval-every", "64",
        "--eval-episodes", "2", "--quiet"]


def test_eval_video_shows_the_game_in_the_reference_colours_at_a_visible_size(tmp_path, capsys):
    import imageio.v2 as imageio

    env_id, policy, video = GAMES[0], tmp_path / "policy.pt", tmp_path / "game.gif"
    assert main(["train", env_id, *TINY, "--save", str(policy)]) == 0
    assert main(["eval", env_id, "--load", str(policy), "--episodes", "2", "--seed", "3",
                 "--video", str(video)]) == 0
    assert f"video: {video}" in capsys.readouterr().out
    frames = [frame for frame in imageio.get_reader(video)]
    env = envfleet.make(env_id, 1, seed=3)
    env.reset(seed=3)
    reference = np.asarray(env.render()[0])  # (10, 10, 3) floats: the reference's colours
    env.close()
    side = reference.shape[0] * math.ceil(MIN_VIDEO_SIDE / reference.shape[0])
    assert frames[0].shape[:2] == (side, side) >= (MIN_VIDEO_SIDE, MIN_VIDEO_SIDE)
    np.testing.assert_array_equal(frames[0][..., :3], video_frame(reference))
    # each grid cell is a block of one colour: the reference's, as 8-bit RGB
    block = side // reference.shape[0]
    np.testing.assert_array_equal(frames[0][::block, ::block, :3],
                                  np.rint(reference * 255).astype(np.uint8))


def test_video_frame_leaves_large_uint8_frames_alone():
    frame = np.arange(400 * 600 * 3, dtype=np.uint8).reshape(400, 600, 3)
    assert np.array_equal(video_frame(frame), frame)
    assert video_frame(np.ones((10, 20, 3))).shape == (160, 320, 3)
