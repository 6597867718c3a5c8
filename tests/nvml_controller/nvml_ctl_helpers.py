"""Builders for the controller-side NVML tests (a uniquely named module, not conftest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient

from provisioner.api.app import ApiDeps, create_app
from provisioner.api.auth import Role, create_token
from provisioner.clock import ManualClock
from provisioner.config.models import (
    Budgets,
    Guardrails,
    Health,
    OnPrem,
    Policy,
    PoolPolicy,
    TeamBudget,
)
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.offers import CapacityType, OfferKey
from provisioner.domain.records import JobUsage
from provisioner.domain.telemetry import GpuReading, GpuTelemetry, JobGpu
from provisioner.store import Store

T0 = 1_768_046_400.0  # 2026-01-10T12:00:00Z
OFFER = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.ON_DEMAND)
UUID = "GPU-0000000{}-0000-0000-0000-000000000000"


def make_policy(**over: Any) -> Policy:
    base: dict[str, Any] = {
        "onprem": OnPrem(
            amortized_usd_per_gpu_hour=Decimal("1.20"), energy_usd_per_kwh=Decimal("0.20")
        ),
        "pools": [
            PoolPolicy(name="aws-a100", cloud="aws", regions=["us-east-1"], gpu_model="A100")
        ],
        "budgets": Budgets(
            teams={"vision": TeamBudget(monthly_usd=Decimal("5000"))},
            team_of_account={"acct-v": "vision", "acct-n": "nlp"},
        ),
        "guardrails": Guardrails(idle_timeout_s=600, nvml_idle_util_pct=5.0),
        "health": Health(temperature_warn_c=80.0, temperature_critical_c=90.0),
    }
    base.update(over)
    return Policy(**base)


def gpu(index: int, util: float | None, **kw: Any) -> GpuReading:
    fields: dict[str, Any] = {
        "index": index,
        "uuid": UUID.format(index),
        "name": "NVIDIA A100-SXM4-80GB",
        "util_pct": util,
        "mem_used_mib": 4 if util is not None and util < 5 else 30_000,
        "mem_total_mib": 81_920,
        "power_w": 60.0,
        "temperature_c": 40.0,
    }
    fields.update(kw)
    return GpuReading(**fields)


def telemetry(
    node: str,
    ts: float,
    gpus: Sequence[GpuReading],
    jobs: Sequence[tuple[str, int]] = (),
) -> GpuTelemetry:
    """A payload; `jobs` are (job id, GPU index) pairs NVML mapped."""
    return GpuTelemetry(
        node=node,
        hostname=node,
        sampled_ts=ts,
        gpus=tuple(gpus),
        jobs=tuple(JobGpu(job_id=j, gpu_index=i, gpu_uuid=UUID.format(i)) for j, i in jobs),
    )


def usage(job: str, node: str, gpus: int, start: float, account: str, **kw: Any) -> JobUsage:
    return JobUsage(job_id=job, node_name=node, gpus=gpus, start_ts=start, account=account, **kw)


def add_burst_instance(store: Store, node: str = "cloud-1", price: str = "9.83") -> None:
    inst = CloudInstance(
        "i-1",
        "aws-a100",
        OFFER,
        "A100",
        8,
        Decimal(price),
        InstanceState.REQUESTED,
        T0 - 7200,
        node_name=node,
    )
    store.add_instance(inst, team="vision")
    store.transition("i-1", InstanceState.ALLOCATED, T0 - 7100, "running")
    store.transition("i-1", InstanceState.READY, T0 - 7000, "joined")


@dataclass
class Env:
    store: Store
    clock: ManualClock
    client: TestClient
    tokens: dict[str, str]

    def h(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def at(self, ts: float) -> None:
        self.clock.set(datetime.fromtimestamp(ts, UTC))

    def push(self, t: GpuTelemetry) -> None:
        self.at(t.sampled_ts)
        r = self.client.post(
            "/v1/telemetry", json=t.model_dump(mode="json"), headers=self.h("operator")
        )
        assert r.status_code == 202, r.text


def make_env(store: Store, policy: Policy) -> Env:
    clock = ManualClock(datetime.fromtimestamp(T0, UTC))
    app = create_app(ApiDeps(store=store, clock=clock, policy=lambda: policy))
    tokens = {
        r.label: create_token(store, r, f"{r.label}-bot", T0 - 86_400)
        for r in Role
        if r is not Role.AGENT
    }
    return Env(store, clock, TestClient(app, raise_server_exceptions=False), tokens)


def metric_lines(text: str, name: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith(name + "{"))
