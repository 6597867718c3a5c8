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
* `mark_failed` / `handle_interruption`: take the node out of service with its work (never
  joined, spot interruption). See `_stop_work` for why the order is list, drain, list, down, and
  why the controller never requeues a job itself unless Slurm failed it.
* `warn_jobs`: a spot warning: drain, then `scancel --signal=<sig> --full` to the running jobs
  (the batch shell and every step), so they can checkpoint before the node is failed.
* `resume`: `state=resume`, back into service (a powered-down CLOUD node returns to `idle~`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from provisioner.command_runner import CommandResult, CommandRunner, CommandTimeout
from provisioner.domain.errors import InvalidArgument, ProvisionerError
from provisioner.domain.hostlist import join_hostlist

# Job states in which Slurm ended a job because its node failed, without requeueing it.
_NODE_FAILED = frozenset({"NODE_FAIL", "BOOT_FAIL"})


class SlurmControlError(ProvisionerError):
    """An scontrol/squeue call failed or timed out."""

    def __init__(self, message: str, *, argv: Sequence[str] = (), returncode: int | None = None):
        self.argv = tuple(argv)
        self.returncode = returncode
        super().__init__(message)


def _names(nodes: str | Iterable[str]) -> str:
    names = [nodes] if isinstance(nodes, str) else list(nodes)
    if not names or any(not n or any(c.isspace() for c in n) for n in names):
        raise InvalidArgument(f"bad node names: {names!r}")
    return join_hostlist(names)


def _reason(reason: str) -> str:
    text = " ".join(reason.split())
    if not text:
        raise InvalidArgument("Slurm needs a reason to drain or down a node")
    return text


class SlurmControl:
    def __init__(
        self,
        runner: CommandRunner,
        *,
        timeout_s: float = 15.0,
        scontrol: str = "scontrol",
        squeue: str = "squeue",
        scancel: str = "scancel",
    ) -> None:
        self._runner = runner
        self._timeout_s = timeout_s
        self._scontrol = scontrol
        self._squeue = squeue
        self._scancel = scancel

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
        """Take nodes that never joined (or broke) out of service: their jobs go back to the
        queue and the nodes end DOWN with the reason. Returns the ids of the jobs that were on
        them."""
        return self._stop_work(nodes, _reason(reason), "state=down")

    def handle_interruption(self, nodes: str | Iterable[str], reason: str) -> tuple[str, ...]:
        """A spot interruption notice: the instance is going away, so its jobs go back to the
        queue now and the node powers down so Slurm stops expecting it."""
        return self._stop_work(nodes, _reason(reason), "state=power_down_force")

    def warn_jobs(self, nodes: str | Iterable[str], signal: str, reason: str) -> tuple[str, ...]:
        """Drain the nodes (no new work) and send `signal` to the jobs running on them ("" sends
        none). Jobs are signalled by id, never by a node filter: `scancel -w` without
        `--signal` would cancel them. Returns the ids of the jobs signalled."""
        why = _reason(reason)
        if signal and not signal.isalnum():
            raise InvalidArgument(f"bad signal name {signal!r}")
        self.drain(nodes, why)
        jobs = self.jobs_on(nodes)
        if signal and jobs:
            self._checked([self._scancel, f"--signal={signal}", "--full", *jobs])
        return jobs if signal else ()

    def _stop_work(self, nodes: str | Iterable[str], why: str, final: str) -> tuple[str, ...]:
        """List, drain, list again, then the final state change, which makes Slurm kill and
        requeue the running jobs in one step of its own.

        Jobs are listed before the drain so that one Slurm moves in the meantime (requeued on
        its own, or ended) is still reported; and again after it, for one that started in
        between. The controller never runs `scontrol requeue` on a job that may have finished
        in between, since Slurm requeues finished jobs too and the job would run twice: only
        jobs that Slurm itself ended with NODE_FAIL or BOOT_FAIL (not requeueable by their own
        settings) are requeued, because the node, not the job, failed."""
        before = self.jobs_on(nodes)
        self.drain(nodes, why)
        jobs = tuple(dict.fromkeys(before + self.jobs_on(nodes)))
        self._update(nodes, final, f"reason={why}")
        failed = [j for j, state in self.job_states(jobs).items() if state in _NODE_FAILED]
        self.requeue(failed)
        return jobs

    # ------------------------------------------------------------------ jobs
    def jobs_on(self, nodes: str | Iterable[str]) -> tuple[str, ...]:
        """Ids of jobs running, configuring, completing or suspended on the nodes, and of jobs
        a failure of the nodes ended without requeueing them (still remembered by Slurm)."""
        res = self._checked(
            [self._squeue, "-h", "-w", _names(nodes), "-t", "R,CF,CG,S,NF,BF", "-o", "%i"]
        )
        ids = (line.strip() for line in res.stdout.splitlines())
        return tuple(dict.fromkeys(i for i in ids if i))

    def job_states(self, job_ids: Iterable[str]) -> dict[str, str]:
        """Slurm's state name (RUNNING, PENDING, COMPLETED, NODE_FAIL, ...) of each job it still
        remembers; finished jobs are remembered for MinJobAge."""
        ids = list(job_ids)
        if not ids:
            return {}
        fmt = ["-t", "all", "-o", "%i %T"]
        res = self._run([self._squeue, "-h", "-j", ",".join(ids), *fmt])
        if not res.ok:  # one id Slurm has already forgotten fails the whole `-j` query
            res = self._checked([self._squeue, "-h", *fmt])
        wanted = set(ids)
        states: dict[str, str] = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in wanted:
                states[parts[0]] = parts[1]
        return states

    def requeue(self, job_ids: Iterable[str]) -> tuple[str, ...]:
        """Requeue each job; one already pending is refused by Slurm and skipped. Slurm also
        requeues a finished job, so callers pass only jobs that must run again. Returns the ids
        Slurm accepted."""
        done: list[str] = []
        for jid in job_ids:
            res = self._run([self._scontrol, "requeue", jid])
            if res.ok:
                done.append(jid)
        return tuple(done)
