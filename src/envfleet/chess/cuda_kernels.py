"""Chess-v0's own CUDA kernel (imported only by the cuda backend): random legal actions.

At module level so that Numba's CUDA simulator can swap the ``cuda`` module it uses.
"""

from numba import cuda

from envfleet.chess.env import random_action


@cuda.jit
def random_actions(moves, num_moves, seeds, episodes, steps, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = random_action(i, moves, num_moves, seeds, episodes, steps)
