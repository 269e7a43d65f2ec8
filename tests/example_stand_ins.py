"""Stand-ins for CleanRL's two script dependencies that the test venv lacks (``tyro``'s
``cli(Args)`` and ``torch.utils.tensorboard.SummaryWriter``), so tests/test_examples.py runs
examples/cleanrl_ppo.py as written; where the real packages are installed they are used."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from typing import Any

#: the top-level modules stood in for (``torch.utils.tensorboard`` is inside torch)
STANDS_IN = ("tyro",)


def cli(cls: type) -> Any:
    """``tyro.cli``'s subset the tests use: ``--kebab-name VALUE`` for an int, float or str
    field of the dataclass (tyro's boolean flags take no value: the tests pass none)."""
    args, values = sys.argv[1:], {}
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        field = fields[flag.removeprefix("--")]
        values[field.name] = type(field.default)(value)
    return cls(**values)


class SummaryWriter:
    """A ``SummaryWriter`` that keeps nothing: the example's scalars are not under test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_text(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def install() -> list[str]:
    """Put a stand-in in ``sys.modules`` for each of the two that is missing; their names."""
    installed = []
    if importlib.util.find_spec("tyro") is None:
        sys.modules["tyro"] = types.SimpleNamespace(cli=cli)  # type: ignore[assignment]
        installed.append("tyro")
    if importlib.util.find_spec("tensorboard") is None:
        module = types.ModuleType("torch.utils.tensorboard")
        module.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
        sys.modules["torch.utils.tensorboard"] = module
        installed.append("tensorboard")
    return installed
