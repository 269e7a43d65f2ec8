"""The GPU check's measurements: per-call time of the ``cuda`` and ``torch`` backends on a GPU,
rollouts, and gymnax / pgx on the same GPU as peers, written as JSON lines and Markdown.

``python -m benchmarks.gpu --out DIR [--parts cartpole,classic,chess,rollout,gymnax,pgx,fma]``
(``scripts/gpu_check.sh`` runs it with the cuda tests, the tpb study and the threads sweep).
Each call is one step of every env, actions pre-generated on the GPU, the device synchronised
after the timed calls (as ``jax.block_until_ready`` for the peers); every row names the card.
A part that fails or runs out of its time writes an ``error`` row and the others go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS = ("cartpole", "rollout", "chess", "gymnax", "classic", "pgx", "fma")
#: pgx compiles for minutes, fma (FMA contraction on and off) is a study: asked for by name
DEFAULT_PARTS = PARTS[:-2]
#: each part's time budget in seconds (builds and compiles included)
PART_SECONDS = {"cartpole": 60, "classic": 60, "chess": 160, "rollout": 55, "gymnax": 40,
                "pgx": 45, "fma": 90}
CARTPOLE_SIZES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
CLASSIC = ("Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")
CLASSIC_SIZES = (1_000, 100_000, 1_000_000)
#: the fma part: CartPole envs, and the steps after which float64 state is compared with numba's
FMA_SIZE, FMA_STEPS = 1_000_000, 30
CHESS_SIZES = (1_024, 16_384, 131_072, 1_048_576)
#: Chess-v0's (observation, packed) variants, in order (a variant compiles its own kernels):
#: the default, then ``packed=True`` (mask as bits; planes as bitboards), then unpacked planes
CHESS_VARIANTS = (("compact", False), ("compact", True), ("planes", True), ("planes", False))


class Check:
    """Rows to a JSON-lines file as they come; each part within its own time budget."""

    def __init__(self, out: Path, scale: float) -> None:
        import torch

        self.scale = scale
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "gpu-check.jsonl"
        self.card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        self.rows: list[dict[str, Any]] = []
        self.deadline = 0.0

    def start(self, part: str) -> None:
        self.deadline = time.perf_counter() + PART_SECONDS.get(part, 60) * self.scale
        print(f"--- {part}", flush=True)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def emit(self, **row: Any) -> None:
        row = {"card": self.card, **row}
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


#: where actions are made: the GPU, or the CPU in a dry run (``--dry``: the cuda backend under
#: Numba's simulator, tiny sizes; it checks the script, not the GPU)
DEVICE = "cuda"
DRY = False


def sync() -> None:
    """Wait for the GPU (nothing to wait for in a dry run)."""
    if not DRY:
        import torch

        torch.cuda.synchronize()


def sized(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return (8,) if DRY else sizes


def per_call(call: Callable[[], Any], sync: Callable[[], Any], min_s: float = 0.3,
             max_calls: int = 3000) -> float:
    """Seconds per call: two warm-up calls, then calls until ``min_s`` has passed, the device
    synchronised before the clock stops."""
    if DRY:
        min_s, max_calls = 0.0, 2
    call()
    call()
    sync()
    calls, t0 = 0, time.perf_counter()
    while calls < max_calls:
        call()
        calls += 1
        if calls % 16 == 0 or calls < 16:
            sync()
            if time.perf_counter() - t0 >= min_s:
                break
    sync()
    return (time.perf_counter() - t0) / calls


def captured(env: Any, what: str) -> bool:
    """Whether ``env``'s engine replays a captured graph for ``what`` (the step, or a rollout),
    rather than launching it."""
    replay = getattr(env.engine, "replay", None)
    return replay is not None and replay.captured(what)


def _release() -> None:
    if not DRY:
        import torch

        torch.cuda.empty_cache()


def _actions(env: Any, n: int, count: int = 4) -> list[Any]:
    import torch

    space = env.single_action_space
    if hasattr(space, "n"):
        return [torch.randint(0, int(space.n), (n,), device=DEVICE) for _ in range(count)]
    low, high = float(space.low.ravel()[0]), float(space.high.ravel()[0])
    return [torch.rand((n, *space.shape), device=DEVICE) * (high - low) + low
            for _ in range(count)]


def step_sweep(check: Check, part: str, env_id: str, sizes: tuple[int, ...]) -> None:
    """Per-call step time of cuda (graphs on/off, copy on/off) and torch on the GPU (graphs
    on/off); for the fma part, cuda with FMA contraction on and off (``ENVFLEET_CUDA_FMA``)."""

    import envfleet

    variants = [("cuda", {"copy": False}, "1"), ("cuda", {"copy": True}, "1"),
                ("cuda", {"copy": False}, "0"), ("torch", {"device": DEVICE, "copy": False}, "1"),
                ("torch", {"device": DEVICE, "copy": False}, "0")]
    if part == "fma":
        variants = [("cuda", {"copy": False}, "1", "1"), ("cuda", {"copy": False}, "1", "0")]
    elif part != "cartpole":  # the other families: the default path and the torch backend
        variants = [variants[0], variants[3]]
    for backend, options, graphs, *fma in variants:
        for n in sized(sizes):
            if check.left() < 5:
                check.emit(part=part, env=env_id, backend=backend, n=n, error="part's time up")
                break
            label = dict(part=part, env=env_id, backend=backend, n=n,
                         copy=options["copy"], graphs=False)
            os.environ["ENVFLEET_CUDA_GRAPHS"] = graphs
            if fma:
                label["fma"] = fma[0] != "0"
                os.environ["ENVFLEET_CUDA_FMA"] = fma[0]
            try:
                t0 = time.perf_counter()
                env = envfleet.make(env_id, n, backend=backend, seed=0, **options)
                env.reset(seed=0)
                build = time.perf_counter() - t0
                acts, k = _actions(env, n), [0]

                def call(env: Any = env, acts: list = acts, k: list = k) -> None:
                    env.step(acts[k[0] % 4])
                    k[0] += 1

                seconds = per_call(call, sync)
                label["graphs"] = captured(env, "step")
                check.emit(**label, us_per_call=seconds * 1e6, steps_per_s=n / seconds,
                           build_s=build)
                env.close()
                del env
                _release()
            except Exception as error:  # a failing point is a row, the sweep goes on
                check.emit(**label, error=repr(error)[:400])
    os.environ["ENVFLEET_CUDA_GRAPHS"] = "1"
    os.environ.pop("ENVFLEET_CUDA_FMA", None)


def max_ulp(a: Any, b: Any) -> int:
    """The largest distance between float64 arrays ``a`` and ``b`` in units in the last place
    (as ``np.testing.assert_array_max_ulp`` counts: the gap between their ordered bit patterns)."""
    import numpy as np

    def ordered(x: Any) -> Any:
        bits = np.ascontiguousarray(x, dtype=np.float64).view(np.int64)
        return np.where(bits < 0, np.iinfo(np.int64).min - bits, bits)

    return int(np.abs(ordered(a) - ordered(b)).max(initial=0))


def fma_study(check: Check) -> None:
    """FMA contraction on and off (``ENVFLEET_CUDA_FMA``) on CartPole: cuda's per call at
    ``FMA_SIZE`` envs, and the largest ulp distance of its float64 state from numba's (itself
    Gymnasium's bit for bit) after ``FMA_STEPS`` steps of the same random actions."""
    import numpy as np

    import envfleet

    step_sweep(check, "fma", "CartPole-v1", (FMA_SIZE,))
    n = sized((FMA_SIZE,))[0]
    for fma in ("1", "0"):
        label = dict(part="fma", env="CartPole-v1", backend="cuda", n=n, steps=FMA_STEPS,
                     fma=fma != "0")
        if check.left() < 10:
            check.emit(**label, error="time up")
            return
        os.environ["ENVFLEET_CUDA_FMA"] = fma
        try:
            envs = [envfleet.make("CartPole-v1", n, backend=backend, seed=0)
                    for backend in ("cuda", "numba")]
            obs = [env.reset(seed=0)[0] for env in envs]
            actions = np.random.default_rng(0).integers(0, 2, (FMA_STEPS, n))
            for t in range(FMA_STEPS):
                obs = [env.step(actions[t])[0] for env in envs]
            cuda_env, numba_env = envs
            states = {name: max_ulp(_host(c), r) for name, c, r in
                      zip(numba_env.state._fields, cuda_env.state, numba_env.state, strict=True)
                      if np.asarray(r).dtype == np.float64}
            check.emit(**label, max_ulp=max(states.values()), max_ulp_by_field=states,
                       obs_equal=bool(np.array_equal(_host(obs[0]), obs[1])))
            for env in envs:
                env.close()
            del envs
            _release()
        except Exception as error:
            check.emit(**label, error=repr(error)[:400])
    os.environ.pop("ENVFLEET_CUDA_FMA", None)


def _host(x: Any) -> Any:
    """A NumPy copy of a backend output (a torch tensor on any device, or an array)."""
    import numpy as np

    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def chess(check: Check) -> None:
    """Chess-v0 on cuda: random legal moves (drawn on the device) then the step, per call; for
    each ``CHESS_VARIANTS`` entry (``packed=True``: the mask as bits, the planes as bitboards),
    with ``copy=False`` (the buffers) and ``copy=True`` (each step's obs and mask cloned, as a
    consumer that keeps them pays)."""

    import envfleet

    for observation, packed in CHESS_VARIANTS:
        for n in sized(CHESS_SIZES):
            for copy in (False, True):
                label = dict(part="chess", env="Chess-v0", backend="cuda", n=n,
                             observation=observation, packed=packed, copy=copy)
                if check.left() < 10:
                    check.emit(**label, error="time up")
                    break
                try:
                    t0 = time.perf_counter()
                    env = envfleet.make("Chess-v0", n, backend="cuda", seed=0, copy=copy,
                                        observation=observation, packed=packed)
                    env.reset(seed=0)
                    build = time.perf_counter() - t0
                    step = per_call(lambda env=env: env.step(env.random_legal_actions()),
                                    sync, min_s=0.5, max_calls=400)
                    draw = {} if copy else {"draw_us": 1e6 * per_call(
                        lambda env=env: env.random_legal_actions(), sync, min_s=0.2,
                        max_calls=400)}
                    space = env.single_observation_space
                    obs_bytes = space.dtype.itemsize * math.prod(space.shape)
                    check.emit(**label, us_per_call=step * 1e6, plies_per_s=n / step,
                               **draw, build_s=build,
                               mask_bytes=int(n * (584 if packed else 4672)),
                               obs_bytes=n * obs_bytes)
                    env.close()
                    del env
                    _release()
                except Exception as error:
                    check.emit(**label, error=repr(error)[:400])
            else:
                continue
            break  # time up


def rollouts(check: Check, n: int = 1_000_000, steps: int = 128) -> None:
    """CartPole rollouts on cuda (then on torch, unrecorded): env only (a (T, N) action batch)
    and with a 2x64 MLP policy sampling its actions on the device; steps/s over the whole
    rollout, graphs replayed."""
    import torch

    import envfleet

    n, steps = (8, 4) if DRY else (n, steps)
    policies = (("env-only", None), ("mlp-2x64", 64))
    runs = [("cuda", {}, label, hidden, record)
            for label, hidden in policies for record in (False, True)]
    runs += [("torch", {"device": DEVICE}, label, hidden, False) for label, hidden in policies]
    for backend, options, label, hidden, record in runs:
        if check.left() < 10:
            check.emit(part="rollout", backend=backend, policy=label, n=n, error="time up")
            return
        try:
            env = envfleet.make("CartPole-v1", n, backend=backend, seed=0, copy=False,
                                **options)
            env.reset(seed=0)
            if hidden is None:
                policy: Any = torch.randint(0, 2, (steps, n), device=DEVICE)
            else:
                net = torch.nn.Sequential(
                    torch.nn.Linear(4, hidden), torch.nn.Tanh(),
                    torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                    torch.nn.Linear(hidden, 2)).to(DEVICE)

                def policy(obs: Any, net: Any = net) -> Any:
                    logits = net(obs)
                    noise = torch.rand_like(logits).clamp_(1e-9, 1.0)
                    return torch.argmax(logits - torch.log(-torch.log(noise)), dim=1)

            seconds = per_call(lambda env=env, p=policy, r=record: env.rollout(p, steps,
                                                                                record=r),
                               sync, min_s=1.0, max_calls=50)
            check.emit(part="rollout", env="CartPole-v1", backend=backend, policy=label,
                       record=record, n=n, steps=steps, us_per_rollout=seconds * 1e6,
                       steps_per_s=n * steps / seconds,
                       graphs=captured(env, "rollout"))
            env.close()
            del env
            _release()
        except Exception as error:
            check.emit(part="rollout", backend=backend, policy=label, record=record, n=n,
                       error=repr(error)[:400])


def gymnax_peer(check: Check) -> None:
    """gymnax CartPole: jit(vmap(step)) per call, and a jitted scan of 128 steps."""
    import gymnax
    import jax

    env, params = gymnax.make("CartPole-v1")
    vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    vreset = jax.vmap(env.reset, in_axes=(0, None))
    for n in CARTPOLE_SIZES:
        if check.left() < 10:
            check.emit(part="gymnax", n=n, error="time up")
            break
        key = jax.random.PRNGKey(0)
        _, state = jax.jit(vreset)(jax.random.split(key, n), params)
        acts = [jax.random.randint(jax.random.PRNGKey(k), (n,), 0, 2) for k in range(4)]

        @jax.jit
        def step(key: Any, state: Any, a: Any, n: int = n) -> Any:
            key, sub = jax.random.split(key)
            obs, state, r, te, tr, _ = vstep(jax.random.split(sub, n), state, a, params)
            return key, state, obs, r, te, tr

        box = {"key": key, "state": state, "k": 0, "out": None}

        def call(box: dict = box, step: Any = step, acts: list = acts) -> None:
            out = step(box["key"], box["state"], acts[box["k"] % 4])
            box["key"], box["state"], box["out"] = out[0], out[1], out
            box["k"] += 1

        seconds = per_call(call, lambda box=box: jax.block_until_ready(box["out"]))
        check.emit(part="gymnax", env="CartPole-v1", backend="gymnax-jit-vmap", n=n,
                   us_per_call=seconds * 1e6, steps_per_s=n / seconds)
        if n == 1_000_000:
            length = 128
            batch = jax.random.randint(jax.random.PRNGKey(9), (length, n), 0, 2)

            @jax.jit
            def roll(key: Any, state: Any, n: int = n, batch: Any = batch) -> Any:
                def body(carry: Any, a: Any) -> Any:
                    key, state = carry
                    key, sub = jax.random.split(key)
                    _, state, r, te, _, _ = vstep(jax.random.split(sub, n), state, a, params)
                    return (key, state), (r, te)

                (key, state), outs = jax.lax.scan(body, (key, state), batch)
                return key, state, outs

            def call2(box: dict = box, roll: Any = roll) -> None:
                out = roll(box["key"], box["state"])
                box["key"], box["state"], box["out"] = out[0], out[1], out

            seconds = per_call(call2, lambda box=box: jax.block_until_ready(box["out"]),
                               min_s=1.0, max_calls=50)
            check.emit(part="gymnax", env="CartPole-v1", backend="gymnax-scan128", n=n,
                       steps=length, us_per_rollout=seconds * 1e6,
                       steps_per_s=n * length / seconds)


def pgx_peer(check: Check) -> None:
    """pgx chess: jit(vmap(step)) with a random legal action drawn from the mask, per call."""
    import jax
    import jax.numpy as jnp
    import pgx

    env = pgx.make("chess")
    init, step = jax.jit(jax.vmap(env.init)), jax.jit(jax.vmap(env.step))

    @jax.jit
    def act(key: Any, mask: Any) -> Any:
        logits = jnp.where(mask, 0.0, -jnp.inf)
        return jax.random.categorical(key, logits, axis=-1)

    for n in CHESS_SIZES[:3]:
        if check.left() < 20:
            check.emit(part="pgx", n=n, error="time up")
            break
        key = jax.random.PRNGKey(0)
        box = {"state": init(jax.random.split(key, n)), "key": key}

        def call(box: dict = box) -> None:
            box["key"], sub = jax.random.split(box["key"])
            box["state"] = step(box["state"], act(sub, box["state"].legal_action_mask))

        seconds = per_call(call, lambda box=box: jax.block_until_ready(box["state"]),
                           min_s=0.5, max_calls=200)
        check.emit(part="pgx", env="chess", backend="pgx-jit-vmap", n=n,
                   us_per_call=seconds * 1e6, plies_per_s=n / seconds)


def markdown(rows: list[dict[str, Any]], card: str) -> str:
    """The check's tables: per-call time by num_envs for each backend variant, rollouts, peers."""
    lines = [f"# envfleet GPU check on {card}", "",
             f"Host: {platform.node()}, {os.cpu_count()} CPUs. Per call: one step of every env, "
             "device synchronised after the timed calls.", ""]
    steps = [r for r in rows if "us_per_call" in r and r.get("part") != "chess"]
    envs = sorted({r["env"] for r in steps if "env" in r})
    for env in envs:
        mine = [r for r in steps if r.get("env") == env]
        sizes = sorted({r["n"] for r in mine})
        kinds = sorted({_kind(r) for r in mine})
        lines += [f"## {env}: microseconds per call (steps/s)", "",
                  "| backend | " + " | ".join(f"{n:,}" for n in sizes) + " |",
                  "|:---|" + "---:|" * len(sizes)]
        for kind in kinds:
            cells = []
            for n in sizes:
                r = next((r for r in mine if _kind(r) == kind and r["n"] == n), None)
                cells.append("" if r is None else
                             f"{r['us_per_call']:,.0f} ({_rate(r['steps_per_s'])})")
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
        lines.append("")
    chess_rows = [r for r in rows if r.get("part") in ("chess", "pgx") and "us_per_call" in r]
    if chess_rows:
        lines += ["## Chess: microseconds per call (plies/s)", "",
                  "| backend | boards | us per call | plies/s | draw us |",
                  "|:---|---:|---:|---:|---:|"]
        lines += [f"| {_chess_kind(r)} | {r['n']:,} | {r['us_per_call']:,.0f} | "
                  f"{_rate(r['plies_per_s'])} | {r.get('draw_us', float('nan')):,.0f} |"
                  for r in chess_rows]
        lines.append("")
    rolls = [r for r in rows if "us_per_rollout" in r]
    if rolls:
        lines += ["## Rollouts (one call = T steps of every env)", "",
                  "| what | num_envs | T | ms per rollout | steps/s |",
                  "|:---|---:|---:|---:|---:|"]
        for r in rolls:
            what = r.get("policy", r.get("backend"))
            what += ", recorded" if r.get("record") else ""
            lines.append(f"| {r['backend']} {what} | {r['n']:,} | {r['steps']} | "
                         f"{r['us_per_rollout'] / 1e3:,.2f} | {_rate(r['steps_per_s'])} |")
        lines.append("")
    ulps = [r for r in rows if "max_ulp" in r]
    if ulps:
        lines += [f"## FMA contraction: float64 state against numba after {ulps[0]['steps']} "
                  "steps (max ulp)", "",
                  "| fma | num_envs | max ulp | by field | observations equal |",
                  "|:---|---:|---:|:---|:---|"]
        lines += [f"| {'on' if r['fma'] else 'off'} | {r['n']:,} | {r['max_ulp']} | "
                  f"{r['max_ulp_by_field']} | {r['obs_equal']} |" for r in ulps]
        lines.append("")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += ["## Errors", ""] + [f"- {json.dumps(r)}" for r in errors] + [""]
    return "\n".join(lines)


def _chess_kind(row: dict[str, Any]) -> str:
    """A chess row's variant: the backend, then the observation and ``packed`` where given."""
    kind = row["backend"]
    if row.get("observation", "compact") != "compact":
        kind += f" {row['observation']}"
    kind += " packed" if row.get("packed") else ""
    return kind + (" copy=True" if row.get("copy") else "")


def _kind(row: dict[str, Any]) -> str:
    kind = row["backend"]
    if kind == "cuda":
        kind += " graphs" if row.get("graphs") else " launches"
    if row.get("copy"):
        kind += " copy=True"
    if "fma" in row:
        kind += " fma on" if row["fma"] else " fma off"
    return kind


def _rate(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS))
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every part's time budget (PART_SECONDS)")
    parser.add_argument("--dry", action="store_true",
                        help="no GPU: tiny sizes on the CPU, the cuda backend under Numba's "
                        "simulator (set NUMBA_ENABLE_CUDASIM=1): checks the script itself")
    parser.add_argument("--markdown-only", action="store_true",
                        help="rewrite gpu-check.md from the JSON lines already in --out")
    args = parser.parse_args(argv)
    if args.markdown_only:
        rows = [json.loads(line) for line in (args.out / "gpu-check.jsonl").read_text()
                .splitlines() if line.strip()]
        card = rows[0]["card"] if rows else "no GPU"
    else:
        global DEVICE, DRY
        if args.dry:
            DEVICE, DRY = "cpu", True
        check = Check(args.out, args.scale)
        for part in args.parts.split(","):
            check.start(part)
            try:
                if part == "cartpole":
                    step_sweep(check, part, "CartPole-v1", CARTPOLE_SIZES)
                elif part == "classic":
                    for env_id in CLASSIC:
                        step_sweep(check, part, env_id, CLASSIC_SIZES)
                elif part == "chess":
                    chess(check)
                elif part == "rollout":
                    rollouts(check)
                elif part == "gymnax":
                    gymnax_peer(check)
                elif part == "pgx":
                    pgx_peer(check)
                elif part == "fma":
                    fma_study(check)
                else:
                    raise ValueError(f"unknown part {part!r}; parts: {', '.join(PARTS)}")
            except Exception as error:  # a part that cannot run is a row; the others go on
                check.emit(part=part, error=repr(error)[:400])
        rows, card = check.rows, check.card
    (args.out / "gpu-check.md").write_text(markdown(rows, card))
    print(markdown(rows, card))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
