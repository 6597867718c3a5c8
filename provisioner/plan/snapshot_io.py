"""Snapshot files (JSON) for `provisioner plan --snapshot` and tests: strict, with clear errors."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from provisioner.clock import utc
from provisioner.domain.errors import InputError, InvalidArgument
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import GpuSample, Node, NodeKind, NodeState
from provisioner.domain.offers import OfferKey
from provisioner.domain.snapshot import ClusterSnapshot, SpendState


def _ts(v: Any) -> Any:
    """Times are POSIX seconds or ISO 8601 strings (a naive string is taken as UTC)."""
    if v is None or isinstance(v, int | float):
        return v
    if isinstance(v, str):
        try:
            return utc(datetime.fromisoformat(v.replace("Z", "+00:00"))).timestamp()
        except ValueError:
            raise InvalidArgument(f"not a time: {v!r} (use POSIX seconds or ISO 8601)") from None
    raise InvalidArgument(f"not a time: {v!r}")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobIn(_M):
    job_id: str
    gpus: int = Field(ge=0)
    submit_ts: float
    partition: str = "onprem"
    account: str = ""
    user: str = ""
    qos: str = ""
    gpu_type: str = ""
    time_limit_s: float | None = Field(default=None, gt=0)
    expected_runtime_s: float | None = Field(default=None, gt=0)
    state: JobState = JobState.PENDING
    start_ts: float | None = None
    nodes: list[str] = Field(default_factory=list)

    _t = field_validator("submit_ts", "start_ts", mode="before")(_ts)


class GpuIn(_M):
    index: int
    uuid: str = ""
    util_pct: float = Field(ge=0, le=100)
    mem_used_mib: float = 0.0
    mem_total_mib: float = 0.0
    power_w: float | None = None
    energy_mj: float | None = None
    temperature_c: float | None = None
    sampled_ts: float = 0.0


class NodeIn(_M):
    name: str
    kind: NodeKind = NodeKind.ONPREM
    gpus: int = Field(ge=0)
    gpus_alloc: int = Field(default=0, ge=0)
    gpu_type: str = ""
    state: NodeState = NodeState.IDLE
    partitions: list[str] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)
    weight: int = 1
    pool: str = ""
    instance_id: str = ""
    idle_since_ts: float | None = None
    gpu_load: list[GpuIn] = Field(default_factory=list)

    _t = field_validator("idle_since_ts", mode="before")(_ts)


class InstanceIn(_M):
    instance_id: str
    pool: str
    offer: str
    gpu_model: str
    gpus: int = Field(ge=0)
    price_usd_hr: Decimal = Field(ge=0)
    state: InstanceState
    launched_ts: float
    decision_id: str = ""
    node_name: str = ""

    _t = field_validator("launched_ts", mode="before")(_ts)

    @field_validator("offer")
    @classmethod
    def _offer(cls, v: str) -> str:
        OfferKey.parse(v)
        return v


class SpendIn(_M):
    burn_usd_hr: Decimal = Decimal(0)
    team_month_spent_usd: dict[str, Decimal] = Field(default_factory=dict)
    team_committed_usd: dict[str, Decimal] = Field(default_factory=dict)


class SnapshotIn(_M):
    taken_ts: float
    jobs: list[JobIn] = Field(default_factory=list)
    nodes: list[NodeIn] = Field(default_factory=list)
    instances: list[InstanceIn] = Field(default_factory=list)
    spend: SpendIn = SpendIn()
    stale: bool = False
    stale_reasons: list[str] = Field(default_factory=list)
    paused: bool = False

    _t = field_validator("taken_ts", mode="before")(_ts)


def snapshot_from_dict(data: Any, source: str = "snapshot") -> ClusterSnapshot:
    try:
        m = SnapshotIn.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{source}: {loc}: {err['msg']}") from None
    return ClusterSnapshot(
        taken_ts=m.taken_ts,
        jobs=tuple(Job(**{**j.model_dump(), "nodes": tuple(j.nodes)}) for j in m.jobs),
        nodes=tuple(
            Node(
                **{
                    **n.model_dump(exclude={"gpu_load"}),
                    "partitions": tuple(n.partitions),
                    "features": tuple(n.features),
                },
                gpu_load=tuple(GpuSample(**g.model_dump()) for g in n.gpu_load),
            )
            for n in m.nodes
        ),
        instances=tuple(
            CloudInstance(**{**i.model_dump(), "offer": OfferKey.parse(i.offer)})
            for i in m.instances
        ),
        spend=SpendState(
            burn_usd_hr=m.spend.burn_usd_hr,
            team_month_spent_usd=m.spend.team_month_spent_usd,
            team_committed_usd=m.spend.team_committed_usd,
        ),
        stale=m.stale,
        stale_reasons=tuple(m.stale_reasons),
        paused=m.paused,
    )


def load_snapshot(path: str | Path) -> ClusterSnapshot:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{p}: cannot read snapshot ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: line {exc.lineno}: invalid JSON: {exc.msg}") from None
    return snapshot_from_dict(data, str(p))
