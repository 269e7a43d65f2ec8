"""The on-disk cache of compiled numba kernels, shared by every process of a user.

numba's own ``cache=True`` cannot serve envfleet's kernels: they are closures built per family,
autoreset mode and params, and numba decides staleness by the modification time of the file
that defines the jitted function (``numba_backend.py``) only, not by the source of the family's
``reset_one`` / ``step_one`` it calls. So each kernel gets a ``KernelCache`` keyed by a
fingerprint of everything numba compiles into it (``fingerprint``): the bytecode and constants
of the kernel and of every function it reaches (closure cells, globals, module attributes),
the values it freezes in (params, modes, global numbers and arrays), numba's, NumPy's and
Python's versions, the compile options and the CPU. A changed kernel, family or helper is a
different key, so old machine code never runs.

One file per (kernel, key), written under a temporary name and renamed into place (atomic on
POSIX): concurrent processes never see a partial file and never share an index. Loading skips
numba's full target ``refresh()`` (``_ready_to_load``), most of a cached start's cost. A load
marks its file used (its modification time); a save deletes the files unused for
``UNUSED_DAYS`` (an edited family's old kernels), so the directory does not grow forever.
docs/ARCHITECTURE.md, "The kernel cache", says what is keyed and what is not.

``ENVFLEET_CACHE_DIR`` sets the directory (default ``$XDG_CACHE_HOME/envfleet/numba``, else
``~/.cache/envfleet/numba``); ``ENVFLEET_CACHE=0`` turns the cache off.

Loading a file unpickles it, which can run any code, so the cache trusts only what this user
(or root) wrote: the directory must be owned by the user or root and writable by no one else
(created 0700), each file a regular file owned by the user or root and writable by no one else,
checked on the opened descriptors (``O_NOFOLLOW``, ``O_NONBLOCK``: no window between check and
read, no symbolic link followed, a FIFO never blocks). Anything else is refused with one line
on stderr and the kernel compiles as with an empty cache; nothing is written to a directory
refused. Pruning deletes only files of the cache's own naming (``_KERNEL_FILE``, ``_TEMPORARY``).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import hashlib
import io
import itertools
import os
import pickle
import re
import secrets
import stat
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import llvmlite
import numba
import numpy as np
from numba.core import bytecode, compiler, serialize, sigutils
from numba.core.caching import _Cache

#: modules whose functions and attributes are not walked (their versions are part of every
#: key); ``sys``, ``os`` and ``torch`` hold process state (``sys.modules``: what this process
#: imported so far), which numba never compiles in but which would change a key from process
#: to process (a batch-or-number test in ``elementwise`` reaches ``sys.modules``)
_LIBRARIES = ("numba", "numpy", "llvmlite", "math", "cmath", "builtins", "operator",
              "typing", "gymnasium", "sys", "os", "torch")
#: the files' format: 2 since symbol names differ between processes (``_distinct_symbols``)
_FORMAT = 2
_VERSIONS = (_FORMAT, numba.__version__, llvmlite.__version__, np.__version__, sys.version,
             sys.platform)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: a cache file not loaded for this many days is deleted at the next save
UNUSED_DAYS = 30
#: a kernel file's name (``KernelCache.path``): ``<kernel>-<40 hex digits>.nbk``
_KERNEL_FILE = re.compile(r"[^./][^/]*-[0-9a-f]{40}\.nbk")
#: a save's temporary file: ``.<kernel file>.<8 characters>`` (as ``tempfile.mkstemp`` named
#: them before, so a killed writer's leftovers from then are pruned too)
_TEMPORARY = re.compile(r"\.[^./][^/]*-[0-9a-f]{40}\.nbk\.[a-z0-9_]{8}")


def _distinct_symbols() -> None:
    """Start numba's numbering of the functions it compiles at a random point in this process.

    numba names each compiled function's symbol from its qualified name and a number counted
    1, 2, ... per process. Two processes compiling different kernels in the same order (a
    NEXT_STEP CartPole in one, a SAME_STEP one in the other) therefore give different code
    the same symbol names, and a process loading both files linked the second kernel to the
    first one's inner functions: wrong results, silently. Random starting points keep the
    names of different processes apart (ranges of a few thousand in 2**48)."""
    bytecode.FunctionIdentity._unique_ids = itertools.count(
        secrets.randbits(48) + (1 << 48))


_distinct_symbols()


def cache_dir() -> Path | None:
    """The kernel cache directory, or None when ``ENVFLEET_CACHE=0`` turns the cache off (or
    there is no home directory to put it in, or no way to check who wrote a file: a system
    without POSIX owners, ``O_NOFOLLOW`` and ``dir_fd``)."""
    if os.environ.get("ENVFLEET_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if not (hasattr(os, "geteuid") and hasattr(os, "O_NOFOLLOW") and
            os.open in os.supports_dir_fd and os.unlink in os.supports_dir_fd):
        return None
    chosen = os.environ.get("ENVFLEET_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no home directory: compile in memory, as without a cache
            return None
    return Path(base) / "envfleet" / "numba"


# --- the fingerprint: what numba compiles into a kernel ----------------------------------


def fingerprint(fn: Any) -> str:
    """A hash of the code and frozen-in values numba compiles for ``fn`` (a function or a
    dispatcher): its bytecode and constants, then every function, module attribute, class and
    value it reaches through closure cells and globals, recursively. Source positions and
    comments are left out; anything that changes the compiled code is in."""
    h = hashlib.sha256()
    _Walker(h).value(fn)
    return h.hexdigest()


class _Walker:
    """One fingerprint's traversal (functions seen once: recursion and shared helpers)."""

    def __init__(self, h: Any) -> None:
        self.h = h
        self.seen: dict[int, int] = {}
        self.alive: list[Any] = []  # keeps ids unique while walking

    def put(self, *parts: Any) -> None:
        for part in parts:
            self.h.update(str(part).encode())
            self.h.update(b"\x00")

    def value(self, obj: Any) -> None:
        """Hash ``obj`` by kind: functions and dispatchers by code, the rest by value."""
        if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
            self.put(type(obj).__name__, repr(obj))
        elif isinstance(obj, np.ndarray):
            self.put("ndarray", obj.dtype.str, obj.shape)
            self.h.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, np.generic):
            self.put("scalar", obj.dtype.str, obj.tobytes().hex())
        elif isinstance(obj, enum.Enum):
            self.put("enum", _qualified(type(obj)), obj.name)
            self.value(obj.value)
        elif isinstance(obj, tuple | list):
            self.put(type(obj).__name__, len(obj))
            if hasattr(obj, "_fields"):  # a NamedTuple: its class says the fields' order
                self.value(type(obj))
            for item in obj:
                self.value(item)
        elif isinstance(obj, frozenset | set):
            self.put("set", sorted(_Walker.digest(item) for item in obj))
        elif isinstance(obj, dict):
            self.put("dict", len(obj))
            for key in sorted(obj, key=repr):
                self.value(key)
                self.value(obj[key])
        elif isinstance(obj, types.CodeType):
            self.code(obj)
        elif self.once(obj):
            if isinstance(obj, types.FunctionType):
                self.function(obj)
            elif hasattr(obj, "py_func") and hasattr(obj, "targetoptions"):  # a dispatcher
                self.put("dispatcher", sorted(obj.targetoptions.items(), key=repr))
                self.value(obj.py_func)
            elif isinstance(obj, type):
                self.put("class", _qualified(obj), getattr(obj, "_fields", ()))
            elif isinstance(obj, types.ModuleType):
                self.put("module", obj.__name__)
            else:  # numba cannot freeze other objects in: their type is enough
                self.put("object", _qualified(type(obj)), _ADDRESS.sub("", repr(obj))[:200])

    def once(self, obj: Any) -> bool:
        """Whether ``obj`` is met for the first time (else a back-reference is hashed)."""
        index = self.seen.get(id(obj))
        if index is not None:
            self.put("ref", index)
            return False
        self.seen[id(obj)] = len(self.seen)
        self.alive.append(obj)
        return True

    def code(self, code: types.CodeType) -> None:
        self.put("code", code.co_argcount, code.co_kwonlyargcount, code.co_flags,
                 code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
        self.h.update(code.co_code)
        for const in code.co_consts:
            self.value(const)

    def function(self, fn: types.FunctionType) -> None:
        """A library's function by name; any other by code, defaults, cells and globals."""
        module = fn.__module__ or ""
        self.put("function", module, fn.__qualname__)
        if module.split(".")[0] in _LIBRARIES:
            return
        self.code(fn.__code__)
        self.value(fn.__defaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell
                self.put("empty cell")
        names = _names(fn.__code__)
        scope = fn.__globals__
        for name in names:
            if name not in scope:
                continue
            target = scope[name]
            self.put("global", name)
            self.value(target)
            if isinstance(target, types.ModuleType | type) and \
                    (target.__module__ if isinstance(target, type)
                     else target.__name__).split(".")[0] not in _LIBRARIES:
                # ``module.name`` / ``Class.NAME``: attribute names are co_names too
                for attribute in names:
                    inner = vars(target).get(attribute)
                    if inner is not None and attribute != name:
                        self.put("attribute", attribute)
                        self.value(inner)

    @staticmethod
    def digest(obj: Any) -> str:
        h = hashlib.sha256()
        _Walker(h).value(obj)
        return h.hexdigest()


def _names(code: types.CodeType) -> tuple[str, ...]:
    """Every global or attribute name used by ``code`` and the code nested in it, in order."""
    names = dict.fromkeys(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(dict.fromkeys(_names(const)))
    return tuple(names)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _type_key(ty: Any) -> str:
    """A numba type as text, with each NamedTuple's field names (its text has only the class
    name and the element types)."""
    if isinstance(ty, numba.core.types.BaseNamedTuple):
        cls = ty.instance_class
        return f"{ty}{{{_qualified(cls)}:{','.join(cls._fields)}}}[{_elements(ty)}]"
    if isinstance(ty, numba.core.types.BaseTuple):
        return f"{ty}[{_elements(ty)}]"
    return str(ty)


def _elements(ty: Any) -> str:
    return ";".join(_type_key(t) for t in ty.types)


# --- the cache ---------------------------------------------------------------------------


class KernelCache(_Cache):
    """numba's cache protocol for one dispatcher, one file per (fingerprint, signature, CPU).

    ``directory`` None: the cache is off (nothing is read or written). ``on_compile`` is
    called when a signature is not found, just before numba compiles it.
    """

    def __init__(self, dispatcher: Any, directory: Path | None, key: str,
                 on_compile: Callable[[], None] | None = None) -> None:
        self._directory = directory
        self._name = dispatcher.py_func.__name__
        self._key = key
        self._enabled = directory is not None
        self._on_compile = on_compile

    @property
    def cache_path(self) -> str:
        return str(self._directory)

    def path(self, sig: Any, codegen: Any) -> Path:
        """The file of ``sig``'s compiled code for ``codegen``'s CPU."""
        args, _ = sigutils.normalize_signature(sig)
        h = hashlib.sha256(self._key.encode())
        for part in (*(_type_key(a) for a in args), codegen.magic_tuple()):
            h.update(str(part).encode() + b"\x00")
        return self._directory / f"{self._name}-{h.hexdigest()[:40]}.nbk"

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The compiled code of ``sig`` from disk, or None: absent, unreadable, corrupt or not
        trusted (``_trusted_file``), numba compiles it (and the file is replaced, in a trusted
        directory)."""
        if self._enabled:
            try:
                _ready_to_load(target_context)
                path = self.path(sig, target_context.codegen())
                with _trusted_file(path) as f:
                    if f is not None:
                        payload = _Unpickler(f, _classes(sig)).load()
                        result = compiler.CompileResult._rebuild(target_context, *payload)
                        with contextlib.suppress(OSError):  # used: kept by prune_unused
                            os.utime(f.fileno())
                        return result
            except Exception:  # any failure only costs a compile
                pass
        if self._on_compile is not None:
            self._on_compile()
        return None

    def save_overload(self, sig: Any, cres: Any) -> None:
        """Write ``cres`` atomically (a temporary file of the cache's naming, mode 0600, renamed
        into place) into a trusted directory (created 0700); a kernel numba cannot cache
        (pointers or large arrays compiled in), an unwritable or untrusted directory only means
        it is compiled again next time."""
        if not self._enabled or cres.library.has_dynamic_globals or \
                any(not lifted.can_cache for lifted in cres.lifted):
            return
        target = self.path(sig, cres.codegen)
        try:
            data = _dumps(cres._reduce(), _classes(sig))
            _make_directory(target.parent)
        except Exception:  # a cache that cannot be written is no error
            return
        with _trusted_directory(target.parent) as directory:
            if directory is None:
                return
            temporary = f".{target.name}.{secrets.token_hex(4)}"
            try:
                handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                                 os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
                with os.fdopen(handle, "wb") as f:
                    f.write(data)
                os.replace(temporary, target.name, src_dir_fd=directory,
                           dst_dir_fd=directory)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=directory)
            _prune(directory, UNUSED_DAYS)

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False

    def flush(self) -> None:
        pass


# --- trust: what may be unpickled ----------------------------------------------------------

#: the refusals already said in this process (path, reason): each is said once
_WARNED: set[tuple[str, str]] = set()


def _refuse(path: Path, why: str, then: str) -> None:
    """Say on stderr, in one line, that the cache does not use ``path`` and why (once per
    process): a refusal is a permission problem to fix, or someone else's files."""
    if (str(path), why) in _WARNED:
        return
    _WARNED.add((str(path), why))
    print(f"envfleet: kernel cache: not using {path}: {why}; {then}", file=sys.stderr,
          flush=True)


def _distrust(info: os.stat_result) -> str | None:
    """Why an opened cache directory or file cannot be trusted, or None: it must be owned by
    this user or root (who can replace anything anyway) and writable by no one else."""
    user = os.geteuid()
    if info.st_uid not in (user, 0):
        return f"owned by uid {info.st_uid}, not by this user (uid {user}) or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by its group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _make_directory(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each 0700 (``Path.mkdir`` gives parents
    the default mode)."""
    missing = []
    while not os.path.lexists(directory) and directory.parent != directory:
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


@contextlib.contextmanager
def _trusted_directory(directory: Path) -> Iterator[int | None]:
    """A descriptor of ``directory`` (every file operation goes through it: a directory
    swapped after the check is not used), or None when it is missing, unreadable or not
    trusted (``_distrust``; refused on stderr)."""
    try:
        handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        info = os.fstat(handle)
        why = _distrust(info)
        if why is not None:
            mine = info.st_uid == os.geteuid() and not info.st_mode & stat.S_ISVTX
            fix = "chmod 700 it" if mine else "set ENVFLEET_CACHE_DIR to a directory of your own"
            _refuse(directory, why, f"kernels compile without the cache and are not saved "
                    f"({fix}, or ENVFLEET_CACHE=0)")
        yield handle if why is None else None
    finally:
        os.close(handle)


@contextlib.contextmanager
def _trusted_file(path: Path) -> Iterator[BinaryIO | None]:
    """``path`` open for reading, or None when it is missing or not trusted: its directory
    (``_trusted_directory``) and the opened file itself must be trusted, and it must be a
    regular file. Opened with ``O_NOFOLLOW`` (a symbolic link is refused) and ``O_NONBLOCK``
    (a FIFO does not block), then checked with ``fstat``: what is checked is what is read."""
    with _trusted_directory(path.parent) as directory:
        if directory is None:
            yield None
            return
        try:
            handle = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK |
                             os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            yield None
            return
        except OSError as error:  # ELOOP: a symbolic link; ENXIO: a socket
            why = "a symbolic link" if error.errno == errno.ELOOP else \
                f"cannot be opened ({error.strerror})"
            _refuse(path, why, "compiling the kernel instead")
            yield None
            return
        with os.fdopen(handle, "rb") as f:
            info = os.fstat(handle)
            why = None if stat.S_ISREG(info.st_mode) else \
                f"not a regular file ({_kind(info.st_mode)})"
            why = why or _distrust(info)
            if why is not None:
                _refuse(path, why, "compiling the kernel instead")
            yield f if why is None else None


def _kind(mode: int) -> str:
    """What a non-regular file is, in a word."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return f"mode {mode:o}"


def prune_unused(directory: Path, days: float = UNUSED_DAYS) -> None:
    """Delete the kernel files in ``directory`` not loaded or written for ``days`` (and
    temporaries a killed writer left), if the directory is trusted: a save is rare (a
    compile), so it pays for the scan."""
    with _trusted_directory(directory) as handle:
        if handle is not None:
            _prune(handle, days)


def _prune(directory: int, days: float) -> None:
    """``prune_unused`` in the open directory ``directory``: only regular files named as the
    cache names its files and temporaries (``_KERNEL_FILE``, ``_TEMPORARY``), nothing else."""
    oldest = time.time() - days * 86400
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not (_KERNEL_FILE.fullmatch(entry.name) or _TEMPORARY.fullmatch(entry.name)):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_mtime < oldest:
                    os.unlink(entry.name, dir_fd=directory)


def _classes(sig: Any) -> list[type]:
    """The NamedTuple classes in ``sig``'s argument types, in order. A family's state class is
    made at run time: pickled by value, it would come back as a copy that numba takes for
    another type, so cache files name these classes by their place in the signature."""
    found: list[type] = []

    def visit(ty: Any) -> None:
        if isinstance(ty, numba.core.types.BaseNamedTuple):
            found.append(ty.instance_class)
        if isinstance(ty, numba.core.types.BaseTuple):
            for inner in ty.types:
                visit(inner)

    for arg in sigutils.normalize_signature(sig)[0]:
        visit(arg)
    return found


class _Pickler(serialize.NumbaPickler):
    """numba's pickler, writing the signature's NamedTuple classes as references."""

    def __init__(self, file: Any, classes: list[type]) -> None:
        super().__init__(file, protocol=4)
        self._places = {id(cls): i for i, cls in enumerate(classes)}

    def persistent_id(self, obj: Any) -> Any:
        return self._places.get(id(obj)) if isinstance(obj, type) else None


class _Unpickler(pickle.Unpickler):
    """Reads ``_Pickler``'s references back as this process's classes."""

    def __init__(self, file: Any, classes: list[type]) -> None:
        super().__init__(file)
        self._classes = classes

    def persistent_load(self, pid: Any) -> type:
        return self._classes[pid]


def _dumps(payload: Any, classes: list[type]) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, classes).dump(payload)
    return buffer.getvalue()


def _ready_to_load(target_context: Any) -> None:
    """What loading compiled code needs of numba's CPU target: the symbols of its runtime
    (memory management, string hashing). Not numba's ``refresh()``, which imports every
    implementation registry and SciPy (~0.45 s, most of a cached start): a compile still
    runs it."""
    import numba.cpython.hashing  # noqa: F401 (registers the hash secret's symbols)
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)


def disk_cached(dispatcher: Any, *constants: Any,
                on_compile: Callable[[], None] | None = None) -> Any:
    """Give ``dispatcher`` (a numba ``njit`` function) the on-disk cache, keyed by its
    ``fingerprint`` and ``constants`` (anything else its code depends on); returned as is.
    ``on_compile()`` runs before each real compile (not when the code is loaded from disk).
    With the cache off, it compiles in memory as before."""
    if not hasattr(dispatcher, "_cache"):  # NUMBA_DISABLE_JIT: a plain Python function
        return dispatcher
    directory = cache_dir()
    key = ""
    if directory is not None:
        try:
            h = hashlib.sha256(fingerprint(dispatcher).encode())
            for part in (*_VERSIONS, numba.config.OPT, numba.config.BOUNDSCHECK, *constants):
                h.update(repr(part).encode() + b"\x00")
            key = h.hexdigest()
        except Exception:  # e.g. an object whose repr fails: compiled in memory, as before
            directory = None
    dispatcher._cache = KernelCache(dispatcher, directory, key, on_compile)
    return dispatcher


def is_disk_cached(dispatcher: Any) -> bool:
    """Whether ``dispatcher``'s compiled code goes to the on-disk cache."""
    cache = getattr(dispatcher, "_cache", None)
    return isinstance(cache, KernelCache) and cache._enabled
