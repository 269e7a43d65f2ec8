"""``envfleet bench``: steps/s of every backend side by side with what users pick instead.

- ``measure``: one point (backend, num_envs, threads) measured in its own fresh process;
- ``baselines``: Gymnasium's SyncVectorEnv and NumPy vector env, SB3's DummyVecEnv;
- ``report``: the rich and Markdown tables, JSON lines, the PNG plot;
- ``runner``: the command's options, the sweep and its progress display;
- ``chess``: Chess-v0's peers, perft and report sections (imported here: it registers its
  peers into ``baselines`` and its series into ``measure``'s worker);
- ``engines``: the engine families' bench (``ALE/<Game>-v5``, MuJoCo's ``<Id>-v5``): their
  peers, floors and Atari's reference stack (imported here: it registers them into
  ``baselines``).
"""

from envfleet.bench import chess, engines  # noqa: F401 - register their peers (see above)
from envfleet.bench.baselines import BASELINES
from envfleet.bench.measure import PointSpec, measure, run_point

__all__ = ["BASELINES", "PointSpec", "measure", "run_point"]
