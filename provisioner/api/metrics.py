"""Prometheus metrics, prefix `provisioner_`, computed from the store (and the latest snapshot
when the controller provides one) at scrape time, in a registry of the app's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioner.account.budgets import budget_status, with_forecasts
from provisioner.domain.cloud_clock import WARN_SKEW_S
from provisioner.domain.instances import InstanceState
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.ports.store import ControllerStore


class ProvisionerCollector(Collector):
    def __init__(
        self,
        store: ControllerStore,
        now_ts: Callable[[], float],
        snapshot: Callable[[], ClusterSnapshot | None] | None = None,
    ) -> None:
        self.store = store
        self.now_ts = now_ts
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot() if self.snapshot is not None else None
        if snap is not None:
            pending = GaugeMetricFamily(
                "provisioner_pending_gpu_demand",
                "GPUs requested by pending jobs in the latest snapshot.",
                labels=["partition"],
            )
            by_part: dict[str, int] = {}
            for j in snap.pending:
                by_part[j.partition] = by_part.get(j.partition, 0) + j.gpus
            for part, gpus in sorted(by_part.items()):
                pending.add_metric([part], gpus)
            yield pending
            yield GaugeMetricFamily(
                "provisioner_pending_gpus",
                "GPUs requested by all pending jobs in the latest snapshot.",
                value=sum(by_part.values()),
            )
            nodes = GaugeMetricFamily(
                "provisioner_nodes", "Scheduler nodes by kind and state.", labels=["kind", "state"]
            )
            counts: dict[tuple[str, str], int] = {}
            for n in snap.nodes:
                key = (str(n.kind), str(n.state))
                counts[key] = counts.get(key, 0) + 1
            for (kind, state), c in sorted(counts.items()):
                nodes.add_metric([kind, state], c)
            yield nodes
            yield GaugeMetricFamily(
                "provisioner_snapshot_stale",
                "1 when the latest snapshot is stale or partial.",
                value=1 if snap.stale else 0,
            )

        inst = GaugeMetricFamily(
            "provisioner_instances", "Cloud instances by lifecycle state.", labels=["state"]
        )
        counts_by_state = self.store.instance_counts()
        for st in InstanceState:
            inst.add_metric([str(st)], counts_by_state.get(str(st), 0))
        yield inst

        yield GaugeMetricFamily(
            "provisioner_cloud_usd_per_hour",
            "$/h of every cloud instance requested or alive.",
            value=float(self.store.cloud_usd_per_hour()),
        )

        skews = self.store.cloud_skews()
        skew = GaugeMetricFamily(
            "provisioner_cloud_clock_skew_seconds",
            "A cloud account's clock minus the controller's, as last measured (its stamps are "
            "translated by it).",
            labels=["cloud", "account"],
        )
        over = GaugeMetricFamily(
            "provisioner_cloud_clock_skew_warning",
            f"1 when a cloud account's clock is more than {WARN_SKEW_S:g} s off the controller's.",
            labels=["cloud", "account"],
        )
        for e in skews:
            skew.add_metric([e.cloud, e.account], e.skew_s)
            over.add_metric([e.cloud, e.account], 1 if e.warning else 0)
        yield skew
        yield over

        status = with_forecasts(self.store, budget_status(self.store, self.now_ts()))
        used = GaugeMetricFamily(
            "provisioner_budget_used_ratio",
            "Cloud spend this month over the team's monthly budget.",
            labels=["team"],
        )
        spent = GaugeMetricFamily(
            "provisioner_budget_spent_usd", "Cloud spend this month, $.", labels=["team"]
        )
        forecast = GaugeMetricFamily(
            "provisioner_budget_forecast_usd",
            "Month-end forecast of cloud spend, $.",
            labels=["team"],
        )
        for t in status.teams:
            spent.add_metric([t.team], float(t.spent_usd))
            forecast.add_metric([t.team], float(t.forecast_usd))
            if t.used_ratio is not None:
                used.add_metric([t.team], t.used_ratio)
        yield used
        yield spent
        yield forecast
        if status.global_usd_per_hour is not None and status.global_usd_per_hour > 0:
            yield GaugeMetricFamily(
                "provisioner_budget_global_used_ratio",
                "Cloud $/h now over the global $/h cap.",
                value=float(status.burn_usd_hr / status.global_usd_per_hour),
            )

        decisions = CounterMetricFamily(
            "provisioner_decisions", "Planner decisions recorded, by reason.", labels=["reason"]
        )
        for reason, count in sorted(self.store.decision_counts().items()):
            decisions.add_metric([reason], count)
        yield decisions

        failed = CounterMetricFamily(
            "provisioner_scale_up_failures",
            "Scale-up cloud calls that failed, by error code.",
            labels=["reason"],
        )
        for reason, count in sorted(self.store.failed_intent_counts("scale_up").items()):
            failed.add_metric([reason], count)
        yield failed

        op = self.store.operator_state()
        yield GaugeMetricFamily(
            "provisioner_paused", "1 while bursting is paused by an operator.", value=int(op.paused)
        )
        yield GaugeMetricFamily(
            "provisioner_sweep_held",
            "1 while the orphan sweep's safety valve holds: the store and the clouds disagree "
            "about more instances than allowed, and nothing is terminated until an operator "
            "approves.",
            value=int(bool(op.sweep_hold_reason) and not op.sweep_approved),
        )
        drained = GaugeMetricFamily(
            "provisioner_pool_drained", "1 for a pool an operator drained.", labels=["pool"]
        )
        for p in self.store.pools():
            drained.add_metric([p.name], int(p.drained))
        yield drained


class PassCollector(Collector):
    """The loop's health from its status: passes that raised, and the last pass's errors."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        st = self.status()
        if "failed_passes" in st:
            yield CounterMetricFamily(
                "provisioner_reconcile_pass_failures",
                "Reconcile passes that raised (a bug or a store outage; the log has the cause).",
                value=int(st["failed_passes"]),
            )
        lead = st.get("leadership")
        if isinstance(lead, Mapping):
            leader = GaugeMetricFamily(
                "provisioner_leader",
                "1 for the controller that holds the leader lease, as this process last saw it "
                "(label holder: its id).",
                labels=["holder"],
            )
            if lead.get("leader"):
                leader.add_metric([str(lead["leader"])], 1)
            yield leader
            yield GaugeMetricFamily(
                "provisioner_is_leader",
                "1 while this process leads (plans and acts), 0 while it stands by.",
                value=int(lead.get("role") == "leader"),
            )
            yield CounterMetricFamily(
                "provisioner_fenced_writes_refused",
                "Writes the store refused because they carried a stale fencing token.",
                value=int(lead.get("fenced_writes_refused", 0)),
            )
        if "last_pass_errors" in st:
            yield GaugeMetricFamily(
                "provisioner_last_pass_errors",
                "Errors the last reconcile pass reported (see /v1/status).",
                value=len(st["last_pass_errors"]),
            )


def make_registry(collector: ProvisionerCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
