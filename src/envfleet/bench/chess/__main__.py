"""``python -m envfleet.bench.chess``: envfleet and the peers in one process (``compare``)."""

from envfleet.bench.chess.compare import _main

_main()
