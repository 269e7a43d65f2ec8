"""``envfleet train ENV`` and ``envfleet eval ENV --load PATH``: PPO from the command line.

The options here; the rest in rooms beside it: ``presets`` (per-env settings: ``envfleet train
CartPole-v1`` solves with no flags; any other id gets CleanRL's PPO defaults and Gymnasium's
``reward_threshold`` as its target), ``checks`` (what is refused before anything starts),
``report`` (what a run shows and writes) and ``play`` (``eval``: a saved policy's episodes and
video). Torch is imported only when a command runs (``envfleet --help`` and ``envfleet bench``
stay light).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from envfleet.command import (
    CommandError,
    check_output,
    fraction,
    non_negative_float,
    positive_float,
    positive_int,
    seed,
)
from envfleet.train.args import Args, args_defaults
from envfleet.train.checks import check_device, check_env, check_seed, check_workers
from envfleet.train.play import run_eval
from envfleet.train.presets import (
    PRESETS,
    args_from,
    build_settings,
    minibatch_sizes,
    preset_defaults,
    show,
)
from envfleet.train.report import (
    ProgressLog,
    check_plot_format,
    header,
    last_lines,
    no_interrupt,
    write_outputs,
)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options (defaults: the env's preset, shown per preset)."""
    parser.epilog = ("Each env id has a preset (" + ", ".join(PRESETS) + ": tuned, rl-zoo's "
                     "where it has them; other ids: CleanRL's PPO defaults with Gymnasium's "
                     "reward_threshold as the target). Box actions get a Gaussian policy "
                     "(clipped into the Box when stepping), Discrete ones a categorical; "
                     "an option given overrides it. Minibatches keep the preset's size as "
                     "--num-envs or --num-steps change (" + minibatch_sizes() + " samples), "
                     "so more envs mean more minibatches, not larger ones; then epochs drop "
                     "(to 2 at least) to keep about the preset's gradient steps per rollout.")
    parser.add_argument("env", metavar="ENV", help="env id (native, e.g. CartPole-v1, or any "
                                                  "Gymnasium id with an executor backend)")
    parser.add_argument("--backend", default="auto",
                        help="numba, torch, cuda (native ids); serial, subprocess, pool, ray "
                             "(any id; ray: the evaluation env runs in this process). Default: "
                             "numba for native ids, pool otherwise")
    parser.add_argument("--num-workers", type=positive_int, metavar="N",
                        help="pool, ray: worker processes or Ray actors of the training env "
                             "(default: pool one per usable core; ray the cluster's CPUs / "
                             "--cpus-per-worker)")
    parser.add_argument("--cpus-per-worker", type=positive_float, metavar="CPUS",
                        help="ray: CPUs each actor asks Ray for (default: 1; 0.5 shares a "
                             "CPU between two actors)")
    parser.add_argument("--num-envs", type=positive_int,
                        help=f"envs in the training batch ({preset_defaults('num_envs')})")
    parser.add_argument("--num-steps", type=positive_int,
                        help=f"steps per env per rollout ({preset_defaults('num_steps')})")
    parser.add_argument("--num-minibatches", type=positive_int,
                        help="minibatches per epoch (default: num_envs x num_steps / the "
                             "preset's minibatch size, see below: "
                             + preset_defaults("num_minibatches").removeprefix("default: ")
                             + " at the preset's num_envs and num_steps)")
    parser.add_argument("--update-epochs", type=positive_int,
                        help="passes over each rollout (default: fewer as minibatches grow, "
                             "see below: "
                             + preset_defaults("update_epochs").removeprefix("default: ")
                             + " at the preset's num_envs and num_steps)")
    parser.add_argument("--lr", "--learning-rate", dest="learning_rate", type=positive_float,
                        help=f"Adam's step size ({preset_defaults('learning_rate')})")
    parser.add_argument("--gamma", type=fraction,
                        help=f"discount ({preset_defaults('gamma')})")
    parser.add_argument("--gae-lambda", type=fraction,
                        help=f"GAE's lambda ({preset_defaults('gae_lambda')})")
    parser.add_argument("--ent-coef", type=non_negative_float,
                        help=f"entropy bonus ({preset_defaults('ent_coef')})")
    parser.add_argument("--clip-coef", type=positive_float,
                        help=f"policy ratio clip ({preset_defaults('clip_coef')})")
    parser.add_argument("--total-steps", type=positive_int,
                        help=f"env steps budget ({preset_defaults('total_steps')})")
    parser.add_argument("--seed", type=seed, default=1, help="seed (default: %(default)s)")
    parser.add_argument("--target-return", type=float,
                        help="stop once a greedy evaluation reaches this mean return ("
                             + ", ".join(f"{name} {show(values.get('target_return'))}"
                                         for name, values in PRESETS.items())
                             + ", other ids Gymnasium's reward_threshold)")
    parser.add_argument("--keep-going", action="store_true",
                        help="keep training after the target is reached")
    parser.add_argument("--time-limit", type=positive_float, metavar="SEC",
                        help="stop after SEC seconds of training, evaluations included "
                             f"({preset_defaults('time_limit')})")
    parser.add_argument("--eval-every", type=int, metavar="STEPS",
                        help="env steps between greedy evaluations, 0: only at the end "
                             f"({preset_defaults('eval_every')})")
    parser.add_argument("--eval-episodes", type=positive_int,
                        help="episodes per evaluation, played at once "
                             f"({preset_defaults('eval_episodes')})")
    parser.add_argument("--torch-threads", type=positive_int,
                        help="torch intra-op threads, at most the usable cores "
                             f"({preset_defaults('torch_threads')})")
    parser.add_argument("--device", help="torch device of the agent (default: cpu)")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the run's summary here")
    parser.add_argument("--plot", type=Path, metavar="PATH",
                        help="learning-curve PNG (default: next to --json, if given)")
    parser.add_argument("--save", type=Path, metavar="PATH", help="save the trained policy here")
    parser.add_argument("--no-ideal", action="store_true",
                        help="skip the ideal loop (the same work with an env that costs "
                             "nothing, timed beside the real iterations; a short run tops it "
                             "up after training for at most "
                             f"{args_defaults()['ideal_top_up_s']:g} s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    parser.set_defaults(func=run_train)


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``eval`` subcommand's options."""
    parser.add_argument("env", metavar="ENV", help="env id the policy was trained on")
    parser.add_argument("--load", type=Path, required=True, metavar="PATH",
                        help="a policy saved by envfleet train --save")
    parser.add_argument("--backend", default="auto", help="envfleet backend (default: auto)")
    parser.add_argument("--episodes", type=positive_int, default=None,
                        help="episodes, played at once (default: 100; Chess-v0: 1000)")
    parser.add_argument("--seed", type=seed, default=0, help="seed (default: %(default)s)")
    parser.add_argument("--sample", action="store_true",
                        help="sample actions from the policy instead of playing greedily")
    parser.add_argument("--opponent", help="Chess-v0's opponent (default: random)")
    parser.add_argument("--agent-color", choices=("white", "black", "alternate"),
                        help="Chess-v0: the colour the agent plays (default: white)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the result here")
    parser.add_argument("--video", type=Path, metavar="PATH",
                        help="also record one episode (env 0, seeded --seed) to PATH: .mp4 "
                             "(or any format ffmpeg writes) or .gif; needs envfleet[video]")
    parser.set_defaults(func=run_eval)


def build_args(options: argparse.Namespace) -> Args:
    """``Args`` from the preset of ``options.env`` and the flags given."""
    return args_from(build_settings(options))


def run_train(options: argparse.Namespace) -> int:
    """Train, print progress and the summary; write JSON, plot and policy when asked.

    Every output path is checked before training starts. Where one fails at the end anyway, the
    output goes to a new file next to it (else in the current or the temp directory), said on
    stderr, and the exit status is 1. Ctrl-C stops training at once: the policy and the summary
    so far are written (to the asked paths, else new files in the current directory), said on
    stderr, and the exit status is 130.
    """
    check_env(options.env, options.backend)
    check_workers(options)
    plot_path = options.plot or (options.json.with_suffix(".png") if options.json else None)
    for option, path in (("--save", options.save), ("--json", options.json),
                         ("--plot" if options.plot else "--plot (next to --json)", plot_path)):
        if path is not None:
            check_output(path, option)
    if options.plot is not None:
        check_plot_format(options.plot)
    # numba's OpenMP threads (an env with num_threads > 1) spin after each parallel step and
    # starve torch on a small machine; passive waiting costs a one-thread torch nothing (set
    # before torch loads). Torch's own threads must spin: woken per op, 2 of them made MinAtar's
    # learner 1.3x slower than 1 thread instead of 1.6x faster
    from envfleet.machine import background_load, capped_threads, cpu_seconds

    settings = build_settings(options)
    if capped_threads(settings["torch_threads"]) == 1:  # what ppo.train sets
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.console import Console

    import envfleet
    from envfleet.train import ppo
    from envfleet.train.envs import EnvBuildError, UnsupportedSpaceError

    check_device(options.device)
    args = args_from(settings)
    check_seed(args)
    console = Console(quiet=options.quiet, highlight=False)
    for line in [*header(args), *(f"note: {note}" for note in settings.get("notes", ()))]:
        console.print(line, soft_wrap=True)
    progress = ProgressLog(args, console, options.quiet)
    cpu_before = cpu_seconds()
    t0 = time.perf_counter()
    try:
        with progress:
            agent, summary = ppo.train(args, progress.on_progress, on_top_up=progress.on_top_up)
    except (envfleet.UnknownEnvError, envfleet.BackendUnavailableError,
            UnsupportedSpaceError, EnvBuildError) as error:
        raise CommandError(str(error)) from None
    except (ValueError, TypeError) as error:
        if "make" in str(error) or "backend" in str(error) or "option" in str(error):
            raise CommandError(str(error)) from None
        raise
    except KeyboardInterrupt:  # ppo.train keeps what it trained; before that, nothing to keep
        print("envfleet train: interrupted before training started: nothing to save",
              file=sys.stderr)
        return 130
    with no_interrupt():  # a second Ctrl-C must not lose what the first one kept
        load = background_load(cpu_before, cpu_seconds(), time.perf_counter() - t0)
        result = last_lines(args, summary, console, load)
        return write_outputs(options, args, agent, summary, result, console, plot_path)
