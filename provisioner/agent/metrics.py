"""Prometheus text exposition of `GpuTelemetry`, with DCGM-exporter names and labels.

Names, types and units are dcgm-exporter's (`etc/default-counters.csv` and the DCGM field list):
FB in MiB, power in W, energy in mJ (a counter since driver load), temperature in C, clocks in MHz,
DCGM_FI_DEV_XID_ERRORS the value of the last Xid. Labels follow dcgm-exporter too: `gpu`, `UUID`,
`pci_bus_id`, `device`, `modelName`, `Hostname`, plus `GPU_I_PROFILE` and `GPU_I_ID` on MIG
instance series and `hpc_job` (dcgm-exporter's HPC job-mapping label) where a Slurm job is mapped.

The text is rendered here rather than by prometheus_client because its renderer renames counter
families to `<name>_total` and sorts labels, which would break name compatibility with DCGM
dashboards for the counters (energy, ECC, retired pages, remapped rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from provisioner.domain.telemetry import GpuReading, GpuTelemetry, MigInstance

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Value = int | float | bool | None


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    type: Literal["gauge", "counter"]
    help: str
    gpu: Callable[[GpuReading], Value]
    mig: Callable[[MigInstance], Value] | None = None


DEVICE_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz
    ),
    MetricDef(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda g: g.mem_clock_mhz,
    ),
    MetricDef(
        "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: g.temperature_c
    ),
    MetricDef("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: g.power_w),
    MetricDef(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda g: g.energy_mj,
    ),
    MetricDef("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: g.util_pct),
    MetricDef(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda g: g.mem_util_pct
    ),
    MetricDef(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        lambda g: g.mem_free_mib,
        lambda m: m.mem_free_mib,
    ),
    MetricDef(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        lambda g: g.mem_used_mib,
        lambda m: m.mem_used_mib,
    ),
    MetricDef(
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "Framebuffer memory total (in MiB).",
        lambda g: g.mem_total_mib,
        lambda m: m.mem_total_mib,
    ),
    MetricDef(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        lambda g: g.ecc_sbe_volatile,
    ),
    MetricDef(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g.ecc_dbe_volatile,
    ),
    MetricDef(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        lambda g: g.ecc_sbe_aggregate,
    ),
    MetricDef(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        lambda g: g.ecc_dbe_aggregate,
    ),
    MetricDef(
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        lambda g: g.retired_pages_sbe,
    ),
    MetricDef(
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        lambda g: g.retired_pages_dbe,
    ),
    MetricDef(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "counter",
        "Total number of pages pending retirement.",
        lambda g: g.retired_pages_pending,
    ),
    MetricDef(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        lambda g: g.remapped_rows_uncorrectable,
    ),
    MetricDef(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        lambda g: g.remapped_rows_correctable,
    ),
    MetricDef(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        lambda g: g.remap_failure,
    ),
    MetricDef(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending",
        lambda g: g.remap_pending,
    ),
    MetricDef(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        lambda g: g.xid_last,
    ),
    MetricDef("DCGM_FI_DEV_MIG_MODE", "gauge", "MIG mode (1 enabled).", lambda g: g.mig_enabled),
    MetricDef(
        "provisioner_agent_xid_events_total",
        "counter",
        "Xid events seen since the agent started.",
        lambda g: g.xid_count,
    ),
)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: int | float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in pairs) + "}"


def _gpu_labels(t: GpuTelemetry, g: GpuReading) -> list[tuple[str, str]]:
    return [
        ("gpu", str(g.index)),
        ("UUID", g.uuid),
        ("pci_bus_id", g.pci_bus_id),
        ("device", g.device),
        ("modelName", g.name),
        ("Hostname", t.hostname or t.node),
    ]


def _with_jobs(base: list[tuple[str, str]], jobs: tuple[str, ...]) -> list[list[tuple[str, str]]]:
    """One series per mapped job (as dcgm-exporter does), or one without `hpc_job`."""
    if not jobs:
        return [base]
    return [[*base, ("hpc_job", job)] for job in jobs]


def _series(t: GpuTelemetry, m: MetricDef) -> list[str]:
    migs_of: dict[int, list[MigInstance]] = {}
    for mi in t.mig_instances:
        migs_of.setdefault(mi.gpu_index, []).append(mi)
    lines: list[str] = []
    for g in sorted(t.gpus, key=lambda x: x.index):
        base = _gpu_labels(t, g)
        value = m.gpu(g)
        if value is not None:
            # On a MIG-enabled GPU the jobs belong to its instances, labelled there.
            jobs = () if g.mig_enabled else g.jobs
            for labels in _with_jobs(base, jobs):
                lines.append(f"{m.name}{_labels(labels)} {format_value(value)}")
        if m.mig is None:
            continue
        for mi in sorted(migs_of.get(g.index, []), key=lambda x: x.gpu_instance_id):
            mv = m.mig(mi)
            if mv is None:
                continue
            mig_base = [
                *base,
                ("GPU_I_PROFILE", mi.profile),
                ("GPU_I_ID", str(mi.gpu_instance_id)),
            ]
            for labels in _with_jobs(mig_base, mi.jobs):
                lines.append(f"{m.name}{_labels(labels)} {format_value(mv)}")
    return lines


def _family(name: str, typ: str, help_text: str, lines: list[str]) -> list[str]:
    if not lines:
        return []
    return [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {typ}", *lines]


def render_metrics(t: GpuTelemetry) -> str:
    """The /metrics body for one sample. Metrics NVML could not read are omitted."""
    out: list[str] = []
    for m in DEVICE_METRICS:
        out.extend(_family(m.name, m.type, m.help, _series(t, m)))
    host = t.hostname or t.node
    lost = [
        f"provisioner_agent_gpu_lost{_labels(_gpu_labels(t, g))} 1"
        for g in sorted(t.gpus, key=lambda x: x.index)
        if g.lost
    ]
    out.extend(_family("provisioner_agent_gpu_lost", "gauge", "NVML reports the GPU lost.", lost))
    out.extend(_agent_lines(host, up=True, sampled_ts=t.sampled_ts))
    return "\n".join(out) + "\n"


def render_down(hostname: str) -> str:
    """The /metrics body while NVML cannot be sampled (driver gone since the agent started)."""
    return "\n".join(_agent_lines(hostname, up=False, sampled_ts=None)) + "\n"


def _agent_lines(host: str, *, up: bool, sampled_ts: float | None) -> list[str]:
    labels = _labels([("Hostname", host)])
    out = _family(
        "provisioner_agent_nvml_up",
        "gauge",
        "1 when the last NVML sample succeeded.",
        [f"provisioner_agent_nvml_up{labels} {1 if up else 0}"],
    )
    if sampled_ts is not None:
        out.extend(
            _family(
                "provisioner_agent_last_sample_timestamp_seconds",
                "gauge",
                "Unix time of the last NVML sample.",
                [
                    f"provisioner_agent_last_sample_timestamp_seconds{labels} "
                    f"{format_value(sampled_ts)}"
                ],
            )
        )
    return out
