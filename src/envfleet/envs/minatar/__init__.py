"""MinAtar's games as native families (``MinAtar/<Game>-v0`` / ``-v1``, the ``minatar``
package's own ids): ``common`` holds what every game shares, one module per game holds its
rules. ``SPECS`` lists their specs."""

from envfleet.envs.minatar import breakout, freeway, space_invaders

SPECS = (breakout.SPEC_V0, breakout.SPEC_V1, space_invaders.SPEC_V0, space_invaders.SPEC_V1,
         freeway.SPEC_V0, freeway.SPEC_V1)

__all__ = ["SPECS"]
