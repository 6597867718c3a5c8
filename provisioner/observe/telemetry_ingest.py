"""Ingest of pushed GPU telemetry: each payload is stored whole, with since when each GPU has been
idle (by the policy's thresholds), for the waste and health views to read back."""

from __future__ import annotations

import math
from typing import Any, Protocol

from provisioner.config.models import Policy
from provisioner.domain.gpu_usage import DEFAULT_MAX_GAP_S, GpuReadingAt, usage_between
from provisioner.domain.telemetry import (
    GpuTelemetry,
    gpu_idle,
)
from provisioner.ports.store import GpuUsageLog, TelemetryRepo


class UsageStore(TelemetryRepo, GpuUsageLog, Protocol):
    """What `record_usage` reads (the node's previous payload) and writes (hourly usage)."""


def record_usage(
    store: UsageStore, payload: GpuTelemetry, max_gap_s: float = DEFAULT_MAX_GAP_S
) -> int:
    """Add the GPU time from the node's previous payload to this one to the hourly usage
    (domain/gpu_usage.py). Call it before `record_payload` replaces that payload. Returns the
    number of usage rows written (none for a first payload, a gap or an older sample)."""
    prev = next(iter(store.telemetry_payloads(payload.node)), None)
    if prev is None:
        return 0
    before = [_reading(g) for g in prev.payload.get("gpus", ()) if isinstance(g, dict)]
    now = [
        GpuReadingAt(g.index, g.uuid, g.util_pct, bool(g.process_count or g.jobs), g.jobs)
        for g in payload.gpus
        if not g.mig_enabled  # MIG: per-slice load is not in NVML's utilisation
    ]
    rows = usage_between(payload.node, prev.sampled_ts, before, payload.sampled_ts, now, max_gap_s)
    return store.add_gpu_usage(rows) if rows else 0


def _reading(g: dict[str, Any]) -> GpuReadingAt:
    jobs = tuple(str(j) for j in g.get("jobs") or ())
    util = g.get("util_pct")
    return GpuReadingAt(
        int(g.get("index", -1)),
        str(g.get("uuid", "")),
        float(util) if util is not None else None,
        bool(g.get("process_count") or jobs),
        jobs,
    )


def record_payload(
    store: TelemetryRepo, payload: GpuTelemetry, received_ts: float, policy: Policy
) -> bool:
    """Store a pushed payload whole, with since when each GPU has been idle (by the policy's
    thresholds). A GPU idle in the previous payload too (same UUID) keeps its start; one that
    just became idle starts at this sample. False: an older sample, not stored."""
    threshold = policy.guardrails.nvml_idle_util_pct
    mem = policy.health.idle_mem_used_mib
    prev = next(iter(store.telemetry_payloads(payload.node)), None)
    before: dict[int, tuple[str, float]] = {}
    if prev is not None and prev.sampled_ts <= payload.sampled_ts:
        uuids = {
            int(g.get("index", -1)): str(g.get("uuid", ""))
            for g in prev.payload.get("gpus", ())
            if isinstance(g, dict)
        }
        before = {i: (uuids.get(i, ""), ts) for i, ts in prev.idle_since.items()}
    since: dict[int, float] = {}
    for g in payload.gpus:
        if g.mig_enabled or gpu_idle(g, threshold, mem) is not True:
            continue
        seen = before.get(g.index)
        since[g.index] = seen[1] if seen is not None and seen[0] == g.uuid else payload.sampled_ts
    body = _finite(payload.model_dump(mode="json"))
    assert isinstance(body, dict)
    return store.put_telemetry_payload(payload.node, payload.sampled_ts, received_ts, body, since)


def _finite(value: object) -> object:
    """The JSON value with every NaN or infinity replaced by None (a reading not made): JSON has
    no such numbers, and PostgreSQL refuses them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
