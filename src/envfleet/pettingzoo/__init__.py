"""PettingZoo environments backed by envfleet's native kernels.

``from envfleet.pettingzoo import chess_v6`` is a drop-in for ``pettingzoo.classic.chess_v6``
(same AEC API, observations, action labels, rewards and ends), played by Chess-v0's compiled
engine instead of python-chess. Needs the ``pettingzoo`` extra (``pip install
'envfleet[pettingzoo]'``).
"""
