"""envfleet's measurements beyond ``envfleet bench``: versioned and tested with the repository,
not installed with the package (the wheel holds ``src/envfleet`` only).

- ``studies``: the seeds' experiments (``python -m benchmarks --study NAME``; docs/studies/);
- ``chess``: Chess-v0 against its peers (python-chess, OpenSpiel, pgx, EnvPool), perft and the
  user loop (``python -m benchmarks --env Chess-v0``; ``python -m benchmarks.chess``);
- ``gpu``: the GPU check's per-call sweep (``python -m benchmarks.gpu``, run by
  ``scripts/gpu_check.sh``);
- ``scripts``: one-off measurements, each a program of its own, run from the repository's root
  (``python -m benchmarks.scripts.NAME``; each one's docstring says what it measures).

``python -m benchmarks`` is ``envfleet bench`` with these added (``__main__``). It runs from
the repository's root; importing this package puts that root on ``PYTHONPATH``, so the
processes it starts (each point's worker, a study's jobs, training runs over
``benchmarks.studies.pychess_env``) import it as this process does. envfleet's package never
imports it (tests/test_layers.py).
"""

from __future__ import annotations

import os
from pathlib import Path

#: the repository's root, which holds this package
ROOT = Path(__file__).resolve().parent.parent

_path = os.environ.get("PYTHONPATH", "")
if str(ROOT) not in _path.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), _path]))
