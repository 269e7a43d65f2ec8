"""Unpacking Chess-v0's ``packed=True`` outputs, for NumPy arrays and torch tensors alike.

``make("Chess-v0", n, packed=True)`` hands out the legal-action mask as bits (uint8
``(n, 584)``, bit ``a & 7`` of byte ``a >> 3`` is action a: ``np.packbits(mask, axis=-1,
bitorder="little")``) and, with ``observation="planes"``, the planes as 21 uint64 words
(``(n, 21)``: word p is plane p's bitboard, bit ``8 * rank + file``; word 19 is the half-move
clock, whose plane holds ``clock / 100``). These helpers give back exactly the unpacked arrays
(a GPU policy may instead read the bits itself: that is what packing is for).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.envs.chess.core import NUM_ACTIONS

#: the packed mask's bytes per board and the packed planes' words per board
MASK_BYTES = NUM_ACTIONS // 8
NUM_PLANES = 21
HALFMOVE_PLANE = 19


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _check_last_axis(x: Any, size: int, dtype: str, what: str) -> None:
    """Refuse anything but a NumPy array or torch tensor of shape ``(..., size)`` and ``dtype``
    (``TypeError`` for another type, ``ValueError`` for another shape or dtype)."""
    if not (isinstance(x, np.ndarray) or (_is_tensor(x) and hasattr(x, "ndim"))):
        raise TypeError(f"{what} expects a NumPy array or torch tensor of shape (..., {size}) "
                        f"and dtype {dtype} (make('Chess-v0', n, packed=True)), got "
                        f"{type(x).__name__}")
    if x.ndim < 1 or x.shape[-1] != size or str(x.dtype).rsplit(".", 1)[-1] != dtype:
        raise ValueError(f"{what} expects a packed array of shape (..., {size}) and dtype "
                         f"{dtype} (make('Chess-v0', n, packed=True)), got shape "
                         f"{tuple(x.shape)} and dtype {x.dtype}")


def unpack_mask(mask: Any) -> Any:
    """The bool legal-action mask ``(..., 4672)`` of a packed mask ``(..., 584)`` uint8: a
    NumPy array for a NumPy array, a tensor on the same device for a torch tensor."""
    _check_last_axis(mask, MASK_BYTES, "uint8", "unpack_mask")
    if _is_tensor(mask):
        import torch

        shifts = torch.arange(8, dtype=torch.uint8, device=mask.device)
        bits = (mask.unsqueeze(-1) >> shifts) & 1
        return bits.reshape(*mask.shape[:-1], NUM_ACTIONS).bool()
    return np.unpackbits(np.asarray(mask), axis=-1, bitorder="little").astype(np.bool_)


def unpack_planes(obs: Any) -> Any:
    """The float32 planes ``(..., 8, 8, 21)`` of packed planes ``(..., 21)`` uint64, exactly as
    ``observation="planes"`` without packing gives them (NumPy in, NumPy out; torch in, torch
    out on the same device)."""
    _check_last_axis(obs, NUM_PLANES, "uint64", "unpack_planes")
    lead = tuple(obs.shape[:-1])
    if _is_tensor(obs):
        import torch

        words = obs.view(torch.int64)  # torch shifts no uint64; the bits are the same
        shifts = torch.arange(64, dtype=torch.int64, device=obs.device)
        planes = ((words.unsqueeze(-1) >> shifts) & 1).transpose(-1, -2).to(torch.float32)
        clock = words[..., HALFMOVE_PLANE].to(torch.float32) / torch.tensor(
            100.0, dtype=torch.float32, device=obs.device)
    else:
        words = np.asarray(obs)
        shifts = np.arange(64, dtype=np.uint64)
        planes = ((words[..., None] >> shifts) & np.uint64(1)).swapaxes(-1, -2)
        planes = planes.astype(np.float32)
        clock = words[..., HALFMOVE_PLANE].astype(np.float32) / np.float32(100.0)
    planes[..., HALFMOVE_PLANE] = clock[..., None]
    return planes.reshape(*lead, 8, 8, NUM_PLANES)
