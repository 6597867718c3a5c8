"""A fake NVML behind the `Nvml` seam, for tests and demos without a GPU.

Configure GPUs as `FakeGpu` values; make any call fail with an NVML return code
(`FakeGpu.errors`), mark a GPU lost, enable MIG with `FakeMig` instances, queue Xid events
(`FakeNvml.inject_xid`), or make `nvmlInit` fail as it does without a driver (`init_error`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.agent.nvml_api import (
    NVML_CLOCK_SM,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
    NVML_INVALID_INSTANCE_ID,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_VOLATILE_ECC,
    DeviceAttributes,
    EventData,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    MemoryInfo,
    NvmlError,
    ProcessInfo,
    Utilization,
)

MIB = 1024 * 1024

# GPU instance profiles of an A100 80GB: profile index -> info (ids as `nvidia-smi mig -lgip`).
A100_80GB_PROFILES: dict[int, GpuInstanceProfileInfo] = {
    0: GpuInstanceProfileInfo(id=19, slice_count=1, memory_size_mb=9728, name="MIG 1g.10gb"),
    1: GpuInstanceProfileInfo(id=14, slice_count=2, memory_size_mb=19968, name="MIG 2g.20gb"),
    2: GpuInstanceProfileInfo(id=9, slice_count=3, memory_size_mb=40192, name="MIG 3g.40gb"),
    3: GpuInstanceProfileInfo(id=5, slice_count=4, memory_size_mb=40192, name="MIG 4g.40gb"),
    4: GpuInstanceProfileInfo(id=0, slice_count=7, memory_size_mb=80896, name="MIG 7g.80gb"),
    7: GpuInstanceProfileInfo(id=15, slice_count=1, memory_size_mb=19968, name="MIG 1g.20gb"),
}


@dataclass
class FakeMig:
    gpu_instance_id: int
    uuid: str
    profile_id: int = 19
    slices: int = 1
    memory_mb: int = 9728
    mem_used_mib: int = 0
    compute_instance_id: int = 0


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    pci_bus_id: str = "00000000:07:00.0"
    minor_number: int = 0
    util_gpu: int = 0
    util_mem: int = 0
    mem_total_mib: int = 81920
    mem_used_mib: int = 0
    power_mw: int = 60_000
    power_limit_mw: int = 400_000
    energy_mj: int = 1_000_000
    temperature_c: int = 35
    sm_clock_mhz: int = 1410
    mem_clock_mhz: int = 1593
    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    ecc_sbe_aggregate: int = 0
    ecc_dbe_aggregate: int = 0
    retired_pages_sbe: list[int] = field(default_factory=list)
    retired_pages_dbe: list[int] = field(default_factory=list)
    retired_pages_pending: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    processes: list[ProcessInfo] = field(default_factory=list)
    mig_mode: int = 0
    migs: list[FakeMig] = field(default_factory=list)
    profiles: dict[int, GpuInstanceProfileInfo] = field(
        default_factory=lambda: dict(A100_80GB_PROFILES)
    )
    gpu_instance_query_allowed: bool = True  # False: nvmlDeviceGetGpuInstanceById needs root
    supported_events: int = NVML_EVENT_TYPE_XID_CRITICAL_ERROR
    errors: dict[str, int] = field(default_factory=dict)  # pynvml function name -> NVML code
    lost: bool = False


@dataclass(frozen=True)
class _GpuHandle:
    index: int


@dataclass(frozen=True)
class _MigHandle:
    index: int
    slot: int


@dataclass(frozen=True)
class _GiHandle:
    index: int
    gpu_instance_id: int


class FakeNvml:
    """Implements `provisioner.agent.nvml_api.Nvml` over in-memory `FakeGpu`s."""

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        driver_version: str = "550.54.15",
        init_error: int | None = None,
        count_error: int | None = None,
        event_set_error: int | None = None,
    ) -> None:
        self.gpus = gpus if gpus is not None else []
        self.driver_version = driver_version
        self.init_error = init_error
        self.count_error = count_error
        self.event_set_error = event_set_error
        self.initialized = False
        self.shutdowns = 0
        self.calls: list[str] = []
        self.events: list[EventData] = []
        self.registered: set[str] = set()

    # -- test controls

    def inject_xid(self, uuid: str, xid: int) -> None:
        self.events.append(
            EventData(uuid=uuid, event_type=NVML_EVENT_TYPE_XID_CRITICAL_ERROR, event_data=xid)
        )

    # -- plumbing

    def _enter(self, fn: str) -> None:
        self.calls.append(fn)
        if not self.initialized:
            raise NvmlError(NVML_ERROR_UNINITIALIZED, fn)

    def _gpu(self, fn: str, handle: object) -> FakeGpu:
        self._enter(fn)
        if isinstance(handle, _GpuHandle | _MigHandle | _GiHandle):
            gpu = self.gpus[handle.index]
        else:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT, fn)
        if gpu.lost:
            raise NvmlError(NVML_ERROR_GPU_IS_LOST, fn)
        if fn in gpu.errors:
            raise NvmlError(gpu.errors[fn], fn)
        return gpu

    def _mig(self, fn: str, handle: object) -> FakeMig:
        gpu = self._gpu(fn, handle)
        if not isinstance(handle, _MigHandle):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT, fn)
        return gpu.migs[handle.slot]

    # -- Nvml

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NvmlError(self.init_error, "nvmlInit")
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise NvmlError(self.count_error, "nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        fn = "nvmlDeviceGetHandleByIndex"
        self._enter(fn)
        if not 0 <= index < len(self.gpus):
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT, fn)
        if fn in self.gpus[index].errors:
            raise NvmlError(self.gpus[index].errors[fn], fn)
        return _GpuHandle(index)

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        if isinstance(handle, _MigHandle):
            return self._mig("nvmlDeviceGetUUID", handle).uuid
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: object) -> str:
        return self._gpu("nvmlDeviceGetPciInfo", handle).pci_bus_id

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetMinorNumber", handle).minor_number

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:
        g = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if g.mig_mode == NVML_DEVICE_MIG_ENABLE:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceGetUtilizationRates")
        return Utilization(gpu=g.util_gpu, memory=g.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo:
        if isinstance(handle, _MigHandle):
            m = self._mig("nvmlDeviceGetMemoryInfo", handle)
            total = m.memory_mb * MIB
            used = m.mem_used_mib * MIB
        else:
            g = self._gpu("nvmlDeviceGetMemoryInfo", handle)
            total = g.mem_total_mib * MIB
            used = g.mem_used_mib * MIB
        return MemoryInfo(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        return self._gpu("nvmlDeviceGetTemperature", handle).temperature_c

    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int) -> int:
        g = self._gpu("nvmlDeviceGetClockInfo", handle)
        return g.sm_clock_mhz if clock_type == NVML_CLOCK_SM else g.mem_clock_mhz

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int:
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return g.ecc_sbe_volatile if counter_type == NVML_VOLATILE_ECC else g.ecc_sbe_aggregate
        return g.ecc_dbe_volatile if counter_type == NVML_VOLATILE_ECC else g.ecc_dbe_aggregate

    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetRetiredPages", handle)
        if cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return list(g.retired_pages_dbe)
        return list(g.retired_pages_sbe)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", handle).retired_pages_pending

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        return self._gpu("nvmlDeviceGetRemappedRows", handle).remapped_rows

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[ProcessInfo]:
        return list(self._gpu("nvmlDeviceGetComputeRunningProcesses", handle).processes)

    def nvmlDeviceGetMigMode(self, handle: object) -> tuple[int, int]:
        g = self._gpu("nvmlDeviceGetMigMode", handle)
        return g.mig_mode, g.mig_mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        g = self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7 if g.mig_mode == NVML_DEVICE_MIG_ENABLE else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> object:
        fn = "nvmlDeviceGetMigDeviceHandleByIndex"
        g = self._gpu(fn, handle)
        if not isinstance(handle, _GpuHandle) or g.mig_mode != NVML_DEVICE_MIG_ENABLE:
            raise NvmlError(NVML_ERROR_INVALID_ARGUMENT, fn)
        if index >= len(g.migs):
            raise NvmlError(NVML_ERROR_NOT_FOUND, fn)
        return _MigHandle(handle.index, index)

    def nvmlDeviceGetGpuInstanceId(self, mig_handle: object) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", mig_handle).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, mig_handle: object) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", mig_handle).compute_instance_id

    def nvmlDeviceGetAttributes(self, mig_handle: object) -> DeviceAttributes:
        m = self._mig("nvmlDeviceGetAttributes", mig_handle)
        return DeviceAttributes(
            multiprocessor_count=14 * m.slices,
            gpu_instance_slice_count=m.slices,
            compute_instance_slice_count=m.slices,
            memory_size_mb=m.memory_mb,
        )

    def nvmlDeviceGetGpuInstanceById(self, handle: object, gpu_instance_id: int) -> object:
        fn = "nvmlDeviceGetGpuInstanceById"
        g = self._gpu(fn, handle)
        if not g.gpu_instance_query_allowed:
            raise NvmlError(NVML_ERROR_NO_PERMISSION, fn)
        if not any(m.gpu_instance_id == gpu_instance_id for m in g.migs):
            raise NvmlError(NVML_ERROR_NOT_FOUND, fn)
        assert isinstance(handle, _GpuHandle)
        return _GiHandle(handle.index, gpu_instance_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: object) -> GpuInstanceInfo:
        g = self._gpu("nvmlGpuInstanceGetInfo", gpu_instance)
        assert isinstance(gpu_instance, _GiHandle)
        mig = next(m for m in g.migs if m.gpu_instance_id == gpu_instance.gpu_instance_id)
        return GpuInstanceInfo(id=mig.gpu_instance_id, profile_id=mig.profile_id)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: object, profile: int
    ) -> GpuInstanceProfileInfo:
        fn = "nvmlDeviceGetGpuInstanceProfileInfo"
        g = self._gpu(fn, handle)
        if g.mig_mode != NVML_DEVICE_MIG_ENABLE or profile not in g.profiles:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED, fn)
        return g.profiles[profile]

    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetSupportedEventTypes", handle).supported_events

    def nvmlEventSetCreate(self) -> object:
        self._enter("nvmlEventSetCreate")
        if self.event_set_error is not None:
            raise NvmlError(self.event_set_error, "nvmlEventSetCreate")
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: object, event_types: int, event_set: object) -> None:
        g = self._gpu("nvmlDeviceRegisterEvents", handle)
        if not event_types & g.supported_events:
            raise NvmlError(NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceRegisterEvents")
        self.registered.add(g.uuid)

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> EventData:
        self._enter("nvmlEventSetWait")
        while self.events:
            ev = self.events.pop(0)
            if ev.uuid in self.registered:
                return ev
        raise NvmlError(NVML_ERROR_TIMEOUT, "nvmlEventSetWait")

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._enter("nvmlEventSetFree")


def a100(index: int, **kw: object) -> FakeGpu:
    """An A100 80GB at NVML index `index` with plausible idle readings; override any field."""
    base: dict[str, object] = {
        "uuid": f"GPU-a100000{index}-0000-0000-0000-00000000000{index}",
        "pci_bus_id": f"00000000:{7 + index:02X}:00.0",
        "minor_number": index,
    }
    base.update(kw)
    return FakeGpu(**base)  # type: ignore[arg-type]


__all__ = [
    "A100_80GB_PROFILES",
    "NVML_INVALID_INSTANCE_ID",
    "FakeGpu",
    "FakeMig",
    "FakeNvml",
    "a100",
]
