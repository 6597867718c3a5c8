"""Holding a pushed sample to the hardware the controller knows (`domain.telemetry_bounds`).

The node's GPUs come from the latest Slurm snapshot (its GRES count and GPU type), or, for a
burst node Slurm does not show yet, from the cloud instance of ours that carries its name. The
jobs a sample may tag come from the same snapshot (running on that node), the usage records
(on that node within the grace window) and, while the snapshot is older than the sample, the
jobs it shows pending (one may have started there since).

Refused samples are counted per rule, and the latest are kept for the console's GPUs page and
`/metrics`. The counts belong to this API process: two controllers count apart.

A controller with no snapshot yet (a standby, which runs no pass, or one before its first)
still takes samples for the nodes the store knows: a live instance's node, bounded by its
instance type, or a node whose telemetry a leader already accepted, bounded by the GPUs stored
for it (the set never grows without a Slurm view). Any other node gets a 503 with Retry-After;
nothing is stored. An API built without a snapshot source (`ApiDeps.snapshot` None: a store
served alone, as tests and reporting replicas do) checks only the policy's bounds.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field

from fastapi import HTTPException

from provisioner.config.models import Telemetry
from provisioner.domain.gpu_power import BoardPower
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.domain.telemetry import GpuTelemetry
from provisioner.domain.telemetry_bounds import (
    RULE_JOB_TAG,
    NodeHardware,
    Refusal,
    drop_foreign_job_tags,
    hardware_refusal,
)
from provisioner.ports.store import ControllerStore

RECENT_REFUSALS = 20
NO_SNAPSHOT_RETRY_S = 15


@dataclass(frozen=True, slots=True)
class RefusedSample:
    node: str
    rule: str
    message: str
    at_ts: float


@dataclass
class TelemetryGuardStats:
    """Refusals per rule, job tags dropped, and the latest refusals (newest last)."""

    refused: Counter[str] = field(default_factory=Counter)
    recent: deque[RefusedSample] = field(default_factory=lambda: deque(maxlen=RECENT_REFUSALS))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse(self, node: str, rule: str, message: str, at_ts: float) -> None:
        with self._lock:
            self.refused[rule] += 1
            self.recent.append(RefusedSample(node, rule, message, at_ts))

    def drop_tags(self, node: str, n: int, at_ts: float) -> None:
        with self._lock:
            self.refused[RULE_JOB_TAG] += n
            self.recent.append(RefusedSample(node, RULE_JOB_TAG, f"{n} job tag(s) dropped", at_ts))

    def view(self) -> tuple[dict[str, int], list[RefusedSample]]:
        with self._lock:
            return dict(self.refused), list(self.recent)


def node_hardware(store: ControllerStore, snap: ClusterSnapshot, node: str) -> NodeHardware | None:
    for n in snap.nodes:
        if n.name == node:
            # physical GPUs: a MIG node's slices are not GPUs of their own
            return NodeHardware(node, n.physical_gpus, n.gpu_type, "slurm")
    for inst in snap.instances:
        if inst.node_name == node and not inst.state.terminal:
            return NodeHardware(node, inst.gpus, inst.gpu_model, "instance")
    return _live_instance_hardware(store, node)


def _live_instance_hardware(store: ControllerStore, node: str) -> NodeHardware | None:
    """The instance type of the live instance of ours that carries the node's name."""
    for si in store.instances(live_only=True):
        if si.instance.node_name == node:
            return NodeHardware(node, si.instance.gpus, si.instance.gpu_model, "instance")
    return None


def stored_hardware(store: ControllerStore, node: str) -> NodeHardware | None:
    """What the store alone knows of a node: a live instance's type, or the GPUs stored for it."""
    hw = _live_instance_hardware(store, node)
    if hw is not None:
        return hw
    kept = [g.index for t in store.telemetry(node) for g in t.gpus]
    if not kept:
        return None
    return NodeHardware(node, max(kept) + 1, "", "store")


def allowed_jobs(
    store: ControllerStore, snap: ClusterSnapshot | None, payload: GpuTelemetry, grace_s: float
) -> set[str]:
    ts = payload.sampled_ts
    ok: set[str] = set()
    if snap is not None:
        ok |= {j.job_id for j in snap.running if payload.node in j.nodes}
        if ts >= snap.taken_ts and ts - snap.taken_ts <= grace_s:
            ok |= {j.job_id for j in snap.pending}
    for u in store.job_usage(node_name=payload.node, overlapping=(ts - grace_s, ts + grace_s)):
        ok.add(u.job_id)
    return ok


def guard_sample(
    store: ControllerStore,
    snap: ClusterSnapshot | None,
    payload: GpuTelemetry,
    limits: Telemetry,
    board: BoardPower,
    stats: TelemetryGuardStats,
    now_ts: float,
) -> tuple[GpuTelemetry, int]:
    """The sample as it may be kept (foreign job tags dropped) and how many tags were dropped;
    a 422 naming the rule when the hardware refutes it, a 503 before the first snapshot."""
    if snap is None:
        hw = stored_hardware(store, payload.node)
        if hw is None:
            raise HTTPException(
                503,
                f"this controller has no Slurm view yet (a standby, or before its first pass) "
                f"and its store does not know node {payload.node!r}; retry shortly",
                headers={"Retry-After": str(NO_SNAPSHOT_RETRY_S)},
            )
    else:
        hw = node_hardware(store, snap, payload.node)
    refusal = hardware_refusal(payload, hw, board, limits.max_power_w)
    if refusal is not None:
        stats.refuse(payload.node, refusal.rule, refusal.message, now_ts)
        raise refused(refusal)
    kept, dropped = drop_foreign_job_tags(
        payload, allowed_jobs(store, snap, payload, limits.job_tag_grace_s)
    )
    if dropped:
        stats.drop_tags(payload.node, dropped, now_ts)
    return kept, dropped


def refused(r: Refusal) -> HTTPException:
    return HTTPException(
        422,
        [
            {
                "loc": ["body", *r.loc],
                "msg": f"{r.rule}: {r.message}",
                "type": f"telemetry.{r.rule}",
            }
        ],
    )


__all__ = ["RefusedSample", "TelemetryGuardStats", "guard_sample", "node_hardware"]
