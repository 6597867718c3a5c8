"""Pulumi Automation API `PoolDriver`: one stack per node group, the inline program `pool_program`.

Used only where the `pulumi` CLI is installed (`drivers.select_pool_driver`): the engine lives in
the CLI, so without it Automation API cannot even create a stack. The stack operations are an
injected dependency (`StackFactory`) so the driver is unit-tested with a fake; `AutomationStacks`
is the real one (local file backend by default, `pulumi` imported lazily). At most one operation
runs per stack: an in-process lock here, and the backend's own stack lock across processes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from tenacity import Retrying

from provisioner.act.ports import PoolSpec
from provisioner.act.retry import call_mapped, cloud_retrying
from provisioner.domain.errors import CloudError, TransientError

log = logging.getLogger(__name__)

PoolProgram = Callable[[PoolSpec], object]
PROJECT = "gpu-burst-pools"


class StackOps(Protocol):
    def up(self) -> Mapping[str, Any]: ...

    def preview(self) -> Mapping[str, int]: ...

    def destroy(self) -> None: ...


class StackFactory(Protocol):
    def select(
        self, name: str, program: Callable[[], object], config: Mapping[str, str]
    ) -> StackOps: ...

    def remove(self, name: str) -> None: ...


def load_pool_program() -> PoolProgram:
    """`build_pool` of `provisioner.act.pool_program`, imported when first needed: the module
    imports `pulumi`, an optional extra."""
    from provisioner.act.pool_program import build_pool

    return build_pool


def stack_config(spec: PoolSpec) -> dict[str, str]:
    if spec.cloud == "aws":
        return {"aws:region": spec.region}
    cfg = {"gcp:region": spec.region}
    if spec.project:
        cfg["gcp:project"] = spec.project
    return cfg


class _StackLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        if not lock.acquire(blocking=False):
            raise TransientError(f"stack {name} has an operation in flight", code="StackBusy")
        try:
            yield
        finally:
            lock.release()


def map_pulumi_error(exc: Exception) -> CloudError:
    if isinstance(exc, CloudError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return CloudError(f"pulumi CLI not found: {exc}", code="PulumiCliMissing")
    from pulumi.automation import errors as perr

    if isinstance(exc, perr.ConcurrentUpdateError):
        return TransientError(f"pulumi: {exc}", code="ConcurrentUpdate")
    if isinstance(exc, perr.CommandError):
        return CloudError(f"pulumi: {exc}", code="PulumiCommandError")
    raise exc


class PulumiPoolDriver:
    def __init__(
        self,
        stacks: StackFactory,
        program: PoolProgram,
        *,
        retrying: Retrying | None = None,
    ) -> None:
        self.stacks = stacks
        self.program = program
        self.retrying = retrying or cloud_retrying()
        self._locks = _StackLocks()

    def _run(self, name: str, fn: Callable[[], Any]) -> Any:
        def locked() -> Any:
            with self._locks.hold(name):
                return fn()

        return call_mapped(self.retrying, locked, map_pulumi_error)

    def _stack(self, spec: PoolSpec) -> StackOps:
        def program() -> None:
            self.program(spec)

        return self.stacks.select(spec.group_name, program, stack_config(spec))

    def ensure(self, spec: PoolSpec) -> None:
        outputs = self._run(spec.group_name, lambda: self._stack(spec).up())
        log.info("pulumi up %s: %s", spec.group_name, dict(outputs))

    def preview(self, spec: PoolSpec) -> Mapping[str, int]:
        result: Mapping[str, int] = self._run(spec.group_name, lambda: self._stack(spec).preview())
        return result

    def delete(self, spec: PoolSpec) -> None:
        def destroy() -> None:
            self._stack(spec).destroy()
            self.stacks.remove(spec.group_name)

        self._run(spec.group_name, destroy)


class _AutoStack:
    def __init__(self, stack: Any) -> None:
        self.stack = stack

    def up(self) -> Mapping[str, Any]:
        res = self.stack.up(on_output=log.info, color="never")
        return {k: v.value for k, v in res.outputs.items()}

    def preview(self) -> Mapping[str, int]:
        res = self.stack.preview(on_output=log.info, color="never")
        return {str(k): int(v) for k, v in (res.change_summary or {}).items()}

    def destroy(self) -> None:
        self.stack.destroy(on_output=log.info, color="never")


class AutomationStacks:
    """The real `StackFactory` over `pulumi.automation` (needs the `pulumi` CLI on PATH)."""

    def __init__(
        self,
        backend_url: str | None = None,
        *,
        project: str = PROJECT,
        env: Mapping[str, str] | None = None,
        state_dir: Path | None = None,
    ) -> None:
        if backend_url is None:
            root = state_dir or Path.home() / ".local" / "state" / "gpu-burst" / "pulumi"
            root.mkdir(parents=True, exist_ok=True)
            backend_url = root.as_uri()
        self.backend_url = backend_url
        self.project = project
        # The local backend encrypts stack secrets with a passphrase; none are stored here.
        self.env = {"PULUMI_CONFIG_PASSPHRASE": "", **(env or {})}

    def _settings(self) -> Any:
        from pulumi import automation as auto

        return auto.ProjectSettings(
            name=self.project, runtime="python", backend=auto.ProjectBackend(url=self.backend_url)
        )

    def _opts(self) -> Any:
        from pulumi import automation as auto

        return auto.LocalWorkspaceOptions(
            project_settings=self._settings(),
            env_vars=dict(self.env),
            secrets_provider="passphrase",
        )

    def select(
        self, name: str, program: Callable[[], object], config: Mapping[str, str]
    ) -> StackOps:
        from pulumi import automation as auto

        def run() -> None:
            program()

        stack = auto.create_or_select_stack(
            stack_name=name, project_name=self.project, program=run, opts=self._opts()
        )
        for key, value in config.items():
            stack.set_config(key, auto.ConfigValue(value=value))
        return _AutoStack(stack)

    def remove(self, name: str) -> None:
        from pulumi import automation as auto

        ws = auto.LocalWorkspace(project_settings=self._settings(), env_vars=dict(self.env))
        ws.remove_stack(name)
