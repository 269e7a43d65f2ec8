"""The user's module of the id tests (``tests/native/mygrid.py``) by name, without importing it:
its ``module:Id`` id, and ``forget`` to make this process as fresh as a new one."""

from __future__ import annotations

import sys

from envfleet.registry import NATIVE_ENVS, unregister_native_env

MODULE = "tests.native.mygrid"
ENV_ID = "MyGrid-v0"
#: the id that imports the module first: what a user passes to ``make`` and the command line
MODULE_ID = f"{MODULE}:{ENV_ID}"


def forget() -> None:
    """Unregister MyGrid-v0 and forget its module, so that only an id naming the module (which
    imports it again) knows MyGrid-v0, as in a fresh process."""
    if ENV_ID in NATIVE_ENVS:
        unregister_native_env(ENV_ID)
    sys.modules.pop(MODULE, None)
