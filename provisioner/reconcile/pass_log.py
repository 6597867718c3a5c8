"""What an operator must see in the terminal, one line each: stale snapshots (with the cause),
pass errors, blocked bursts, and every action. Warnings are logged when they start, change or
end, not every pass, so a 1 s tick does not flood the terminal while slurmctld is down.

`PassLogger.on_pass` is given to the loop as its `on_pass`; `ControllerLoop` logs passes that
raise. Levels: WARNING for what needs attention, INFO for actions and recoveries (shown by
`provisioner run` by default), DEBUG for a summary of every pass (`-v`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from provisioner.domain.plan import Plan, ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.context import PassReport

log = logging.getLogger("provisioner.controller")

# A stale snapshot has its own warning; the decisions it blocks would only repeat it.
_BLOCKED = frozenset(
    r
    for r in ReasonCode
    if r.value.startswith("blocked_") and r is not ReasonCode.BLOCKED_STALE_SNAPSHOT
)


class PassLogger:
    def __init__(
        self,
        snapshot: Callable[[], ClusterSnapshot | None],
        plan: Callable[[], Plan | None],
        logger: logging.Logger = log,
    ) -> None:
        self._snapshot = snapshot
        self._plan = plan
        self.log = logger
        self._stale: tuple[str, ...] = ()
        self._errors: tuple[str, ...] = ()
        self._blocked: dict[str, str] = {}

    def on_pass(self, report: PassReport) -> None:
        snap = self._snapshot()
        self._log_stale(report, snap)
        self._log_errors(report)
        self._log_blocked(self._plan())
        self._log_actions(report)
        self.log.debug(
            "pass: %.2f s, %d decision(s), %d ledger row(s) $%s%s",
            report.seconds,
            report.decisions,
            report.ledger_rows,
            report.ledger_usd,
            " (stale snapshot)" if report.stale else "",
        )

    def _log_stale(self, report: PassReport, snap: ClusterSnapshot | None) -> None:
        reasons = tuple(snap.stale_reasons) if report.stale and snap is not None else ()
        if report.stale and not reasons:
            reasons = ("no fresh snapshot",)
        if reasons and reasons != self._stale:
            self.log.warning(
                "stale Slurm snapshot, nothing destructive is planned: %s", "; ".join(reasons)
            )
        elif not reasons and self._stale:
            self.log.info("Slurm snapshot fresh again")
        self._stale = reasons

    def _log_errors(self, report: PassReport) -> None:
        errors = tuple(report.errors)
        for e in errors:
            if e not in self._errors:
                self.log.warning("pass error: %s", e)
        if self._errors and not errors:
            self.log.info("pass completed without errors again")
        self._errors = errors

    def _log_blocked(self, plan: Plan | None) -> None:
        blocked: dict[str, str] = {}
        for d in plan.decisions if plan is not None else ():
            if d.reason not in _BLOCKED:
                continue
            subject = ",".join(d.job_ids) or d.reason.value
            why = d.detail.get("why", "")
            blocked[subject] = f"{d.reason.value}{': ' + why if why else ''}"
        for subject, text in sorted(blocked.items()):
            if self._blocked.get(subject) != text:
                self.log.warning("burst blocked for job(s) %s: %s", subject, text)
        self._blocked = blocked

    def _log_actions(self, report: PassReport) -> None:
        parts = [
            f"{n} {what}"
            for n, what in (
                (report.nodes_requested, "node(s) requested"),
                (report.adopted, "adopted"),
                (report.drained, "drained"),
                (report.terminated, "terminated"),
                (report.jobs_moved, "job(s) requeued"),
            )
            if n
        ]
        if parts:
            self.log.info("pass actions: %s", ", ".join(parts))


__all__ = ["PassLogger"]
