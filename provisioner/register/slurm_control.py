"""The `SlurmControl` adapter: every change the controller makes to Slurm's nodes and jobs.

All of it is `scontrol` through an injected `CommandRunner` (with a timeout), so the adapter works
from a daemon with no PATH and tests can record the exact commands. A failed command raises
`SlurmControlError` carrying the command and Slurm's message.

Node life in Slurm's power saving, as the controller drives it:

* `power_up`: `state=power_up`; Slurm calls ResumeProgram and waits for the node's slurmd.
* `set_address`: record the instance's address (`nodeaddr`, `nodehostname`) before it registers.
* `drain_and_power_down`: `state=power_down_asap`: no new jobs; running jobs finish; then
  SuspendProgram runs. A running job is never killed.
* `force_power_down`: `state=power_down_force`: now, killing and requeueing jobs (instance gone).
* `mark_failed`: drain, requeue its jobs, then `state=down` with a reason (never joined,
  interrupted).
* `resume`: `state=resume`, back into service (a powered-down CLOUD node returns to `idle~`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from provisioner.domain.errors import ProvisionerError
from provisioner.observe.slurm_hostlist import join_hostlist
from provisioner.observe.slurm_runner import CommandResult, CommandRunner, CommandTimeout


class SlurmControlError(ProvisionerError):
    """An scontrol/squeue call failed or timed out."""

    def __init__(self, message: str, *, argv: Sequence[str] = (), returncode: int | None = None):
        self.argv = tuple(argv)
        self.returncode = returncode
        super().__init__(message)


def _names(nodes: str | Iterable[str]) -> str:
    names = [nodes] if isinstance(nodes, str) else list(nodes)
    if not names or any(not n or any(c.isspace() for c in n) for n in names):
        raise ValueError(f"bad node names: {names!r}")
    return join_hostlist(names)


def _reason(reason: str) -> str:
    text = " ".join(reason.split())
    if not text:
        raise ValueError("Slurm needs a reason to drain or down a node")
    return text


class SlurmControl:
    def __init__(
        self,
        runner: CommandRunner,
        *,
        timeout_s: float = 15.0,
        scontrol: str = "scontrol",
        squeue: str = "squeue",
    ) -> None:
        self._runner = runner
        self._timeout_s = timeout_s
        self._scontrol = scontrol
        self._squeue = squeue

    # ------------------------------------------------------------------ plumbing
    def _run(self, argv: list[str]) -> CommandResult:
        try:
            return self._runner.run(argv, timeout_s=self._timeout_s)
        except CommandTimeout as exc:
            raise SlurmControlError(str(exc), argv=argv) from None
        except OSError as exc:
            raise SlurmControlError(f"`{' '.join(argv)}` could not run: {exc}", argv=argv) from None

    def _checked(self, argv: list[str]) -> CommandResult:
        res = self._run(argv)
        if not res.ok:
            raise SlurmControlError(res.describe(), argv=argv, returncode=res.returncode)
        return res

    def _update(self, nodes: str | Iterable[str], *settings: str) -> None:
        self._checked([self._scontrol, "update", f"nodename={_names(nodes)}", *settings])

    # ------------------------------------------------------------------ nodes
    def power_up(self, nodes: str | Iterable[str]) -> None:
        self._update(nodes, "state=power_up")

    def drain_and_power_down(self, nodes: str | Iterable[str], reason: str) -> None:
        self._update(nodes, "state=power_down_asap", f"reason={_reason(reason)}")

    def force_power_down(self, nodes: str | Iterable[str], reason: str) -> None:
        self._update(nodes, "state=power_down_force", f"reason={_reason(reason)}")

    def drain(self, nodes: str | Iterable[str], reason: str) -> None:
        self._update(nodes, "state=drain", f"reason={_reason(reason)}")

    def resume(self, nodes: str | Iterable[str]) -> None:
        self._update(nodes, "state=resume")

    def set_address(self, node: str, address: str, hostname: str | None = None) -> None:
        settings = [f"nodeaddr={address}", f"nodehostname={hostname or address}"]
        self._update(node, *settings)

    def mark_failed(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]:
        """Drain (no new work), requeue the jobs on the nodes, then mark them DOWN with the
        reason. Returns the ids of the jobs that were on them."""
        why = _reason(reason)
        self.drain(nodes, why)
        jobs = self.jobs_on(nodes)
        self.requeue(jobs)
        self._update(nodes, "state=down", f"reason={why}")
        return jobs

    def handle_interruption(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]:
        """A spot interruption notice: drain and requeue now (the instance is going away), then
        power the node down so Slurm stops expecting it."""
        why = _reason(reason)
        self.drain(nodes, why)
        jobs = self.jobs_on(nodes)
        self.requeue(jobs)
        self.force_power_down(nodes, why)
        return jobs

    # ------------------------------------------------------------------ jobs
    def jobs_on(self, nodes: str | Iterable[str]) -> tuple[str, ...]:
        """Ids of jobs running, configuring or completing on the nodes."""
        res = self._checked(
            [self._squeue, "-h", "-w", _names(nodes), "-t", "R,CF,CG,S", "-o", "%i"]
        )
        ids = (line.strip() for line in res.stdout.splitlines())
        return tuple(dict.fromkeys(i for i in ids if i))

    def requeue(self, job_ids: Iterable[str]) -> tuple[str, ...]:
        """Requeue each job; ones Slurm already requeued or ended are skipped. Returns the ids
        Slurm accepted."""
        done: list[str] = []
        for jid in job_ids:
            res = self._run([self._scontrol, "requeue", jid])
            if res.ok:
                done.append(jid)
        return tuple(done)
