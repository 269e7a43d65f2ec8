"""``envfleet bench``: steps/s of every backend side by side with what users pick instead.

- ``measure``: one point (backend, num_envs, threads) measured in its own fresh process;
- ``baselines``: Gymnasium's SyncVectorEnv and NumPy vector env, SB3's DummyVecEnv;
- ``report``: the rich and Markdown tables, JSON lines, the PNG plot;
- ``runner``: the command's options, the sweep and its progress display;
- ``engines``: the engine families' bench (``ALE/<Game>-v5``, MuJoCo's ``<Id>-v5``): their
  peers, floors and Atari's reference stack (imported here: it registers them into
  ``baselines``).

The studies, Chess-v0's peers and the GPU check measure more than a user's choice of backend:
they live in the repository's ``benchmarks/`` (``python -m benchmarks``), not in the package.
"""

from envfleet.bench import engines  # noqa: F401 - registers their peers (see above)
from envfleet.bench.baselines import BASELINES
from envfleet.bench.measure import PointSpec, measure, run_point

__all__ = ["BASELINES", "PointSpec", "measure", "run_point"]
