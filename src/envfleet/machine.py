"""What this process may run on: the one place envfleet asks the OS for its cores."""

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
