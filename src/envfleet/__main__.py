"""``python -m envfleet ...``: the same as the ``envfleet`` command."""

import sys

from envfleet.cli import main

sys.exit(main())
