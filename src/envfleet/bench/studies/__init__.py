"""``envfleet bench --study NAME``: the seeds' experiments, reproducible with one command.

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


def run(args: argparse.Namespace) -> int:
    """Run the study ``args.study`` (``--env`` a comma list: the envs it covers)."""
    envs = [e.strip() for e in (args.env or "").split(",") if e.strip()]
    module = importlib.import_module(
        f"envfleet.bench.studies.{args.study.replace('-', '_')}")
    return module.run(args, envs)
