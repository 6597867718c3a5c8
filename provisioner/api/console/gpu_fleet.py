"""The GPUs page's fleet: every GPU the site pays for, on-prem and cloud, grouped by node.

On-prem nodes come from the latest Slurm snapshot, cloud nodes from the live instances (booting
and draining ones too: they are paid for), and each node's GPUs carry their latest NVML sample
where an agent pushed one. Who runs what comes from the snapshot's running jobs.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from provisioner.api import render
from provisioner.api.deps import ApiDeps
from provisioner.api.telemetry_views import policy_of
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
    jobs = _jobs_by_node(snap, policy.budgets.team_for)
    gpu_price = policy.onprem.amortized_usd_per_gpu_hour
    nodes: list[dict[str, Any]] = []
    if snap is not None:
        for n in sorted(snap.nodes_of(NodeKind.ONPREM), key=lambda n: n.name):
            nodes.append(
                _node(n.name, "on-prem", n.gpus, str(n.state), gpu_price * n.gpus, samples, jobs)
            )
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
    cloud = [n for n in nodes if n["kind"] == "cloud"]
    idle = [n for n in cloud if n["phase"] == "serving" and not n["jobs"]]
    return {
        "nodes": nodes,
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
                           "user": j.user})  # fmt: skip
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
        "gpu_rows": [sampled.get(i, {"index": i, "unsampled": True}) for i in indexes],
    }
