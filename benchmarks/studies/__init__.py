"""``python -m benchmarks --study NAME``: the seeds' experiments, reproducible with one command.

Each study module has ``run(args, envs) -> exit status`` and writes ``study-<name>.jsonl``,
``.md`` and ``.png`` into ``--out`` (``common.StudyRun``):

- ``threads``: strong and weak scaling of the numba backend over CPU threads;
- ``workload``: the cost of a step grown k-fold (the physics repeated inside the step);
- ``roofline``: this machine's memory bandwidth and peak arithmetic rate, and each native env
  and backend placed under them;
- ``tpb``: CUDA threads per block against num_envs ("not measured: no GPU" without one);
- ``executors``: envfleet's executors against Gymnasium's and SB3's vector envs (and EnvPool,
  PufferLib where installed) by num_envs and workers, on four Gymnasium envs;
- ``e2e``: the whole PPO loop (env, inference, update) against num_envs, native env vs the
  same game in the pool and serially (CartPole, python-chess), with the ideal line;
- ``chess-learning``: wall-clock seconds until the same PPO wins 40% of its games against the
  random opponent, on native Chess-v0, on python-chess and on OpenSpiel's chess in the pool.

Study modules are imported only when their study runs (the package itself imports nothing).
"""

from __future__ import annotations

import argparse
import importlib

STUDIES = ("threads", "workload", "roofline", "tpb", "executors", "e2e", "chess-learning")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--study`` and the studies' own options (``--env``, ``--seconds`` and the rest are
    ``envfleet bench``'s)."""
    from envfleet.command import ints, positive_int

    parser.add_argument("--study", choices=STUDIES,
                        help="run one of the seeds' studies instead of the num_envs sweep "
                             "(docs/studies/; --env: a comma list, default: the study's own "
                             "envs; --seconds: the study's own, per repeat): "
                             + ", ".join(STUDIES))
    parser.add_argument("--max-threads", type=positive_int, metavar="P",
                        help="--study threads: up to P numba threads; --study roofline: "
                             "the numba threads and roofs (default: the usable cores)")
    parser.add_argument("--repeats", type=positive_int, default=3, metavar="R",
                        help="--study: each point timed R times, median and spread reported "
                             "(default: %(default)s)")
    parser.add_argument("--seeds", type=positive_int, metavar="K",
                        help="--study chess-learning: train every contender with seeds 1..K, "
                             "each on its own env seeds (default: 1)")
    parser.add_argument("--steps", type=positive_int, metavar="N",
                        help="--study chess-learning: env steps every contender trains, unless "
                             "--seconds ends it first (default: 1,048,576)")
    parser.add_argument("--work", type=ints, metavar="K,K,...",
                        help="--study workload: the physics repeated K times per step "
                             "(default: 1,10,100,1000)")
    parser.add_argument("--block-sizes", type=ints, metavar="B,B,...",
                        help="--study tpb: CUDA threads per block to sweep (default: 32..1024)")


def run(args: argparse.Namespace) -> int:
    """Run the study ``args.study`` (``--env`` a comma list: the envs it covers)."""
    envs = [e.strip() for e in (args.env or "").split(",") if e.strip()]
    module = importlib.import_module(
        f"benchmarks.studies.{args.study.replace('-', '_')}")
    return module.run(args, envs)
