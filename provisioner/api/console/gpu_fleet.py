"""The GPUs page's fleet: every GPU the site pays for, on-prem and cloud, grouped by node.

On-prem nodes come from the latest Slurm snapshot, cloud nodes from the live instances (booting
and draining ones too: they are paid for), and each node's GPUs carry their latest NVML sample
where an agent pushed one. Who runs what comes from the snapshot's running jobs.

A MIG-enabled GPU lists its slices from the node's latest whole payload: profile, memory and the
jobs whose processes run there. NVML reports no utilisation per MIG instance, so a slice has
none. On-prem nodes count their physical GPUs (a MIG node's slices are not GPUs of their own),
and their MIG devices and shards as Slurm states them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from provisioner.api import render
from provisioner.api.deps import ApiDeps
from provisioner.api.telemetry_views import policy_of
from provisioner.domain.gpu_share import NodeShares
from provisioner.domain.instances import IN_FLIGHT, InstanceState
from provisioner.domain.nodes import NodeKind
from provisioner.domain.snapshot import ClusterSnapshot

_LEAVING = (InstanceState.DRAINING, InstanceState.TERMINATING)


def gpu_fleet(deps: ApiDeps) -> dict[str, Any]:
    """Nodes (on-prem first, then cloud, each by name) with their GPUs, their jobs now, their
    $/h, and a `phase` of "booting", "draining" or "serving" for cloud nodes."""
    snap = deps.snapshot() if deps.snapshot is not None else None
    policy = policy_of(deps)
    samples = {t.node: render.telemetry_dict(t) for t in deps.store.telemetry(None)}
    slices = {p.node: _slices(p.payload) for p in deps.store.telemetry_payloads(None)}
    jobs = _jobs_by_node(snap, policy.budgets.team_for)
    gpu_price = policy.onprem.amortized_usd_per_gpu_hour
    nodes: list[dict[str, Any]] = []
    if snap is not None:
        for n in sorted(snap.nodes_of(NodeKind.ONPREM), key=lambda n: n.name):
            gpus = n.physical_gpus
            row = _node(n.name, "on-prem", gpus, str(n.state), gpu_price * gpus, samples, jobs)
            row["shares"] = _slurm_shares(n.shares)
            nodes.append(row)
    for si in sorted(
        deps.store.instances(live_only=True),
        key=lambda si: si.instance.node_name or si.instance.instance_id,
    ):
        i = si.instance
        phase = (
            "booting" if i.state in IN_FLIGHT else "draining" if i.state in _LEAVING else "serving"
        )
        row = _node(
            i.node_name or i.instance_id, "cloud", i.gpus, phase, i.price_usd_hr, samples, jobs
        )
        row.update(instance_id=i.instance_id, pool=i.pool, gpu_model=i.gpu_model)
        nodes.append(row)
    shown = {n["node"] for n in nodes}
    for name in sorted(set(samples) - shown):  # an agent on a node neither view holds now
        nodes.append(
            _node(name, "unknown", 0, "not in the last snapshot", Decimal(0), samples, jobs)
        )
    for row in nodes:
        for x in row["gpu_rows"]:
            x["slices"] = slices.get(row["node"], {}).get(x["index"], [])
    cloud = [n for n in nodes if n["kind"] == "cloud"]
    idle = [n for n in cloud if n["phase"] == "serving" and not n["jobs"]]
    return {
        "nodes": nodes,
        "any_mig": any(x["slices"] for n in nodes for x in n["gpu_rows"]),
        "gpus_onprem": sum(n["gpus"] for n in nodes if n["kind"] == "on-prem"),
        "gpus_cloud": sum(n["gpus"] for n in cloud),
        "cloud_usd_hr": f"{sum((Decimal(n['usd_hr']) for n in cloud), Decimal(0)):.6f}",
        "cloud_idle_nodes": len(idle),
        "cloud_idle_usd_hr": f"{sum((Decimal(n['usd_hr']) for n in idle), Decimal(0)):.6f}",
        "booting": sum(1 for n in cloud if n["phase"] == "booting"),
        "draining": sum(1 for n in cloud if n["phase"] == "draining"),
    }


def _phase(state: InstanceState) -> str:
    """A cloud node as the page marks it: paid for while booting and draining too."""
    if state in IN_FLIGHT:
        return "booting"
    return "draining" if state in _LEAVING else "serving"


def _jobs_by_node(snap: ClusterSnapshot | None, team_for: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for j in snap.running if snap is not None else ():
        for n in j.nodes:
            out[n].append({"job_id": j.job_id, "team": team_for(j.account), "gpus": j.gpus,
                           "user": j.user,
                           "share": j.share.label if j.share is not None else ""})  # fmt: skip
    return out


def _node(
    name: str,
    kind: str,
    gpus: int,
    phase: str,
    usd_hr: Decimal,
    samples: dict[str, dict[str, Any]],
    jobs: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """One node: a row per GPU it has (or that its agent reports), sampled or not."""
    sampled = {g["index"]: g for g in samples.get(name, {}).get("gpus", [])}
    indexes = sorted(set(range(gpus)) | set(sampled))
    return {
        "node": name,
        "kind": kind,
        "phase": phase,
        "gpus": gpus,
        "usd_hr": f"{usd_hr:.6f}",
        "jobs": jobs.get(name, []),
        "gpu_rows": [dict(sampled.get(i, {"index": i, "unsampled": True})) for i in indexes],
    }


def _slices(payload: Mapping[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """A node's MIG instances by GPU index, from its latest whole payload."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in payload.get("mig_instances") or ():
        if not isinstance(m, dict) or not isinstance(m.get("gpu_index"), int):
            continue
        out[m["gpu_index"]].append(
            {
                "profile": str(m.get("profile") or "?"),
                "gpu_instance_id": m.get("gpu_instance_id"),
                "mem_used_mib": m.get("mem_used_mib"),
                "mem_total_mib": m.get("mem_total_mib"),
                "jobs": [str(j) for j in m.get("jobs") or ()],
            }
        )
    for rows in out.values():
        rows.sort(key=lambda r: (r["gpu_instance_id"] is None, r["gpu_instance_id"] or 0))
    return out


def _slurm_shares(shares: NodeShares | None) -> dict[str, Any] | None:
    """What Slurm says the node offers in parts of GPUs, for the node's heading."""
    if shares is None:
        return None
    return {
        "mig": [
            {"type": d.gres_type, "total": d.total, "free": d.total - d.used} for d in shares.mig
        ],
        "shards": shares.shards,
        "shards_used": shares.shards_used,
    }
