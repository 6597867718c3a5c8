"""GPU telemetry: the agent's push payload and the pure helpers the controller uses.

`GpuTelemetry` is what `provisioner agent` POSTs to `{controller}/v1/telemetry` (schema version 1,
documented in docs/nvml.md). Everything here is pure: no NVML, no I/O, no clock reads, so the
controller, the planner and the simulator can import it without the nvml extra.

Units follow DCGM: memory in MiB, power in W, energy in mJ, temperature in degrees C, clocks in MHz.
A metric NVML could not read is `None` (and named in `unavailable`), never a made-up zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from provisioner.domain.errors import InvalidArgument
from provisioner.domain.money import MICRO
from provisioner.domain.nodes import GpuSample

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Hard physical and size bounds of the schema: whatever an agent (or anyone holding a token)
# sends is refused with a 422 naming the field when it lies outside them. The policy's
# `telemetry` section narrows the ones that are site-specific (GPUs per node, power, age).
MAX_GPUS = 1024
MAX_NAME = 128
MAX_LIST = 256
MAX_MIB = 10**8  # 100 TB of GPU memory
MAX_W = 100_000.0
MAX_COUNT = 2**63 - 1
MAX_TS = 10**10  # year 2286: a POSIX-seconds time, never milliseconds

Name = Annotated[str, StringConstraints(max_length=MAX_NAME)]
JobId = Annotated[str, StringConstraints(max_length=64)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Mib = Annotated[int, Field(ge=0, le=MAX_MIB)]
Pct = Annotated[float, Field(ge=0, le=100)]
Mhz = Annotated[int, Field(ge=0, le=100_000)]


class GpuReading(_Model):
    """One physical GPU as NVML saw it."""

    index: int = Field(ge=0, le=MAX_GPUS - 1, description="NVML device index (the `gpu` label).")
    uuid: Name = Field(default="", description="GPU-... (the `UUID` label).")
    name: Name = Field(default="", description="Product name (the `modelName` label).")
    pci_bus_id: Name = ""
    minor_number: int | None = Field(
        default=None, ge=0, le=MAX_GPUS * 64, description="/dev/nvidiaN: the `device` label."
    )
    util_pct: Pct | None = Field(default=None, description="GPU utilisation (%).")
    mem_util_pct: Pct | None = Field(default=None, description="Memory copy utilisation (%).")
    mem_used_mib: Mib | None = None
    mem_free_mib: Mib | None = None
    mem_total_mib: Mib | None = None
    power_w: float | None = Field(default=None, ge=0, le=MAX_W)
    power_limit_w: float | None = Field(
        default=None, ge=0, le=MAX_W, description="Enforced power limit (W); lowers the bound."
    )
    energy_mj: int | None = Field(
        default=None, ge=0, lt=2**64, description="Energy counter since driver load."
    )
    temperature_c: float | None = Field(default=None, ge=0, le=200)
    sm_clock_mhz: Mhz | None = None
    mem_clock_mhz: Mhz | None = None
    ecc_sbe_volatile: Count | None = None
    ecc_dbe_volatile: Count | None = None
    ecc_sbe_aggregate: Count | None = None
    ecc_dbe_aggregate: Count | None = None
    retired_pages_sbe: Count | None = None
    retired_pages_dbe: Count | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: Count | None = None
    remapped_rows_uncorrectable: Count | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    xid_last: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        description="Last Xid seen since the agent started; 0 none; None unwatched.",
    )
    xid_count: Count | None = None
    xids_seen: tuple[Annotated[int, Field(ge=0, le=MAX_COUNT)], ...] = Field(
        default=(), max_length=MAX_LIST, description="Distinct Xids since agent start."
    )
    mig_enabled: bool | None = None
    process_count: Count | None = None
    jobs: tuple[JobId, ...] = Field(
        default=(), max_length=MAX_LIST, description="Slurm job ids with a process here."
    )
    lost: bool = Field(default=False, description="NVML reported `GPU is lost`.")
    unavailable: tuple[Annotated[str, StringConstraints(max_length=512)], ...] = Field(
        default=(),
        max_length=MAX_LIST,
        description="Metrics NVML could not read this time, 'metric: reason'.",
    )

    @property
    def device(self) -> str:
        return f"nvidia{self.minor_number}" if self.minor_number is not None else ""


class MigInstance(_Model):
    """A MIG device (GPU instance + compute instance) on a MIG-enabled GPU."""

    gpu_index: int = Field(ge=0, le=MAX_GPUS - 1)
    parent_uuid: Name = ""
    uuid: Name = Field(default="", description="MIG-...")
    gpu_instance_id: int = Field(ge=0, le=MAX_COUNT, description="The `GPU_I_ID` label.")
    compute_instance_id: Count | None = None
    profile: Name = Field(default="", description='The `GPU_I_PROFILE` label, e.g. "1g.10gb".')
    mem_used_mib: Mib | None = None
    mem_free_mib: Mib | None = None
    mem_total_mib: Mib | None = None
    jobs: tuple[JobId, ...] = Field(default=(), max_length=MAX_LIST)


class JobGpu(_Model):
    """A Slurm job with processes on a GPU (or on one MIG instance of it)."""

    job_id: JobId
    gpu_index: int = Field(ge=0, le=MAX_GPUS - 1)
    gpu_uuid: Name = ""
    gpu_instance_id: Count | None = None
    pids: tuple[Annotated[int, Field(ge=0, le=2**32)], ...] = Field(default=(), max_length=MAX_LIST)


class GpuTelemetry(_Model):
    """The push payload: one sample of every GPU on one node."""

    schema_version: Literal[1] = 1
    node: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$",
        description="Slurm node name.",
    )
    hostname: str = Field(default="", max_length=255, description="The `Hostname` label.")
    sampled_ts: float = Field(
        ge=0, lt=MAX_TS, description="Unix seconds (UTC) when sampling started."
    )
    driver_version: str | None = Field(default=None, max_length=64)
    gpus: tuple[GpuReading, ...] = Field(default=(), max_length=MAX_GPUS)
    mig_instances: tuple[MigInstance, ...] = Field(default=(), max_length=MAX_GPUS * 7)
    jobs: tuple[JobGpu, ...] = Field(default=(), max_length=MAX_GPUS * 8)

    def gpu(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)

    def to_gpu_samples(self) -> tuple[GpuSample, ...]:
        """The domain view for `Node.gpu_load`.

        `GpuSample.util_pct` cannot say "unknown", so a GPU whose utilisation NVML could not read
        (lost, or MIG-enabled) is reported as 100 %: busy unless proved idle, so no scale-down
        and no waste is ever decided from a reading that does not exist. A MIG-enabled GPU with
        no compute process on any of its instances is proved idle (0 %): NVML gives no
        utilisation for it, so without this a MIG burst node would never be let go.
        """
        return tuple(
            GpuSample(
                index=g.index,
                uuid=g.uuid,
                util_pct=g.util_pct if g.util_pct is not None else _unread_util(g),
                mem_used_mib=float(g.mem_used_mib or 0),
                mem_total_mib=float(g.mem_total_mib or 0),
                power_w=g.power_w,
                energy_mj=float(g.energy_mj) if g.energy_mj is not None else None,
                temperature_c=g.temperature_c,
                sampled_ts=self.sampled_ts,
            )
            for g in self.gpus
        )


def _unread_util(g: GpuReading) -> float:
    """A GPU NVML gave no utilisation for: 0 for a readable MIG GPU running no process (NVML
    lists a MIG GPU's processes on every instance), else 100 (busy unless proved idle)."""
    return 0.0 if g.mig_enabled and not g.lost and g.process_count == 0 else 100.0


# --------------------------------------------------------------------------- idleness


class UtilReading(Protocol):
    """What idleness needs; `GpuReading` and the domain `GpuSample` both fit."""

    @property
    def util_pct(self) -> float | None: ...

    @property
    def mem_used_mib(self) -> float | None: ...


def gpu_idle(
    sample: UtilReading, util_threshold_pct: float, mem_threshold_mib: float | None = None
) -> bool | None:
    """True idle, False busy, None unknown (utilisation not measured).

    Busy when utilisation is at or above the threshold, or, with a memory threshold, when more
    memory than that is in use (a job holding memory but between kernels is still a job).
    """
    mem = sample.mem_used_mib
    if mem_threshold_mib is not None and mem is not None and mem > mem_threshold_mib:
        return False
    util = sample.util_pct
    if util is None:
        return None
    return util < util_threshold_pct


def node_gpu_idle(
    samples: Iterable[UtilReading],
    util_threshold_pct: float,
    mem_threshold_mib: float | None = None,
) -> bool | None:
    """Whether NVML confirms every GPU of a node idle.

    False as soon as one GPU is busy; None when nothing was measured or some GPU could not be
    judged (so the caller cannot take "idle" for granted); True only when all are idle.
    """
    verdicts = [gpu_idle(s, util_threshold_pct, mem_threshold_mib) for s in samples]
    if not verdicts:
        return None
    if any(v is False for v in verdicts):
        return False
    if any(v is None for v in verdicts):
        return None
    return True


# --------------------------------------------------------------------------- waste


class GpuAllocation(_Model):
    """Slurm's view: this GPU of this node is allocated to this job."""

    node: str
    gpu_index: int = Field(ge=0)
    job_id: str
    team: str = ""
    account: str = ""


class GpuWaste(_Model):
    """A GPU allocated to a job while NVML measures it idle."""

    node: str
    gpu_index: int
    gpu_uuid: str
    job_id: str
    team: str
    account: str
    util_pct: float
    mem_used_mib: int | None
    job_has_process: bool | None = Field(
        description="Whether NVML saw a process of this job on the GPU (None: no mapping)."
    )


def _by_node(
    telemetry: Mapping[str, GpuTelemetry] | Iterable[GpuTelemetry],
) -> dict[str, GpuTelemetry]:
    if isinstance(telemetry, Mapping):
        return dict(telemetry)
    return {t.node: t for t in telemetry}


def allocated_but_idle(
    allocations: Iterable[GpuAllocation],
    telemetry: Mapping[str, GpuTelemetry] | Iterable[GpuTelemetry],
    util_threshold_pct: float,
    mem_threshold_mib: float | None = None,
) -> list[GpuWaste]:
    """Allocated GPUs that NVML measures idle, ordered by node, GPU and job.

    GPUs without telemetry, or whose utilisation is unknown, are never called waste.
    """
    nodes = _by_node(telemetry)
    out: list[GpuWaste] = []
    for a in allocations:
        t = nodes.get(a.node)
        g = t.gpu(a.gpu_index) if t is not None else None
        if t is None or g is None or g.util_pct is None:
            continue
        if gpu_idle(g, util_threshold_pct, mem_threshold_mib) is not True:
            continue
        has_process: bool | None = None
        if t.jobs or g.jobs:
            has_process = a.job_id in g.jobs
        out.append(
            GpuWaste(
                node=a.node,
                gpu_index=a.gpu_index,
                gpu_uuid=g.uuid,
                job_id=a.job_id,
                team=a.team,
                account=a.account,
                util_pct=g.util_pct,
                mem_used_mib=g.mem_used_mib,
                job_has_process=has_process,
            )
        )
    out.sort(key=lambda w: (w.node, w.gpu_index, w.job_id))
    return out


def idle_gpus_by_team(waste: Iterable[GpuWaste]) -> dict[str, int]:
    """Allocated-but-idle GPU count per team (empty team: "")."""
    out: dict[str, int] = {}
    for w in waste:
        out[w.team] = out.get(w.team, 0) + 1
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- health

# Xids that point at the hardware or the driver rather than at the user's program
# (NVIDIA's Xid catalogue): DBE (48), row remap (63, 64), NVLink (74), fallen off the bus (79),
# high SBE rate (92), contained/uncontained ECC (94, 95), GSP (119, 120), uncorrectable (140).
DEFAULT_CRITICAL_XIDS: frozenset[int] = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})
# Xids caused by application faults: reported nowhere as a GPU health problem by default.
DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68})

AlertKind = Literal[
    "temperature",
    "ecc_dbe",
    "xid",
    "row_remap_failure",
    "row_remap_pending",
    "retired_pages_pending",
    "gpu_lost",
]


class HealthThresholds(_Model):
    """Alert thresholds; the controller builds this from policy."""

    temperature_warn_c: float = 85.0
    temperature_critical_c: float = 95.0
    ecc_dbe_volatile_max: int = Field(default=0, ge=0, description="Alert above this count.")
    xid_critical: frozenset[int] = DEFAULT_CRITICAL_XIDS
    xid_ignore: frozenset[int] = DEFAULT_IGNORED_XIDS


class GpuAlert(_Model):
    node: str
    gpu_index: int
    gpu_uuid: str
    kind: AlertKind
    severity: Literal["warning", "critical"]
    value: float
    threshold: float | None = None
    message: str


def health_alerts(
    telemetry: GpuTelemetry | Iterable[GpuTelemetry], thresholds: HealthThresholds
) -> list[GpuAlert]:
    """Alerts for every GPU past a threshold, in node and GPU order."""
    batch = [telemetry] if isinstance(telemetry, GpuTelemetry) else list(telemetry)
    out: list[GpuAlert] = []
    for t in sorted(batch, key=lambda x: x.node):
        for g in sorted(t.gpus, key=lambda x: x.index):
            out.extend(_gpu_alerts(t.node, g, thresholds))
    return out


def _gpu_alerts(node: str, g: GpuReading, th: HealthThresholds) -> list[GpuAlert]:
    def alert(
        kind: AlertKind,
        severity: Literal["warning", "critical"],
        value: float,
        threshold: float | None,
        message: str,
    ) -> GpuAlert:
        return GpuAlert(
            node=node,
            gpu_index=g.index,
            gpu_uuid=g.uuid,
            kind=kind,
            severity=severity,
            value=value,
            threshold=threshold,
            message=f"{node} GPU {g.index}: {message}",
        )

    out: list[GpuAlert] = []
    if g.lost:
        out.append(alert("gpu_lost", "critical", 1, None, "NVML reports the GPU is lost"))
    temp = g.temperature_c
    if temp is not None and temp >= th.temperature_critical_c:
        out.append(alert("temperature", "critical", temp, th.temperature_critical_c, f"{temp:g} C"))
    elif temp is not None and temp >= th.temperature_warn_c:
        out.append(alert("temperature", "warning", temp, th.temperature_warn_c, f"{temp:g} C"))
    dbe = g.ecc_dbe_volatile
    if dbe is not None and dbe > th.ecc_dbe_volatile_max:
        out.append(
            alert(
                "ecc_dbe",
                "critical",
                dbe,
                th.ecc_dbe_volatile_max,
                f"{dbe} volatile double-bit ECC errors",
            )
        )
    for xid in g.xids_seen:
        if xid in th.xid_ignore:
            continue
        severity: Literal["warning", "critical"] = (
            "critical" if xid in th.xid_critical else "warning"
        )
        out.append(alert("xid", severity, xid, None, f"Xid {xid}"))
    if g.remap_failure:
        out.append(alert("row_remap_failure", "critical", 1, None, "row remapping failed"))
    if g.remap_pending:
        out.append(
            alert("row_remap_pending", "warning", 1, None, "row remap pending: reset when drained")
        )
    if g.retired_pages_pending:
        out.append(
            alert(
                "retired_pages_pending",
                "warning",
                1,
                None,
                "page retirement pending: reset when drained",
            )
        )
    return out


# --------------------------------------------------------------------------- energy

MJ_PER_KWH = 3.6e9  # 1 kWh = 3.6e6 J = 3.6e9 mJ
_U64 = 2**64


class EnergyReading(Protocol):
    """What energy needs; `GpuReading` and the domain `GpuSample` both fit."""

    @property
    def uuid(self) -> str: ...

    @property
    def energy_mj(self) -> float | None: ...

    @property
    def power_w(self) -> float | None: ...


class EnergyEstimate(_Model):
    kwh: float = Field(ge=0)
    method: Literal["counter", "power", "none"]


def gpu_energy_kwh(
    prev: EnergyReading,
    cur: EnergyReading,
    elapsed_s: float,
    *,
    max_plausible_w: float = 5000.0,
) -> EnergyEstimate:
    """Energy one GPU used between two readings `elapsed_s` apart.

    The energy counter's delta when it is sound. A counter that went backwards was reset (driver
    reload, GPU reset), unless it is a genuine 64-bit wrap; a delta implying more than
    `max_plausible_w` is not believed either. Otherwise power x time, from the mean of the
    powers that were read. Different GPUs (UUIDs) or no elapsed time: zero, method "none".
    """
    if elapsed_s <= 0 or (prev.uuid and cur.uuid and prev.uuid != cur.uuid):
        return EnergyEstimate(kwh=0.0, method="none")
    e0, e1 = prev.energy_mj, cur.energy_mj
    if e0 is not None and e1 is not None:
        delta = e1 - e0
        if delta < 0 and e0 > _U64 // 2 and e1 < _U64 // 2:
            delta = e1 + _U64 - e0  # wrapped
        if 0 <= delta <= max_plausible_w * 1000.0 * elapsed_s:
            return EnergyEstimate(kwh=delta / MJ_PER_KWH, method="counter")
    powers = [p for p in (prev.power_w, cur.power_w) if p is not None and 0 <= p <= max_plausible_w]
    if powers:
        watts = sum(powers) / len(powers)
        return EnergyEstimate(kwh=watts * elapsed_s / 3.6e6, method="power")
    return EnergyEstimate(kwh=0.0, method="none")


def node_energy_kwh(prev: GpuTelemetry, cur: GpuTelemetry) -> float:
    """Energy of every GPU present in both samples (matched by UUID), in kWh."""
    elapsed = cur.sampled_ts - prev.sampled_ts
    before = {g.uuid: g for g in prev.gpus if g.uuid}
    total = 0.0
    for g in cur.gpus:
        p = before.get(g.uuid)
        if p is not None:
            total += gpu_energy_kwh(p, g, elapsed).kwh
    return total


def energy_cost_usd(kwh: float | Decimal, usd_per_kwh: Decimal) -> Decimal:
    """kWh x $/kWh as Decimal dollars, to the micro-dollar."""
    if isinstance(kwh, float) and not math.isfinite(kwh):
        raise InvalidArgument("kwh must be finite")
    amount = kwh if isinstance(kwh, Decimal) else Decimal(repr(float(kwh)))
    return (amount * usd_per_kwh).quantize(MICRO, rounding=ROUND_HALF_EVEN)


def telemetry_by_node(batch: Sequence[GpuTelemetry]) -> dict[str, GpuTelemetry]:
    """The newest sample per node."""
    out: dict[str, GpuTelemetry] = {}
    for t in batch:
        old = out.get(t.node)
        if old is None or t.sampled_ts >= old.sampled_ts:
            out[t.node] = t
    return out


# Three missed pushes at the agent's default 15 s interval, plus slack for one slow pass.
DEFAULT_MAX_AGE_S = 60.0


def fresh(ts: float, now_ts: float, max_age_s: float) -> bool:
    """Whether a time stamp lies within `max_age_s` of now (either side)."""
    return math.isfinite(ts) and abs(now_ts - ts) <= max_age_s
