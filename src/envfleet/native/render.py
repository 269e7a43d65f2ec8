"""Frames of native envs, drawn by their reference env's own renderer from each env's state.

A family's ``renderer`` is ``ReferenceRenderer(make_env, columns, fps)``: called with the
family's params it builds the reference Gymnasium env (``render_mode="rgb_array"``); each frame
sets that env's ``state`` from env i's state columns and calls its ``render()``, so the picture
is Gymnasium's own for the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class ReferenceRenderer:
    """Draws env rows with the reference env ``make_env(params)``, its ``state`` set from the
    row's ``columns`` (in that order); ``fps`` is the reference's render_fps;
    ``attributes``: per-env params the row may carry (set on the env before drawing);
    ``state_dtype(row)``: the dtype of the reference's state array for that row (default
    float64; MountainCarContinuous keeps float32 after a step, and draws with it)."""

    def __init__(self, make_env: Callable[[Any], Any], columns: tuple[str, ...], fps: int,
                 attributes: tuple[str, ...] = (),
                 state_dtype: Callable[[dict[str, Any]], type] | None = None) -> None:
        self.make_env = make_env
        self.columns = columns
        self.fps = fps
        self.attributes = attributes
        self.state_dtype = state_dtype

    def __call__(self, params: Any) -> Drawing:
        return Drawing(self.make_env(params), self.columns, self.attributes, self.state_dtype)


class Drawing:
    """One reference env that draws any state row (see ``ReferenceRenderer``)."""

    def __init__(self, env: Any, columns: tuple[str, ...],
                 attributes: tuple[str, ...] = (),
                 state_dtype: Callable[[dict[str, Any]], type] | None = None) -> None:
        self.env = env
        self.columns = columns
        self.attributes = attributes
        self.state_dtype = state_dtype

    def draw(self, row: dict[str, Any]) -> np.ndarray:
        for name in self.attributes:  # a per-env param, when the env has its own
            if name in row:
                setattr(self.env, name, float(row[name]))
        dtype = self.state_dtype(row) if self.state_dtype is not None else np.float64
        self.env.state = np.array([row[c] for c in self.columns], dtype=dtype)
        return self.env.render()

    def close(self) -> None:
        self.env.close()
