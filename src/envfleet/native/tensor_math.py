"""Math for the torch twins of the kernels, exact where it can be.

torch's vectorised CPU ``sin``/``cos`` differ from the C library's by one ulp on ~0.1% of
inputs, so CPU trajectories would drift from Gymnasium's (and from the numba backend's) in the
last bits. On CPU these take NumPy's, which agree with libm here; elsewhere, torch's.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def cos(x: Any) -> Any:
    """Elementwise cosine of a float64 tensor, libm-exact on CPU."""
    import torch

    if x.device.type == "cpu":
        return torch.from_numpy(np.cos(x.numpy()))
    return torch.cos(x)


def sin(x: Any) -> Any:
    """Elementwise sine of a float64 tensor, libm-exact on CPU."""
    import torch

    if x.device.type == "cpu":
        return torch.from_numpy(np.sin(x.numpy()))
    return torch.sin(x)
