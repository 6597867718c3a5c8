"""GPU waste and health renderings (for `GET /v1/gpus/waste`, `GET /v1/gpus/alerts` in
`routes/gpus.py` and the console) and the `provisioner_gpu_*` metrics, all from the telemetry
the NVML agents pushed (see `provisioner.account.gpu_waste`).

`create_app` registers `GpuCollector` in its metrics registry. The policy (thresholds, prices,
teams) comes from `ApiDeps.policy`; without one the defaults of `Policy()` apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioner.account.gpu_waste import (
    AlertsReport,
    WasteItem,
    WasteReport,
    gpu_alerts,
    gpu_waste,
)
from provisioner.api.deps import ApiDeps, now_ts
from provisioner.api.render import iso
from provisioner.config.models import Policy
from provisioner.domain.telemetry_bounds import RULES


def policy_of(deps: ApiDeps) -> Policy:
    """The policy the API judges GPUs by: `deps.policy` (a Policy or a callable giving the
    current one), else the defaults."""
    p = getattr(deps, "policy", None)
    if p is None:
        return Policy()
    if isinstance(p, Policy):
        return p
    got = p()
    return got if isinstance(got, Policy) else Policy()


# --------------------------------------------------------------------------- rendering


def waste_item_dict(i: WasteItem) -> dict[str, Any]:
    return {
        "node": i.node,
        "node_kind": str(i.node_kind),
        "gpus": i.gpus,
        "basis": i.basis,
        "gpu_index": i.gpu_index,
        "gpu_uuid": i.gpu_uuid,
        "job_id": i.job_id,
        "candidate_jobs": list(i.candidate_jobs),
        "team": i.team,
        "account": i.account,
        "user": i.user,
        "partition": i.partition,
        "util_pct": i.util_pct,
        "mem_used_mib": i.mem_used_mib,
        "idle_since": iso(i.idle_since_ts),
        "idle_s": round(i.idle_s, 3),
        "usd_per_gpu_hour": str(i.usd_per_gpu_hour.normalize()),
        "usd_per_hour": str(i.usd_per_hour),
        "usd_so_far": str(i.usd_so_far),
    }


def waste_dict(r: WasteReport, now_ts: float, max_age_s: float) -> dict[str, Any]:
    def groups(key: Literal["team", "node", "job_id"], label: str) -> list[dict[str, Any]]:
        return [
            {label: k, "gpus": g, "usd_per_hour": str(h), "usd_so_far": str(s)}
            for k, (g, h, s) in r.by(key).items()
        ]

    return {
        "now": iso(now_ts),
        "max_age_s": max_age_s,
        "util_threshold_pct": r.util_threshold_pct,
        "mem_threshold_mib": r.mem_threshold_mib,
        "gpus": r.gpus,
        "usd_per_hour": str(r.usd_per_hour),
        "by_team": groups("team", "team"),
        "by_node": groups("node", "node"),
        "by_job": groups("job_id", "job_id"),
        "items": [waste_item_dict(i) for i in r.items],
        "silent_nodes": [
            {"node": n, "last_sample_at": iso(ts)} for n, ts in r.silent_nodes.items()
        ],
    }


def alerts_dict(r: AlertsReport, now_ts: float, max_age_s: float) -> dict[str, Any]:
    th = r.thresholds
    counts = {"critical": 0, "warning": 0}
    for a, _ in r.alerts:
        counts[a.severity] += 1
    return {
        "now": iso(now_ts),
        "max_age_s": max_age_s,
        "thresholds": {
            "temperature_warn_c": th.temperature_warn_c,
            "temperature_critical_c": th.temperature_critical_c,
            "ecc_dbe_volatile_max": th.ecc_dbe_volatile_max,
            "xid_critical": sorted(th.xid_critical),
            "xid_ignore": sorted(th.xid_ignore),
        },
        "counts": counts,
        "alerts": [{**a.model_dump(mode="json"), "sampled_at": iso(ts)} for a, ts in r.alerts],
        "silent_nodes": [
            {"node": n, "last_sample_at": iso(ts)} for n, ts in r.silent_nodes.items()
        ],
    }


# --------------------------------------------------------------------------- metrics


class GpuCollector(Collector):
    """`provisioner_gpu_allocated_idle{node,team}`, `provisioner_gpu_allocated_idle_usd_per_hour
    {team}` and `provisioner_gpu_health_alerts{node,kind,severity}`, computed at scrape time."""

    def __init__(self, deps: ApiDeps) -> None:
        self.deps = deps

    def collect(self) -> Iterator[Metric]:
        deps = self.deps
        now = now_ts(deps)
        policy = policy_of(deps)
        waste = gpu_waste(deps.store, policy, now)
        idle = GaugeMetricFamily(
            "provisioner_gpu_allocated_idle",
            "GPUs allocated by Slurm that NVML measures idle (at least), by node and team.",
            labels=["node", "team"],
        )
        per: dict[tuple[str, str], int] = {}
        for i in waste.items:
            per[(i.node, i.team)] = per.get((i.node, i.team), 0) + i.gpus
        for (node, team), n in sorted(per.items()):
            idle.add_metric([node, team], n)
        yield idle
        usd = GaugeMetricFamily(
            "provisioner_gpu_allocated_idle_usd_per_hour",
            "$/h of the allocated-but-idle GPUs, by team.",
            labels=["team"],
        )
        for team, (_, h, _) in waste.by("team").items():
            usd.add_metric([team], float(h))
        yield usd
        alerts = GaugeMetricFamily(
            "provisioner_gpu_health_alerts",
            "GPU health alerts in the latest telemetry, by node, kind and severity.",
            labels=["node", "kind", "severity"],
        )
        counts: dict[tuple[str, str, str], int] = {}
        for a, _ in gpu_alerts(deps.store, policy, now).alerts:
            key = (a.node, str(a.kind), str(a.severity))
            counts[key] = counts.get(key, 0) + 1
        for key, n in sorted(counts.items()):
            alerts.add_metric(list(key), n)
        yield alerts
        refused = CounterMetricFamily(
            "provisioner_telemetry_refused",
            "Telemetry this API refused since it started, by the rule broken: whole samples, "
            "and for rule job_tag the job tags dropped from samples that stood.",
            labels=["rule"],
        )
        by_rule, _ = deps.telemetry_guard.view()
        for rule in RULES:
            refused.add_metric([rule], by_rule.get(rule, 0))
        yield refused


def refusals_dict(deps: ApiDeps) -> dict[str, Any]:
    """The refusal counts per rule and the latest refusals (newest first), for the console."""
    by_rule, recent = deps.telemetry_guard.view()
    return {
        "counts": {rule: by_rule.get(rule, 0) for rule in RULES},
        "recent": [
            {"node": r.node, "rule": r.rule, "message": r.message, "at": iso(r.at_ts)}
            for r in reversed(recent)
        ],
    }


__all__ = ["GpuCollector", "alerts_dict", "policy_of", "refusals_dict", "waste_dict"]
