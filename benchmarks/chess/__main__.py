"""``python -m benchmarks.chess``: envfleet and the peers in one process (``compare``)."""

from benchmarks.chess.compare import _main

_main()
