"""Account: what a pass bills. Job usage from the snapshot goes to the store, the accountant
writes the instances' ledger rows up to now, and the on-prem nodes' energy is billed from the
NVML agents' samples."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from provisioner.account.energy import bill_energy
from provisioner.account.ledger import Accountant, AccountingResult
from provisioner.config.models import Policy
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.domain.records import JobUsage
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.usage import UsageTracker
from provisioner.plan.board_power import node_power_bounds
from provisioner.ports.store import GpuUsageLog, InstanceRepo, JobHistory, Ledger, TelemetryRepo
from provisioner.reconcile.context import PassReport
from provisioner.reconcile.jobs_step import JobsRecorder

PRUNE_EVERY_S = 3600.0


class AccountingStore(InstanceRepo, Ledger, TelemetryRepo, JobHistory, GpuUsageLog, Protocol):
    """What the accounting step reads and writes: the instances and jobs billed, the ledger,
    GPU telemetry (energy, and its retention), the jobs table and the hourly GPU usage."""


class AccountingStep:
    """Holds the usage tracker and which usage rows were written, so a pass writes only the
    records that changed."""

    def __init__(self, store: AccountingStore, policy: Policy, accountant: Accountant) -> None:
        self.store = store
        self.policy = policy
        self.accountant = accountant
        self.tracker = UsageTracker()
        self._usage_written: dict[tuple[str, str, float], float | None] = {}
        self._pruned_ts: float | None = None
        self.jobs = JobsRecorder(store, policy)  # the loop records; retention prunes here
        self.closed: tuple[JobUsage, ...] = ()  # the records the last pass closed

    def run(
        self,
        view: ClusterSnapshot,
        now: float,
        report: PassReport,
        missing: Mapping[str, float] | None = None,
    ) -> None:
        """`missing`: when a complete listing first lacked each live record's instance (billed
        no further, see `account.ledger.billing_window`)."""
        self.closed = ()
        if not view.stale:
            self._record_usage(view, now)
        res: AccountingResult = self.accountant.run(now, missing)
        report.ledger_rows = res.rows
        report.ledger_usd = res.cost
        onprem = {n.name for n in view.nodes if n.kind is NodeKind.ONPREM}
        if onprem and not view.stale:
            energy = bill_energy(
                self.store,
                self.policy,
                now,
                onprem_nodes=onprem,
                power_bound_w=node_power_bounds(view.nodes, self.policy.telemetry.max_power_w),
            )
            report.ledger_rows += energy.rows
            report.ledger_usd += energy.cost
        self._prune(now)

    def _prune(self, now: float) -> None:
        """Telemetry and jobs retention, at most once per PRUNE_EVERY_S (a DELETE per pass is
        waste)."""
        if self._pruned_ts is not None and now - self._pruned_ts < PRUNE_EVERY_S:
            return
        self.store.prune_telemetry(now - self.policy.telemetry.retention_s)
        self.jobs.prune(now)
        self._pruned_ts = now

    def _record_usage(self, view: ClusterSnapshot, now: float) -> None:
        closed = self.tracker.update(view.jobs, now, view.nodes)
        self.closed = closed
        open_ = self.tracker.open_records
        kinds = {n.name: n for n in view.nodes}
        live = {
            si.instance.node_name: si.instance
            for si in self.store.instances()
            if si.instance.node_name
            and (not si.instance.state.terminal or (si.ended_ts or now) >= now - 3600)
        }
        team_for = self.policy.budgets.team_for
        rows: list[JobUsage] = []

        def usage(r: JobUsage) -> JobUsage | None:
            node = kinds.get(r.node_name)
            inst = live.get(r.node_name)
            if r.end_ts is None and node is not None and node.state is NodeState.POWERING_UP:
                return None  # allocated to a booting node: its GPU time starts when it is up
            if node is not None and node.kind is NodeKind.ONPREM:
                iid, pool = "", ""
            elif inst is not None:
                iid, pool = inst.instance_id, inst.pool
            else:
                return None  # a burst node with no instance known: nothing to charge it to
            return replace(r, instance_id=iid, pool=pool, team=team_for(r.account))

        for r in (*closed, *open_):
            key = (r.job_id, r.node_name, r.start_ts)
            if key in self._usage_written and self._usage_written[key] == r.end_ts:
                continue
            u = usage(r)
            if u is not None:
                rows.append(u)
                self._usage_written[key] = r.end_ts
        # Open rows in the store the tracker no longer holds open: Slurm reset the job's start
        # (its node powered up) or the job ended while the controller was down.
        current = {(r.job_id, r.node_name): r.start_ts for r in open_}
        done = {(r.job_id, r.node_name, r.start_ts) for r in closed}
        ends = {j.job_id: j.end_ts for j in view.jobs}
        for u in self.store.job_usage(overlapping=(now, now + 1.0)):
            if u.end_ts is not None:
                continue
            key2 = (u.job_id, u.node_name)
            if current.get(key2) == u.start_ts or (u.job_id, u.node_name, u.start_ts) in done:
                continue
            end = u.start_ts if key2 in current else (ends.get(u.job_id) or now)
            rows.append(replace(u, end_ts=max(end, u.start_ts)))
            self._usage_written[(u.job_id, u.node_name, u.start_ts)] = end
        if rows:
            self.store.record_job_usage(rows)
        if len(self._usage_written) > 50_000:
            self._usage_written = {k: v for k, v in self._usage_written.items() if v is None}
