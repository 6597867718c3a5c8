"""`JobControl` over scontrol: set a pending job's partition list, release a held job."""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.command_runner import CommandResult, CommandRunner, CommandTimeout
from provisioner.domain.errors import InvalidArgument
from provisioner.register.slurm_control import SlurmControlError


class ScontrolJobControl:
    """`scontrol update jobid=<id> partition=<a,b>` through the injected runner."""

    def __init__(
        self, runner: CommandRunner, *, timeout_s: float = 15.0, scontrol: str = "scontrol"
    ) -> None:
        self._runner = runner
        self._timeout_s = timeout_s
        self._scontrol = scontrol

    def set_partitions(self, job_id: str, partitions: Sequence[str]) -> None:
        parts = [p for p in partitions if p]
        if not job_id or not job_id.replace("_", "").isalnum() or not parts:
            raise InvalidArgument(f"bad job update: {job_id!r} -> {partitions!r}")
        if any(not p.replace("-", "").replace("_", "").isalnum() for p in parts):
            raise InvalidArgument(f"bad partition names: {parts!r}")
        self._run([self._scontrol, "update", f"jobid={job_id}", f"partition={','.join(parts)}"])

    def release(self, job_id: str) -> None:
        if not job_id or not job_id.replace("_", "").isalnum():
            raise InvalidArgument(f"bad job id to release: {job_id!r}")
        self._run([self._scontrol, "release", job_id])

    def _run(self, argv: list[str]) -> None:
        try:
            res: CommandResult = self._runner.run(argv, timeout_s=self._timeout_s)
        except CommandTimeout as exc:
            raise SlurmControlError(str(exc), argv=argv) from None
        except OSError as exc:
            raise SlurmControlError(f"`{' '.join(argv)}` could not run: {exc}", argv=argv) from None
        if not res.ok:
            raise SlurmControlError(res.describe(), argv=argv, returncode=res.returncode)
