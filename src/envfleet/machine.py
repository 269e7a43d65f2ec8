"""What this process may run on and what it used: the one place envfleet asks the OS for its
cores and its CPU time (the accounting ``bench`` and ``train`` report: cores used, other
processes' load)."""

from __future__ import annotations

import os


def usable_core_ids() -> list[int]:
    """The CPUs this process may run on (affinity-aware; empty where the OS does not say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return []


def usable_cores() -> int:
    """How many CPUs this process may run on (at least 1)."""
    return len(usable_core_ids()) or os.cpu_count() or 1


def capped_threads(requested: int) -> int:
    """``requested`` threads, at most the usable cores: more spinning threads than cores
    starve each other (torch's, in ``envfleet train``)."""
    return min(requested, usable_cores())


def tree_cpu_seconds(root: int | None = None) -> float | None:
    """CPU seconds used so far by process ``root`` (default: this one) and every live
    descendant (worker processes, a forkserver and its children), read from /proc."""
    root = os.getpid() if root is None else root
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:  # not Linux
        return None
    tick = os.sysconf("SC_CLK_TCK")
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid = int(name)
        parent[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    if root not in used:
        return None
    total = 0.0
    for pid in used:
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += used[pid]
    return total


def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its children)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        import resource
    except (OSError, ValueError, ImportError):  # not Linux
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # up to steal, not guests
    ours = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        ours += usage.ru_utime + usage.ru_stime
    return busy, ours


def background_load(before: tuple[float, float] | None, after: tuple[float, float] | None,
                    wall: float) -> float | None:
    """Cores kept busy by other processes (or the hypervisor) while a point ran."""
    if before is None or after is None or wall <= 0:
        return None
    others = (after[0] - before[0]) - (after[1] - before[1])
    return round(max(others, 0.0) / wall, 2)
