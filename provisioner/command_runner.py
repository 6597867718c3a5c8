"""Running Slurm's commands: a tiny injected port, so observers and the control adapter never
spawn processes themselves and tests can hand them recorded output."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from provisioner.domain.errors import ProvisionerError, SnapshotError

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        err = self.stderr.strip().splitlines()
        tail = err[-1] if err else self.stdout.strip()[:200]
        return f"`{' '.join(self.argv)}` exited {self.returncode}: {tail}"


class CommandTimeout(ProvisionerError):
    """A command (scontrol, squeue, sacct) ran past its time limit and was killed."""

    retryable = True
    http_status = 504

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        super().__init__(f"`{' '.join(argv)}` timed out after {timeout_s:g} s")


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        """Run argv; raise CommandTimeout past timeout_s, OSError when it cannot start."""
        ...


class SubprocessRunner:
    """Runs commands with an explicit environment: the given SLURM_CONF and a system PATH
    added to the caller's, so it works from a daemon or a Slurm hook with no PATH. `bin_dir`, when
    given, comes first in PATH: the folder of the Slurm commands to use (a site's own build, or
    the test harness's wrappers into its Slurm 24.11 root)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        slurm_conf: str | None = None,
        bin_dir: str | None = None,
    ) -> None:
        base = dict(os.environ if env is None else env)
        path = base.get("PATH", "")
        base["PATH"] = f"{path}:{SYSTEM_PATH}" if path else SYSTEM_PATH
        if bin_dir:
            base["PATH"] = f"{bin_dir}:{base['PATH']}"
        if slurm_conf:
            base["SLURM_CONF"] = slurm_conf
        self._env = base

    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        try:
            proc = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=self._env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CommandTimeout(argv, timeout_s) from None
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def run_observed(runner: CommandRunner, argv: list[str], *, timeout_s: float) -> CommandResult:
    """Run a read-only Slurm command for an observer: a timeout, or a command that cannot start,
    raises SnapshotError (the pass marks its view stale). A non-zero exit is the caller's call."""
    try:
        return runner.run(argv, timeout_s=timeout_s)
    except CommandTimeout as exc:
        raise SnapshotError(str(exc)) from None
    except OSError as exc:
        raise SnapshotError(f"`{' '.join(argv)}` could not run: {exc}") from None
