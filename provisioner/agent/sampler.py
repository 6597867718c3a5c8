"""Read every GPU through the `Nvml` seam into one `GpuTelemetry`.

A failed NVML call costs just the metric it was for (named in `GpuReading.unavailable`); a GPU
that NVML reports lost is marked `lost` and not queried further in that sample. Only a failed
`nvmlInit` / `nvmlDeviceGetCount`, or no GPU at all, is fatal: `NvmlUnavailable`, whose message
says what is missing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from provisioner.agent.nvml_api import (
    BINDING_NOT_INSTALLED,
    NVML_AGGREGATE_ECC,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
    NVML_GPU_INSTANCE_PROFILE_COUNT,
    NVML_INVALID_INSTANCE_ID,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_TEMPERATURE_GPU,
    NVML_VOLATILE_ECC,
    GpuInstanceProfileInfo,
    MemoryInfo,
    Nvml,
    NvmlError,
    ProcessInfo,
)
from provisioner.clock import Clock
from provisioner.domain.errors import InvalidState, ProvisionerError
from provisioner.domain.telemetry import GpuReading, GpuTelemetry, JobGpu, MigInstance

log = logging.getLogger("provisioner.agent")

T = TypeVar("T")
MIB = 1024 * 1024

JobResolver = Callable[[int], str | None]
"""pid -> Slurm job id, or None when the process belongs to no job (or cannot be read)."""


class NvmlUnavailable(ProvisionerError):
    """NVML cannot be used on this machine at all: no binding, no driver, no GPU."""

    def __init__(self, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(message)


def unavailable_message(err: NvmlError) -> str:
    """A line an operator can act on, chosen by NVML return code."""
    if err.code == BINDING_NOT_INSTALLED:
        return (
            "the NVML Python binding (nvidia-ml-py) is not installed; "
            "install the extra: pip install 'gpu-burst-provisioner[nvml]'"
        )
    if err.code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine"
    if err.code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"
    if err.code == NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA devices (NVML: Insufficient Permissions)"
    if err.code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "NVML library and kernel driver versions differ: reload the driver or reboot"
    return f"NVML is not usable: {err}"


# --------------------------------------------------------------------------- job mapping

_CGROUP_JOB = re.compile(r"/job_(\d+)(?:/|$)")


class ProcJobResolver:
    """pid -> SLURM_JOB_ID from /proc/<pid>/environ, else the Slurm cgroup path.

    Reading another user's environ needs root (as slurmd's prolog has); the cgroup path
    (`.../job_<id>/step_<n>/...`, cgroup v1 and v2) is world-readable and is the fallback.
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc_root = proc_root

    def __call__(self, pid: int) -> str | None:
        base = self.proc_root / str(pid)
        try:
            for entry in (base / "environ").read_bytes().split(b"\0"):
                if entry.startswith(b"SLURM_JOB_ID="):
                    job = entry.split(b"=", 1)[1].decode(errors="replace").strip()
                    if job:
                        return job
        except OSError:
            pass
        try:
            text = (base / "cgroup").read_text(errors="replace")
        except OSError:
            return None
        m = _CGROUP_JOB.search(text)
        return m.group(1) if m else None


def no_jobs(pid: int) -> str | None:
    return None


# --------------------------------------------------------------------------- sampler


@dataclass
class _XidState:
    last: int = 0
    count: int = 0
    seen: set[int] = field(default_factory=set)


class _Reader:
    """Calls NVML for one GPU; a failure costs only that metric."""

    def __init__(self) -> None:
        self.unavailable: list[str] = []
        self.lost = False

    def get(self, metric: str, fn: Callable[[], T]) -> T | None:
        if self.lost:
            return None
        try:
            return fn()
        except NvmlError as exc:
            self.record(metric, exc)
            return None

    def record(self, metric: str, exc: NvmlError) -> None:
        if exc.code == NVML_ERROR_GPU_IS_LOST:
            self.lost = True
        self.unavailable.append(f"{metric}: {exc.name}")


def _mib(value: int) -> int:
    return value // MIB


def _mem_fields(mem: MemoryInfo | None) -> tuple[int | None, int | None, int | None]:
    if mem is None:
        return None, None, None
    return _mib(mem.used), _mib(mem.free), _mib(mem.total)


def profile_from_size(slices: int, memory_mb: int) -> str:
    """A MIG profile name from slice count and memory, as NVIDIA names them: "1g.10gb"."""
    return f"{slices}g.{math.ceil(memory_mb / 1024)}gb"


class NvmlSampler:
    """One NVML session: `open()`, then `sample()` as often as needed, then `close()`."""

    def __init__(
        self,
        nvml: Nvml,
        clock: Clock,
        *,
        node: str,
        hostname: str = "",
        job_resolver: JobResolver | None = None,
        watch_xid: bool = True,
        max_events_per_sample: int = 256,
    ) -> None:
        self.nvml = nvml
        self.clock = clock
        self.node = node
        self.hostname = hostname or node
        self.job_resolver: JobResolver = job_resolver or no_jobs
        self.watch_xid = watch_xid
        self.max_events_per_sample = max_events_per_sample
        self.driver_version: str | None = None
        self._open = False
        self._event_set: object | None = None
        self._xid: dict[str, _XidState] = {}
        self._profiles: dict[str, dict[int, GpuInstanceProfileInfo]] = {}

    # -- lifecycle

    def open(self) -> None:
        try:
            self.nvml.nvmlInit()
        except NvmlError as exc:
            raise NvmlUnavailable(unavailable_message(exc), exc.code) from None
        self._open = True
        try:
            count = self._device_count()
            if count == 0:
                raise NvmlUnavailable("NVML found no NVIDIA GPU on this machine")
            try:
                self.driver_version = self.nvml.nvmlSystemGetDriverVersion()
            except NvmlError:
                self.driver_version = None
            if self.watch_xid:
                self._watch_xid(count)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._event_set is not None:
            with contextlib.suppress(NvmlError):
                self.nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        with contextlib.suppress(NvmlError):
            self.nvml.nvmlShutdown()

    def __enter__(self) -> NvmlSampler:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _device_count(self) -> int:
        try:
            return self.nvml.nvmlDeviceGetCount()
        except NvmlError as exc:
            raise NvmlUnavailable(unavailable_message(exc), exc.code) from None

    def _watch_xid(self, count: int) -> None:
        """Register for Xid events on every GPU that supports them; skip the rest quietly."""
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except NvmlError as exc:
            log.info("Xid events not watched: %s", exc.name)
            return
        self._event_set = event_set
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                if not nvml.nvmlDeviceGetSupportedEventTypes(handle) & (
                    NVML_EVENT_TYPE_XID_CRITICAL_ERROR
                ):
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, event_set)
            except NvmlError as exc:
                log.info("Xid events not watched on GPU %d: %s", i, exc.name)
                continue
            self._xid[uuid] = _XidState()

    def _drain_events(self) -> None:
        """Take every waiting Xid event without blocking (timeout 0)."""
        if self._event_set is None:
            return
        for _ in range(self.max_events_per_sample):
            try:
                ev = self.nvml.nvmlEventSetWait(self._event_set, 0)
            except NvmlError as exc:
                if exc.code != NVML_ERROR_TIMEOUT:
                    log.debug("Xid event wait: %s", exc.name)
                return
            if not ev.event_type & NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
                continue
            state = self._xid.get(ev.uuid)
            if state is None:
                continue
            state.last = ev.event_data
            state.count += 1
            state.seen.add(ev.event_data)
            log.warning("Xid %d on GPU %s", ev.event_data, ev.uuid)

    # -- sampling

    def sample(self) -> GpuTelemetry:
        if not self._open:
            raise InvalidState("NvmlSampler.sample() before open()")
        ts = self.clock.now().timestamp()
        self._drain_events()
        gpus: list[GpuReading] = []
        migs: list[MigInstance] = []
        jobs: list[JobGpu] = []
        for i in range(self._device_count()):
            gpu, gpu_migs, gpu_jobs = self._read_gpu(i)
            gpus.append(gpu)
            migs.extend(gpu_migs)
            jobs.extend(gpu_jobs)
        return GpuTelemetry(
            node=self.node,
            hostname=self.hostname,
            sampled_ts=ts,
            driver_version=self.driver_version,
            gpus=tuple(gpus),
            mig_instances=tuple(migs),
            jobs=tuple(jobs),
        )

    def _read_gpu(self, index: int) -> tuple[GpuReading, list[MigInstance], list[JobGpu]]:
        nvml = self.nvml
        r = _Reader()
        h = r.get("handle", lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if h is None:
            return (
                GpuReading(index=index, lost=r.lost, unavailable=tuple(r.unavailable)),
                [],
                [],
            )
        uuid = r.get("uuid", lambda: nvml.nvmlDeviceGetUUID(h)) or ""
        name = r.get("name", lambda: nvml.nvmlDeviceGetName(h)) or ""
        pci = r.get("pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(h)) or ""
        minor = r.get("minor_number", lambda: nvml.nvmlDeviceGetMinorNumber(h))
        mig_enabled = self._mig_enabled(h, r)
        # MIG-enabled GPUs do not report whole-device utilisation: do not ask, do not guess.
        util = None if mig_enabled else r.get("util", lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        used, free, total = _mem_fields(r.get("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h)))
        power_mw = r.get("power", lambda: nvml.nvmlDeviceGetPowerUsage(h))
        limit_mw = r.get("power_limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        energy = r.get("energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        temp = r.get("temperature", lambda: nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU))
        sm_clock = r.get("sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM))
        mem_clock = r.get("mem_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM))

        def ecc(err: int, counter: int) -> Callable[[], int]:
            return lambda: nvml.nvmlDeviceGetTotalEccErrors(h, err, counter)

        sbe_vol = r.get(
            "ecc_sbe_volatile", ecc(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
        )
        dbe_vol = r.get(
            "ecc_dbe_volatile", ecc(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
        )
        sbe_agg = r.get(
            "ecc_sbe_aggregate", ecc(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)
        )
        dbe_agg = r.get(
            "ecc_dbe_aggregate", ecc(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)
        )
        retired_sbe = r.get(
            "retired_pages_sbe",
            lambda: nvml.nvmlDeviceGetRetiredPages(
                h, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            ),
        )
        retired_dbe = r.get(
            "retired_pages_dbe",
            lambda: nvml.nvmlDeviceGetRetiredPages(
                h, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
            ),
        )
        retired_pending = r.get(
            "retired_pages_pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)
        )
        remap = r.get("remapped_rows", lambda: nvml.nvmlDeviceGetRemappedRows(h))
        procs = r.get("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h))

        migs: list[MigInstance] = []
        if mig_enabled and not r.lost:
            migs = self._read_migs(index, h, uuid, r)

        job_of = self._resolve_jobs(procs or [])
        job_rows, gpu_jobs, migs = self._map_jobs(
            index, uuid, bool(mig_enabled), procs, job_of, migs
        )

        xid = self._xid.get(uuid) if uuid else None
        gpu = GpuReading(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=pci,
            minor_number=minor,
            util_pct=float(util.gpu) if util is not None else None,
            mem_util_pct=float(util.memory) if util is not None else None,
            mem_used_mib=used,
            mem_free_mib=free,
            mem_total_mib=total,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
            energy_mj=energy,
            temperature_c=float(temp) if temp is not None else None,
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            ecc_sbe_volatile=sbe_vol,
            ecc_dbe_volatile=dbe_vol,
            ecc_sbe_aggregate=sbe_agg,
            ecc_dbe_aggregate=dbe_agg,
            retired_pages_sbe=len(retired_sbe) if retired_sbe is not None else None,
            retired_pages_dbe=len(retired_dbe) if retired_dbe is not None else None,
            retired_pages_pending=bool(retired_pending) if retired_pending is not None else None,
            remapped_rows_correctable=remap[0] if remap is not None else None,
            remapped_rows_uncorrectable=remap[1] if remap is not None else None,
            remap_pending=bool(remap[2]) if remap is not None else None,
            remap_failure=bool(remap[3]) if remap is not None else None,
            xid_last=xid.last if xid is not None else None,
            xid_count=xid.count if xid is not None else None,
            xids_seen=tuple(sorted(xid.seen)) if xid is not None else (),
            mig_enabled=mig_enabled,
            process_count=len(procs) if procs is not None else None,
            jobs=gpu_jobs,
            lost=r.lost,
            unavailable=tuple(r.unavailable),
        )
        return gpu, migs, job_rows

    def _mig_enabled(self, h: object, r: _Reader) -> bool | None:
        """MIG mode; a GPU that does not support MIG has it off (not an unreadable metric)."""
        if r.lost:
            return None
        try:
            current, _pending = self.nvml.nvmlDeviceGetMigMode(h)
        except NvmlError as exc:
            if exc.code == NVML_ERROR_NOT_SUPPORTED:
                return False
            r.record("mig_mode", exc)
            return None
        return current == NVML_DEVICE_MIG_ENABLE

    def _read_migs(self, index: int, h: object, parent_uuid: str, r: _Reader) -> list[MigInstance]:
        nvml = self.nvml
        count = r.get("mig_max_devices", lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(h)) or 0
        out: list[MigInstance] = []
        for j in range(count):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except NvmlError as exc:
                if exc.code not in (NVML_ERROR_NOT_FOUND, NVML_ERROR_INVALID_ARGUMENT):
                    r.unavailable.append(f"mig[{j}]: {exc.name}")
                continue  # an empty slot
            mig = self._read_mig(index, h, parent_uuid, j, mh, r)
            if mig is not None:
                out.append(mig)
        return out

    def _read_mig(
        self, index: int, h: object, parent_uuid: str, slot: int, mh: object, r: _Reader
    ) -> MigInstance | None:
        nvml = self.nvml
        gi = r.get(f"mig[{slot}].gpu_instance_id", lambda: nvml.nvmlDeviceGetGpuInstanceId(mh))
        if gi is None:
            return None
        ci = r.get(
            f"mig[{slot}].compute_instance_id", lambda: nvml.nvmlDeviceGetComputeInstanceId(mh)
        )
        uuid = r.get(f"mig[{slot}].uuid", lambda: nvml.nvmlDeviceGetUUID(mh)) or ""
        used, free, total = _mem_fields(
            r.get(f"mig[{slot}].memory", lambda: nvml.nvmlDeviceGetMemoryInfo(mh))
        )
        return MigInstance(
            gpu_index=index,
            parent_uuid=parent_uuid,
            uuid=uuid,
            gpu_instance_id=gi,
            compute_instance_id=ci,
            profile=self._profile_name(h, parent_uuid, gi, mh),
            mem_used_mib=used,
            mem_free_mib=free,
            mem_total_mib=total,
        )

    def _profile_name(self, h: object, parent_uuid: str, gi_id: int, mig_handle: object) -> str:
        """GPU_I_PROFILE: NVML's own profile name where the driver gives it, else from size."""
        nvml = self.nvml
        table = self._profiles.get(parent_uuid)
        if table is None:
            table = {}
            for p in range(NVML_GPU_INSTANCE_PROFILE_COUNT):
                try:
                    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
                except NvmlError:
                    continue
                table[info.id] = info
            self._profiles[parent_uuid] = table
        try:
            gi_info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(h, gi_id))
            prof = table.get(gi_info.profile_id)
            if prof is not None and prof.name:
                return prof.name.removeprefix("MIG ").strip()
            if prof is not None:
                return profile_from_size(prof.slice_count, prof.memory_size_mb)
        except NvmlError:
            pass  # needs privileges on some drivers; fall back to the MIG device's attributes
        try:
            a = nvml.nvmlDeviceGetAttributes(mig_handle)
        except NvmlError:
            return ""
        return profile_from_size(a.gpu_instance_slice_count, a.memory_size_mb)

    def _resolve_jobs(self, procs: list[ProcessInfo]) -> dict[int, str]:
        out: dict[int, str] = {}
        for p in procs:
            if p.pid in out:
                continue
            try:
                job = self.job_resolver(p.pid)
            except Exception as exc:  # a resolver bug must not cost the sample
                log.debug("job resolver failed for pid %d: %s", p.pid, type(exc).__name__)
                job = None
            if job:
                out[p.pid] = job
        return out

    def _map_jobs(
        self,
        index: int,
        uuid: str,
        mig_enabled: bool,
        procs: list[ProcessInfo] | None,
        job_of: dict[int, str],
        migs: list[MigInstance],
    ) -> tuple[list[JobGpu], tuple[str, ...], list[MigInstance]]:
        if not procs or not job_of:
            return [], (), migs
        gi_ids = {m.gpu_instance_id for m in migs}
        pids: dict[tuple[str, int | None], list[int]] = {}
        for p in procs:
            job = job_of.get(p.pid)
            if job is None:
                continue
            gi: int | None = None
            if mig_enabled and p.gpu_instance_id != NVML_INVALID_INSTANCE_ID:
                gi = p.gpu_instance_id if p.gpu_instance_id in gi_ids else None
            pids.setdefault((job, gi), []).append(p.pid)
        rows = [
            JobGpu(
                job_id=job,
                gpu_index=index,
                gpu_uuid=uuid,
                gpu_instance_id=gi,
                pids=tuple(sorted(set(ps))),
            )
            for (job, gi), ps in sorted(pids.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1))
        ]
        gpu_jobs = tuple(sorted({job for job, _ in pids}))
        if mig_enabled:
            migs = [
                m.model_copy(
                    update={
                        "jobs": tuple(sorted({job for job, gi in pids if gi == m.gpu_instance_id}))
                    }
                )
                for m in migs
            ]
        return rows, gpu_jobs, migs
