"""MinAtar's games as native families (``MinAtar/<Game>-v0`` / ``-v1``, the ``minatar``
package's own ids): ``common`` holds what every game shares, one module per game holds its
rules. ``SPECS`` lists their specs."""

from envfleet.envs.minatar import breakout, seaquest

SPECS = (breakout.SPEC_V0, breakout.SPEC_V1)
SPECS += (seaquest.SPEC_V0, seaquest.SPEC_V1)

__all__ = ["SPECS"]
