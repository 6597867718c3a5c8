"""`POST /v1/telemetry`: who may push which node's sample, and the bounds a sample must meet.

The schema (`GpuTelemetry`) already bounds every field physically (no negative power, no 50 MB
hostname, at most 1024 GPUs). Here come the bounds that depend on the server's clock and the
site's policy, each answered with a 422 that names the field:

- `sampled_ts` within [now - telemetry.max_age_s, now + telemetry.max_future_skew_s]: a sample
  from the far past would bill energy into a closed period, one from the future would block
  every later genuine sample of the node (an older sample never overwrites a newer one);
- at most `telemetry.max_gpus_per_node` GPUs, each drawing at most `telemetry.max_power_w`.

An agent token pushes only for the node it is bound to (403 otherwise); operator and admin
tokens may push for any node. Then the sample is held to the node's hardware as Slurm and the
catalog know it (`telemetry_guard`): refused whole with a 422 naming the rule, or kept with its
foreign job tags dropped. Nothing from a refused sample is stored.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from provisioner.api.auth import Principal, Role
from provisioner.api.deps import ApiDeps
from provisioner.api.telemetry_guard import guard_sample
from provisioner.api.telemetry_views import policy_of
from provisioner.config.models import Telemetry
from provisioner.domain.telemetry import GpuTelemetry
from provisioner.observe.telemetry_ingest import record_payload, record_usage
from provisioner.plan.board_power import shipped_board_power


def _unprocessable(loc: list[str | int], msg: str) -> HTTPException:
    return HTTPException(422, [{"loc": ["body", *loc], "msg": msg, "type": "value_error"}])


def check_sender(principal: Principal, payload: GpuTelemetry) -> None:
    if principal.role is Role.AGENT and payload.node != principal.node:
        raise HTTPException(
            403, f"this agent token may push telemetry only for node {principal.node!r}"
        )


def check_bounds(payload: GpuTelemetry, limits: Telemetry, now_ts: float) -> None:
    """Raise a 422 naming the first field outside the site's bounds."""
    ts = payload.sampled_ts
    if ts > now_ts + limits.max_future_skew_s:
        raise _unprocessable(
            ["sampled_ts"],
            f"sampled_ts {ts:.0f} is {ts - now_ts:.0f} s in the future (the server allows "
            f"{limits.max_future_skew_s:g} s of clock skew); check the agent's clock",
        )
    if ts < now_ts - limits.max_age_s:
        raise _unprocessable(
            ["sampled_ts"],
            f"sampled_ts {ts:.0f} is {now_ts - ts:.0f} s old (at most "
            f"{limits.max_age_s:g} s is accepted); check the agent's clock",
        )
    if len(payload.gpus) > limits.max_gpus_per_node:
        raise _unprocessable(
            ["gpus"], f"at most {limits.max_gpus_per_node} GPUs per node, got {len(payload.gpus)}"
        )
    seen: set[int] = set()
    for i, g in enumerate(payload.gpus):
        if g.index in seen:
            raise _unprocessable(["gpus", i, "index"], f"GPU index {g.index} appears twice")
        seen.add(g.index)
        if g.power_w is not None and g.power_w > limits.max_power_w:
            raise _unprocessable(
                ["gpus", i, "power_w"],
                f"power_w {g.power_w:g} is above the {limits.max_power_w:g} W a GPU can draw",
            )


def ingest(
    deps: ApiDeps, principal: Principal, payload: GpuTelemetry, policy_limits: Telemetry
) -> dict[str, Any]:
    now = deps.clock.now().timestamp()
    check_sender(principal, payload)
    check_bounds(payload, policy_limits, now)
    dropped = 0
    if deps.snapshot is not None:
        board = deps.board_power or shipped_board_power()
        payload, dropped = guard_sample(
            deps.store,
            deps.snapshot(),
            payload,
            policy_limits,
            board,
            deps.telemetry_guard,
            now,
        )
    samples = payload.to_gpu_samples()
    n = deps.store.upsert_telemetry(payload.node, samples, now)
    record_usage(deps.store, payload)
    record_payload(deps.store, payload, now, policy_of(deps))
    return {"node": payload.node, "gpus": len(samples), "stored": n, "job_tags_dropped": dropped}


__all__ = ["check_bounds", "check_sender", "ingest"]
