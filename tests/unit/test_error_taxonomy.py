"""One error hierarchy: every exception class the provisioner defines derives from
ProvisionerError, so callers and the API decide by type and attributes, never by text."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import provisioner
from provisioner.domain.errors import (
    CapacityError,
    ConfigError,
    InvalidArgument,
    NotKnown,
    ProvisionerError,
    ThrottlingError,
)


def _modules() -> list[str]:
    names = [provisioner.__name__]
    for info in pkgutil.walk_packages(provisioner.__path__, prefix="provisioner."):
        if ".migrations." in info.name or info.name.endswith("__main__"):
            continue  # migration scripts need Alembic's context; __main__ runs the CLI
        names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    seen: dict[str, type[BaseException]] = {}
    for name in _modules():
        mod = importlib.import_module(name)
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("provisioner."):
                seen[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(seen.values())


def test_every_exception_the_provisioner_defines_is_a_provisioner_error() -> None:
    classes = _exception_classes()
    # The walk must see the errors it is about, or it proves nothing.
    names = {c.__name__ for c in classes}
    for expected in ("StoreError", "IllegalTransition", "ReportError", "PriceUnknown"):
        assert expected in names
    assert "CommandTimeout" in names and "NvmlError" in names
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, ProvisionerError)
    )
    # The soak's stand-in for kill -9 is a BaseException on purpose: nothing may catch it.
    assert outside == ["provisioner.demo.chaos.Killed"]


@pytest.mark.parametrize(
    ("err", "retryable", "status"),
    [
        (ConfigError("policies/pools.yaml", "pools[0].max_nodes", "must be > 0"), False, 422),
        (InvalidArgument("max_age_s must not be negative"), False, 400),
        (NotKnown("no price for aws/us-east-1/p5"), False, 404),
        (ThrottlingError("slow down", code="Throttling"), True, 502),
        (CapacityError("no capacity", code="InsufficientInstanceCapacity"), False, 502),
    ],
)
def test_errors_say_whether_to_retry_and_what_to_answer(
    err: ProvisionerError, retryable: bool, status: int
) -> None:
    assert err.retryable is retryable
    assert err.http_status == status
    assert err.user_message == str(err)


def test_typed_errors_keep_their_builtin_meaning() -> None:
    # Older callers and validators catch ValueError / LookupError: still true.
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(NotKnown, LookupError)
    from provisioner.domain.instances import IllegalTransition
    from provisioner.ports.store import NotFound

    assert issubclass(IllegalTransition, ValueError)
    assert issubclass(NotFound, LookupError)


def test_no_module_raises_a_bare_builtin_exception() -> None:
    """`raise ValueError(...)` and friends bypass the hierarchy: the typed errors (which keep
    the built-in as a second base where callers catch it) are raised instead."""
    root = Path(provisioner.__file__).parent
    builtin_errors = {
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    # What a generator must raise, and what an abstract method says: not errors of ours.
    allowed = {"StopIteration", "NotImplementedError", "KeyboardInterrupt", "SystemExit"}
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in builtin_errors - allowed:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {exc.id}")
    assert found == []
