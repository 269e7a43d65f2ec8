"""``envfleet eval ENV --load PATH``: a saved policy played on a batched env (every env's first
episode at once; the mean return, Chess-v0's win / draw / loss rates) and, with ``--video``,
one episode recorded frame by frame. Torch is imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from envfleet.command import CommandError, check_output
from envfleet.train.checks import check_env
from envfleet.train.presets import env_name, preset, resolve_backend
from envfleet.train.report import outcomes


def run_eval(options: argparse.Namespace) -> int:
    """Play a saved policy greedily on a batched env; print the mean return."""
    check_env(options.env, options.backend)
    if not options.load.exists():
        raise CommandError(f"no saved policy at {options.load}")
    for option, path in (("--json", options.json), ("--video", options.video)):
        if path is not None:  # before the episodes are played
            check_output(path, option)
    saved = _read_policy(options)
    if options.video:
        _check_video(options.env, options.video)
    kwargs = dict(preset(options.env).get("env_kwargs", {}))
    for key in ("opponent", "agent_color"):
        if getattr(options, key) is not None:
            kwargs[key] = getattr(options, key)
    agent, returns, seconds = play(options, saved, kwargs)
    out = {"env": options.env, "policy": "sampled" if options.sample else "greedy",
           "episodes": len(returns), "mean_return": float(returns.mean()),
           "std_return": float(returns.std()), "min_return": float(returns.min()),
           "max_return": float(returns.max()), "eval_s": seconds}
    line = (f"{options.env} ({out['policy']}): mean return {out['mean_return']:.2f} ± "
            f"{out['std_return']:.2f} over {out['episodes']} episodes (min "
            f"{out['min_return']:g}, max {out['max_return']:g})")
    if env_name(options.env) == "Chess-v0":
        out.update(outcomes(returns))
        line += (f"; win {out['win_rate']:.3f} draw {out['draw_rate']:.3f} "
                 f"loss {out['loss_rate']:.3f}")
    print(line)
    if options.video:
        steps, total = record_episode(options, agent, kwargs)
        out["video"] = {"path": str(options.video), "steps": steps, "return": total}
        print(f"video: {options.video} ({steps} steps, return {total:g})")
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _read_policy(options: argparse.Namespace) -> dict[str, Any]:
    """The checkpoint at ``options.load``, refused (before anything runs) when unreadable or
    trained on another env than ``options.env``."""
    from envfleet.train.checkpoint import read_checkpoint

    try:
        saved = read_checkpoint(str(options.load))
    except ValueError as error:
        raise CommandError(str(error)) from None
    if env_name(saved["args"]["env_id"]) != env_name(options.env):
        raise CommandError(f"{options.load} was trained on {saved['args']['env_id']}, not "
                           f"{options.env}: evaluate it with envfleet eval "
                           f"{saved['args']['env_id']} --load {options.load}")
    return saved


def play(options: argparse.Namespace, saved: dict[str, Any], env_kwargs: dict[str, Any]
         ) -> tuple[Any, Any, float]:
    """The first episode of ``--episodes`` envs (100; Chess-v0: 1000) played at once by the
    ``saved`` policy, greedy unless ``--sample``: (the agent, the returns, the seconds)."""
    import numpy as np
    import torch

    import envfleet
    from envfleet.train.checkpoint import agent_from
    from envfleet.train.envs import box_bounds
    from envfleet.train.evaluation import evaluate

    episodes = options.episodes or (1000 if env_name(options.env) == "Chess-v0" else 100)
    torch.set_num_threads(1)
    try:
        env = envfleet.make(options.env, episodes, backend=options.backend, seed=options.seed,
                            copy=False, **env_kwargs)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError, ValueError) as error:
        raise CommandError(str(error)) from None
    try:
        agent = agent_from(saved, env)
    except ValueError as error:
        env.close()
        raise CommandError(f"{options.load}: {error}") from None
    obs, _ = env.reset(seed=options.seed)
    cpu = torch.device("cpu")
    result = evaluate(env, agent, options.seed, cpu, isinstance(obs, torch.Tensor),
                      box_bounds(env.single_action_space, cpu), greedy=not options.sample)
    env.close()
    return agent, np.asarray(result.returns), result.seconds


VIDEO_EXTRA = "pip install 'envfleet[video]'"


def _check_video(env_id: str, path: Path) -> None:
    """Refuse ``--video`` up front when the env cannot render or the writer is missing."""
    from envfleet.registry import NATIVE_ENVS, _native_name

    native = _native_name(env_id)
    if native is not None and NATIVE_ENVS[native].renderer is None:
        raise CommandError(f"{native} has no renderer yet: --video is not available for it")
    try:
        import imageio  # noqa: F401
        if path.suffix.lower() != ".gif":
            import imageio_ffmpeg  # noqa: F401
    except ImportError as error:
        raise CommandError(f"--video needs {error.name} ({VIDEO_EXTRA})") from None


def record_episode(options: argparse.Namespace, agent: Any, env_kwargs: dict[str, Any]
                   ) -> tuple[int, float]:
    """Play one episode on env 0 (greedy unless ``--sample``), writing each frame to
    ``options.video`` as it is drawn; (steps, return)."""
    import imageio.v2 as imageio
    import torch

    import envfleet
    from envfleet.train.envs import action_mask, as_tensor, box_bounds, env_actions

    backend = resolve_backend(options.env, options.backend)
    kwargs = dict(env_kwargs)
    if backend in envfleet.registry.EXECUTOR_BACKENDS:
        backend = "serial"  # one env: no worker process needed
        kwargs["render_mode"] = "rgb_array"  # Gymnasium's envs draw only when asked to
    device = torch.device("cpu")
    env = envfleet.make(options.env, 1, backend=backend, seed=options.seed, **kwargs)
    fps = env.metadata.get("render_fps") or 30
    options.video.parent.mkdir(parents=True, exist_ok=True)
    if options.video.suffix.lower() == ".gif":
        writer = imageio.get_writer(options.video, mode="I", duration=1000 / fps, loop=0)
    else:  # even frame sizes for H.264's 4:2:0 (imageio resizes odd ones)
        writer = imageio.get_writer(options.video, fps=fps, macro_block_size=2)
    bounds = box_bounds(env.single_action_space, device)
    steps, total = 0, 0.0
    try:
        obs, info = env.reset(seed=options.seed)
        torch_actions = isinstance(obs, torch.Tensor)
        writer.append_data(video_frame(env.render()[0]))
        with torch.inference_mode():
            while True:
                x = agent.features(as_tensor(obs, device))
                mask = action_mask(info, device)
                action = agent.sample(x, mask) if options.sample else agent.greedy(x, mask)
                obs, reward, terminated, truncated, info = env.step(
                    env_actions(action, bounds, torch_actions))
                steps += 1
                total += float(reward[0])
                writer.append_data(video_frame(env.render()[0]))  # NEXT_STEP: the final state
                if bool(terminated[0]) or bool(truncated[0]):
                    break
    finally:
        writer.close()
        env.close()
    return steps, total


#: a video frame's shortest side at least (smaller frames are scaled up, whole cells)
MIN_VIDEO_SIDE = 160


def video_frame(frame: Any) -> Any:
    """An ``rgb_array`` frame as a video takes it: uint8 (floats in [0, 1], as MinAtar's
    reference colours are, times 255), and a small one (MinAtar's 10 x 10 grid) scaled up by a
    whole factor, each cell a block of pixels, to ``MIN_VIDEO_SIDE`` or more."""
    import numpy as np

    frame = np.asarray(frame)
    if np.issubdtype(frame.dtype, np.floating):
        frame = np.rint(np.clip(frame, 0.0, 1.0) * 255)
    frame = frame.astype(np.uint8, copy=False)
    scale = -(-MIN_VIDEO_SIDE // min(frame.shape[:2]))  # ceil
    if scale > 1:
        frame = frame.repeat(scale, axis=0).repeat(scale, axis=1)
    return frame
