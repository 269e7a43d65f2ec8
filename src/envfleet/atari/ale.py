"""ALE's C++ entry points, callable from compiled code without the GIL.

ale-py's Python binding holds the GIL through ``ALEInterface.act`` (two Python threads stepping
their own emulators do not scale), and ALE no longer has a C API (``ale_c``). Its extension
module does export the C++ methods of ``ale::ALEInterface`` (``nm -D``): we load them with
ctypes, so that a numba ``prange`` loop (``nogil``) calls ``act``, ``lives``, ``game_over`` and
``getScreen`` (the screen's palette indices, read in place) on each env's emulator directly.
The ``this`` pointer of an ``ALEInterface`` comes from its nanobind instance (ale-py 0.12;
other bindings are refused); ``grayscale_table`` asks ALE for its grayscale of each index;
``check_binding`` compares every entry point with the Python API on a live emulator before an
engine uses them, and refuses (``AtariBindingError``) a build whose layout differs.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, NamedTuple

import numpy as np


class AtariBindingError(RuntimeError):
    """ale-py's extension does not expose ALE's C++ methods as this module expects."""


#: entry point -> (mangled symbol, return type, argument types after ``this``)
_SYMBOLS: dict[str, tuple[str, Any, tuple[Any, ...]]] = {
    "act": ("_ZN3ale12ALEInterface3actENS_6ActionEf", ctypes.c_int,
            (ctypes.c_int, ctypes.c_float)),
    "lives": ("_ZN3ale12ALEInterface5livesEv", ctypes.c_int, ()),
    "game_over": ("_ZNK3ale12ALEInterface9game_overEb", ctypes.c_bool, (ctypes.c_bool,)),
    "game_truncated": ("_ZNK3ale12ALEInterface14game_truncatedEv", ctypes.c_bool, ()),
    "reset_game": ("_ZN3ale12ALEInterface10reset_gameEv", None, ()),
    # (std::vector<unsigned char>&): resized to the screen's size, then written
    "grayscale": ("_ZNK3ale12ALEInterface18getScreenGrayscaleERSt6vectorIhSaIhEE", None,
                  (ctypes.c_void_p,)),
    "episode_frame_number": ("_ZNK3ale12ALEInterface21getEpisodeFrameNumberEv", ctypes.c_int,
                             ()),
    # (): const ALEScreen& (rows, columns: int32; then std::vector<unsigned char> of the
    # palette indices: begin, end, end of storage), returned as its address
    "screen": ("_ZNK3ale12ALEInterface9getScreenEv", ctypes.c_int64, ()),
}


class AleFunctions(NamedTuple):
    """ctypes functions of ALE's C++ methods (first argument: the ``ALEInterface*``)."""

    act: Any
    lives: Any
    game_over: Any
    game_truncated: Any
    reset_game: Any
    grayscale: Any
    episode_frame_number: Any
    screen: Any


@functools.cache
def ale_functions() -> AleFunctions:
    """ALE's methods from ale-py's extension module (loaded once per process)."""
    import ale_py

    library = ctypes.CDLL(ale_py._ale_py.__file__)
    functions = {}
    for name, (symbol, restype, argtypes) in _SYMBOLS.items():
        try:
            function = getattr(library, symbol)
        except AttributeError:
            raise AtariBindingError(
                f"ale-py {ale_py.__version__}'s extension does not export {symbol} "
                f"(ALEInterface::{name}): this version is not supported") from None
        function.restype = restype
        function.argtypes = [ctypes.c_void_p, *argtypes]
        functions[name] = function
    return AleFunctions(**functions)


def instance_pointer(ale: Any) -> int:
    """The ``ale::ALEInterface*`` inside ale-py's Python object ``ale`` (which must outlive
    every use of the pointer)."""
    metatype = type(type(ale)).__name__
    base = id(ale)
    if metatype == "nb_type":  # nb_inst: int32 offset, then bit fields (state: bits 0-1,
        offset = ctypes.c_int32.from_address(base + 16).value  # 2 = ready; bit 2: inline)
        flags = ctypes.c_uint32.from_address(base + 20).value
        if flags & 3 != 2:
            raise AtariBindingError(f"ale-py's ALEInterface object is not ready (nanobind "
                                    f"state {flags & 3})")
        if (flags >> 2) & 1:
            return base + offset
        return ctypes.c_void_p.from_address(base + offset).value or 0
    import ale_py

    raise AtariBindingError(f"ale-py {ale_py.__version__}'s ALEInterface is a {metatype} "
                            f"object, not nanobind's (ale-py 0.12): this build is not supported "
                            f"by the Atari engine; pip install 'ale-py>=0.12', or run the raw "
                            f"env on an executor (backend='pool')")


class GrayscaleTarget:
    """A ``std::vector<unsigned char>`` (libstdc++: begin, end, end of storage) over a
    preallocated frame: ALE's ``getScreenGrayscale`` resizes it to its own size (no-op) and
    writes the frame into ``frame``'s memory. Never destroyed by C++, never reallocated."""

    def __init__(self, frames: np.ndarray) -> None:
        if not frames.flags.c_contiguous or frames.dtype != np.uint8:
            raise ValueError("grayscale targets need C-contiguous uint8 frames")
        self.frames = frames  # (n, height, width): kept alive with the vectors
        start = frames.ctypes.data
        size = frames[0].size
        starts = start + size * np.arange(len(frames), dtype=np.uint64)
        #: one vector header per frame: (n, 3) uint64
        self.vectors = np.stack([starts, starts + size, starts + size], axis=1).astype(np.uint64)

    def address(self, i: int) -> int:
        """The address of frame ``i``'s vector header."""
        return int(self.vectors.ctypes.data + 24 * i)

    def addresses(self) -> np.ndarray:
        """Every frame's vector header address (int64, one per frame)."""
        return (self.vectors.ctypes.data + 24 * np.arange(len(self.frames))).astype(np.int64)


def screen_indices(ale: Any, pointer: int) -> np.ndarray:
    """A view of the emulator's current screen (palette indices, height x width) in ALE's own
    memory: valid until its next ``loadROM``. ``AtariBindingError`` when the ``ALEScreen``
    does not hold ``ale``'s screen size where expected."""
    address = ale_functions().screen(pointer)
    size = tuple(ctypes.c_int32.from_address(address + 4 * k).value for k in (0, 1))
    begin, end = (ctypes.c_int64.from_address(address + 8 * k).value for k in (1, 2))
    height, width = ale.getScreenDims()
    if size != (height, width) or end - begin != height * width:
        raise AtariBindingError("ALE's screen object does not have the layout this module "
                                "expects (rows, columns, a vector of pixels): this build is "
                                "not supported")
    buffer = (ctypes.c_uint8 * (height * width)).from_address(begin)
    return np.ctypeslib.as_array(buffer).reshape(height, width)


def grayscale_table(ale: Any, pointer: int) -> np.ndarray:
    """ALE's grayscale of each palette index (256 uint8), from ALE itself: the screen's first
    256 pixels set to the indices 0..255, read with ``getScreenGrayscale``, then restored."""
    screen = screen_indices(ale, pointer).reshape(-1)
    saved = screen[:256].copy()
    gray = np.zeros((1, *ale.getScreenDims()), np.uint8)
    try:
        screen[:256] = np.arange(256)
        ale_functions().grayscale(pointer, GrayscaleTarget(gray).address(0))
    finally:
        screen[:256] = saved
    return gray.reshape(-1)[:256].copy()


def check_binding(ale: Any, pointer: int, action: Any) -> None:
    """Compare each C++ entry point with ale-py's Python API on ``ale`` (a loaded emulator):
    lives, frame number, game over, a frame after a few ``act`` calls (grayscale, and the
    screen's palette indices read in place). Raises
    ``AtariBindingError`` on any difference; leaves the emulator reset."""
    f = ale_functions()
    height, width = ale.getScreenDims()
    ours = np.zeros((1, height, width), np.uint8)
    target = GrayscaleTarget(ours)
    theirs = np.empty((height, width), np.uint8)
    ale.reset_game()
    for _ in range(3):
        # a frame passes, unless the episode is over (a frame limit below the game's
        # start-up frames: an episode may start truncated)
        before, over = ale.getEpisodeFrameNumber(), ale.game_over(with_truncation=True)
        reward = f.act(pointer, int(action), 1.0)
        f.grayscale(pointer, target.address(0))
        ale.getScreenGrayscale(theirs)
        same = (f.lives(pointer) == ale.lives()
                and f.episode_frame_number(pointer) == ale.getEpisodeFrameNumber()
                and (over or ale.getEpisodeFrameNumber() == before + 1)
                and f.game_over(pointer, False) == ale.game_over(with_truncation=False)
                and f.game_truncated(pointer) == ale.game_truncated()
                and isinstance(reward, int) and np.array_equal(ours[0], theirs)
                and np.array_equal(screen_indices(ale, pointer), ale.getScreen()))
        if not same:
            import ale_py

            raise AtariBindingError(f"ale-py {ale_py.__version__}: ALE's C++ entry points do "
                                    f"not agree with its Python API; this build is not "
                                    f"supported")
    ale.reset_game()
