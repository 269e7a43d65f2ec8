"""What ``envfleet train`` and ``eval`` refuse before anything is printed or started, each a
``CommandError`` naming why: an env this build cannot make (an unknown id or backend, a missing
package), executor options on a backend without workers, a torch device this machine lacks,
a seed whose envs would pass uint64. Torch is imported only to check a device or a seed.
"""

from __future__ import annotations

import argparse

from envfleet.command import CommandError
from envfleet.train.args import Args
from envfleet.train.presets import resolve_backend


def check_env(env_id: str, backend: str) -> None:
    """Refuse an env this branch cannot build, before anything is printed and before torch and
    the envs start: an id neither envfleet nor Gymnasium knows (naming the closest ones), an
    unknown backend, a Gymnasium env whose package is missing."""
    import envfleet
    from envfleet.native.build import missing_backend
    from envfleet.registry import NATIVE_ENVS, _gym_spec, _native_name

    try:
        name = _native_name(env_id)  # "module:Id" imports the module first
        native = name is not None
        if not native:
            _gym_spec(env_id)
    except envfleet.UnknownEnvError as error:
        if env_id.rpartition(":")[2].removeprefix("envfleet/") == "Chess-v0" \
                and "Chess-v0" not in NATIVE_ENVS:
            raise CommandError("Chess-v0 is not available in this build of envfleet yet (it "
                               "lands with the Chess-v0 issue); train CartPole-v1 or a "
                               "Gymnasium id meanwhile") from None
        raise CommandError(str(error)) from None
    if backend != "auto" and backend not in envfleet.registry.ALL_BACKENDS:
        raise CommandError(f"unknown backend {backend!r}; valid backends: "
                           f"{', '.join(envfleet.registry.ALL_BACKENDS)}")
    if not native and backend in envfleet.registry.NATIVE_BACKENDS:
        raise CommandError(f"backend {backend!r} runs envfleet's native envs ("
                           f"{', '.join(NATIVE_ENVS)}); run {env_id} with backend 'serial', "
                           f"'subprocess' or 'pool'")
    if native and backend in envfleet.registry.NATIVE_BACKENDS:  # make()'s own refusals
        why = missing_backend(NATIVE_ENVS[name], backend)
        reason = envfleet.registry.backend_status(backend)
        if why is not None or reason is not None:
            raise CommandError(why or f"backend {backend!r} cannot run here: {reason}")
    if resolve_backend(env_id, backend) in envfleet.registry.EXECUTOR_BACKENDS:
        missing = missing_dependency(env_id)
        if missing is not None:
            raise CommandError(missing)


#: the backends each executor option of ``train`` applies to
WORKER_OPTIONS = {"--num-workers": ("num_workers", ("pool", "ray")),
                  "--cpus-per-worker": ("cpus_per_worker", ("ray",))}


def check_workers(options: argparse.Namespace) -> None:
    """Refuse ``--num-workers`` / ``--cpus-per-worker`` on a backend without such workers."""
    backend = resolve_backend(options.env, options.backend)
    for option, (key, backends) in WORKER_OPTIONS.items():
        if getattr(options, key, None) is not None and backend not in backends:
            raise CommandError(f"{option} applies to backend {' or '.join(backends)}, not "
                               f"{backend}")


def missing_dependency(env_id: str) -> str | None:
    """Why Gymnasium's ``env_id`` cannot be built here (its entry point imports a package that
    is not installed), found in this process before any worker starts; None when it imports
    (an unknown id is left to ``make``, which names the closest ones)."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    from envfleet.registry import _gym_spec  # make()'s own lookup

    try:
        spec = _gym_spec(env_id)
    except Exception:
        return None
    if not isinstance(spec.entry_point, str):
        return None
    try:
        load_env_creator(spec.entry_point)
    except gymnasium.error.DependencyNotInstalled as error:  # Gymnasium's names the extra
        return f"{env_id} needs a package that is not installed: {error}"
    except ModuleNotFoundError as error:
        return (f"{env_id} needs the module {error.name!r}, which is not installed (its entry "
                f"point {spec.entry_point} imports it): install the package that provides it")
    return None


def check_device(device: str | None) -> None:
    """Refuse a torch device this machine does not have, naming the ones it has."""
    if device is None:
        return
    import torch

    available = ["cpu"]
    if torch.cuda.is_available():
        available += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        available.append("mps")
    try:
        wanted = torch.device(device)
    except (RuntimeError, ValueError) as error:
        first = next(iter(str(error).splitlines()), "")
        raise CommandError(f"--device {device!r} is not a torch device ({first}); available "
                           f"here: {', '.join(available)}") from None
    if wanted.type == "cpu":
        return
    if wanted.type == "mps":
        present = torch.backends.mps.is_available()
    else:  # torch.cuda, torch.xpu, ...: is_available() and device_count()
        module = getattr(torch, wanted.type, None)
        present = (hasattr(module, "is_available") and module.is_available()
                   and (wanted.index is None or wanted.index < module.device_count()))
    if not present:
        raise CommandError(f"--device {device} is not available here; available: "
                           f"{', '.join(available)}")


def check_seed(args: Args) -> None:
    """Refuse a seed whose envs would pass uint64: the training envs are seeded ``seed + i``,
    the evaluation envs ``seed + EVAL_SEED_OFFSET + i``."""
    from envfleet.train.evaluation import EVAL_SEED_OFFSET

    highest = max(args.num_envs, EVAL_SEED_OFFSET + args.eval_episodes)
    if args.seed + highest > 2**64:
        raise CommandError(f"--seed {args.seed} is too large: the training envs are seeded seed + "
                           f"i and the evaluation envs seed + {EVAL_SEED_OFFSET} + i, which "
                           f"must stay below 2**64 (seeds are uint64); use at most "
                           f"{2**64 - highest}")
