"""GPU telemetry: the ingest answer, the latest samples, waste and health views
(`render.telemetry_dict`, `telemetry_views.waste_dict` / `alerts_dict`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from provisioner.account.gpu_waste import WasteBasis
from provisioner.api.schemas.common import IsoTime, Money, Out
from provisioner.domain.nodes import NodeKind
from provisioner.domain.telemetry import AlertKind


class IngestOut(Out):
    """`POST /v1/telemetry` (202): the node, the GPUs in the sample, the GPU rows stored, and
    the job tags dropped because Slurm does not show those jobs on the node."""

    node: str
    gpus: int
    stored: int
    job_tags_dropped: int = 0


class GpuSampleOut(Out):
    index: int
    uuid: str
    util_pct: float
    mem_used_mib: float
    mem_total_mib: float
    power_w: float | None
    energy_mj: float | None
    temperature_c: float | None
    sampled_at: IsoTime | None


class NodeTelemetryOut(Out):
    node: str
    received_at: IsoTime | None
    gpus: list[GpuSampleOut]


class SilentNodeOut(Out):
    """A node whose latest sample is older than `max_age_s`."""

    node: str
    last_sample_at: IsoTime | None


class WasteItemOut(Out):
    node: str
    node_kind: NodeKind
    gpus: int
    basis: WasteBasis
    gpu_index: int | None
    gpu_uuid: str
    job_id: str
    candidate_jobs: list[str]
    team: str
    account: str
    user: str
    partition: str
    util_pct: float | None
    mem_used_mib: int | None
    idle_since: IsoTime | None
    idle_s: float
    usd_per_gpu_hour: Money
    usd_per_hour: Money
    usd_so_far: Money


class WasteByTeamOut(Out):
    team: str
    gpus: int
    usd_per_hour: Money
    usd_so_far: Money


class WasteByNodeOut(Out):
    node: str
    gpus: int
    usd_per_hour: Money
    usd_so_far: Money


class WasteByJobOut(Out):
    job_id: str
    gpus: int
    usd_per_hour: Money
    usd_so_far: Money


class WasteOut(Out):
    now: IsoTime | None
    max_age_s: float
    util_threshold_pct: float
    mem_threshold_mib: float | None
    gpus: int = Field(description="Allocated GPUs measured idle.")
    usd_per_hour: Money
    by_team: list[WasteByTeamOut]
    by_node: list[WasteByNodeOut]
    by_job: list[WasteByJobOut]
    items: list[WasteItemOut]
    silent_nodes: list[SilentNodeOut]


class ThresholdsOut(Out):
    temperature_warn_c: float
    temperature_critical_c: float
    ecc_dbe_volatile_max: int
    xid_critical: list[int]
    xid_ignore: list[int]


class AlertCountsOut(Out):
    critical: int
    warning: int


class AlertOut(Out):
    node: str
    gpu_index: int
    gpu_uuid: str
    kind: AlertKind
    severity: Literal["warning", "critical"]
    value: float
    threshold: float | None
    message: str
    sampled_at: IsoTime | None


class AlertsOut(Out):
    now: IsoTime | None
    max_age_s: float
    thresholds: ThresholdsOut
    counts: AlertCountsOut
    alerts: list[AlertOut]
    silent_nodes: list[SilentNodeOut]


__all__ = [
    "AlertCountsOut",
    "AlertOut",
    "AlertsOut",
    "GpuSampleOut",
    "IngestOut",
    "NodeTelemetryOut",
    "SilentNodeOut",
    "ThresholdsOut",
    "WasteByJobOut",
    "WasteByNodeOut",
    "WasteByTeamOut",
    "WasteItemOut",
    "WasteOut",
]
