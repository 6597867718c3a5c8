"""The one seam between the agent and NVML.

`Nvml` lists exactly the pynvml functions the agent calls, under their pynvml names, with plain
Python return values instead of ctypes structures. `PynvmlBackend` delegates to `pynvml`
(nvidia-ml-py, imported lazily on `nvmlInit`); tests and demos use `nvml_fake.FakeNvml`.

Every failure crosses the seam as `NvmlError` carrying NVML's numeric return code, so callers
decide by code (never by message text) and pynvml's exception classes stay behind the seam.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar

from provisioner.domain.errors import ProvisionerError

# NVML return codes (nvml.h `nvmlReturn_t`); values are stable across driver releases.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999
# Not an NVML code: the Python binding itself (nvidia-ml-py) is not installed.
BINDING_NOT_INSTALLED = -1

ERROR_NAMES: dict[int, str] = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML/RM version mismatch",
    NVML_ERROR_NO_DATA: "No Data",
    NVML_ERROR_UNKNOWN: "Unknown Error",
    BINDING_NOT_INSTALLED: "nvidia-ml-py not installed",
}

# Enum values the agent passes through the seam (nvml.h).
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x0000000000000008
# gpuInstanceId / computeInstanceId of a process or event that is not inside a MIG instance.
NVML_INVALID_INSTANCE_ID = 0xFFFFFFFF


class NvmlError(ProvisionerError):
    """An NVML call failed with return code `code`."""

    def __init__(self, code: int, function: str = "") -> None:
        self.code = code
        self.function = function
        name = ERROR_NAMES.get(code, f"NVML error {code}")
        super().__init__(f"{function}: {name}" if function else name)

    @property
    def name(self) -> str:
        return ERROR_NAMES.get(self.code, f"NVML error {self.code}")


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    total: int  # bytes
    used: int
    free: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    used_gpu_memory: int | None = None  # bytes; None when NVML cannot tell
    gpu_instance_id: int = NVML_INVALID_INSTANCE_ID
    compute_instance_id: int = NVML_INVALID_INSTANCE_ID


@dataclass(frozen=True, slots=True)
class EventData:
    """One NVML event; `uuid` is the GPU it came from (the backend resolves the handle)."""

    uuid: str
    event_type: int
    event_data: int  # the Xid for NVML_EVENT_TYPE_XID_CRITICAL_ERROR
    gpu_instance_id: int = NVML_INVALID_INSTANCE_ID
    compute_instance_id: int = NVML_INVALID_INSTANCE_ID


@dataclass(frozen=True, slots=True)
class DeviceAttributes:
    multiprocessor_count: int
    gpu_instance_slice_count: int
    compute_instance_slice_count: int
    memory_size_mb: int


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    id: int
    profile_id: int


@dataclass(frozen=True, slots=True)
class GpuInstanceProfileInfo:
    id: int
    slice_count: int
    memory_size_mb: int
    name: str  # e.g. "MIG 1g.10gb"; empty on drivers without the v2 structure


class Nvml(Protocol):
    """The pynvml functions the agent calls. Handles are opaque."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...
    def nvmlDeviceGetName(self, handle: object) -> str: ...
    def nvmlDeviceGetUUID(self, handle: object) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: object) -> str:
        """The PCI bus id, e.g. "00000000:07:00.0"."""
        ...

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization: ...
    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo: ...
    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        """Milliwatts."""
        ...

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        """Milliwatts: the power cap the driver enforces now."""
        ...

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        """Millijoules since the driver was last loaded."""
        ...

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int) -> int: ...
    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int: ...
    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure)."""
        ...

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[ProcessInfo]: ...
    def nvmlDeviceGetMigMode(self, handle: object) -> tuple[int, int]:
        """(current, pending)."""
        ...

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> object: ...
    def nvmlDeviceGetGpuInstanceId(self, mig_handle: object) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, mig_handle: object) -> int: ...
    def nvmlDeviceGetAttributes(self, mig_handle: object) -> DeviceAttributes: ...
    def nvmlDeviceGetGpuInstanceById(self, handle: object, gpu_instance_id: int) -> object: ...
    def nvmlGpuInstanceGetInfo(self, gpu_instance: object) -> GpuInstanceInfo: ...
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: object, profile: int
    ) -> GpuInstanceProfileInfo: ...
    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int: ...
    def nvmlEventSetCreate(self) -> object: ...
    def nvmlDeviceRegisterEvents(
        self, handle: object, event_types: int, event_set: object
    ) -> None: ...

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> EventData:
        """Raises NvmlError(NVML_ERROR_TIMEOUT) when no event is waiting."""
        ...

    def nvmlEventSetFree(self, event_set: object) -> None: ...


T = TypeVar("T")


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _import_pynvml() -> ModuleType:
    return importlib.import_module("pynvml")


class PynvmlBackend:
    """`Nvml` over nvidia-ml-py. pynvml is imported on `nvmlInit`, never at module import."""

    def __init__(self, loader: Callable[[], ModuleType] = _import_pynvml) -> None:
        self._loader = loader
        self._mod: Any = None

    def _call(self, name: str, fn: Callable[[Any], T]) -> T:
        mod = self._mod
        if mod is None:
            raise NvmlError(NVML_ERROR_UNINITIALIZED, name)
        try:
            return fn(mod)
        except mod.NVMLError as exc:
            raise NvmlError(int(getattr(exc, "value", NVML_ERROR_UNKNOWN)), name) from None
        except AttributeError:
            # An older nvidia-ml-py without this function.
            raise NvmlError(NVML_ERROR_FUNCTION_NOT_FOUND, name) from None

    def nvmlInit(self) -> None:
        if self._mod is None:
            try:
                self._mod = self._loader()
            except ImportError:
                raise NvmlError(BINDING_NOT_INSTALLED, "nvmlInit") from None
        self._call("nvmlInit", lambda m: m.nvmlInit())

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown", lambda m: m.nvmlShutdown())

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._call(
            "nvmlSystemGetDriverVersion", lambda m: _text(m.nvmlSystemGetDriverVersion())
        )

    def nvmlDeviceGetCount(self) -> int:
        return self._call("nvmlDeviceGetCount", lambda m: int(m.nvmlDeviceGetCount()))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return self._call(
            "nvmlDeviceGetHandleByIndex", lambda m: m.nvmlDeviceGetHandleByIndex(index)
        )

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._call("nvmlDeviceGetName", lambda m: _text(m.nvmlDeviceGetName(handle)))

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._call("nvmlDeviceGetUUID", lambda m: _text(m.nvmlDeviceGetUUID(handle)))

    def nvmlDeviceGetPciInfo(self, handle: object) -> str:
        return self._call(
            "nvmlDeviceGetPciInfo", lambda m: _text(m.nvmlDeviceGetPciInfo(handle).busId)
        )

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetMinorNumber", lambda m: int(m.nvmlDeviceGetMinorNumber(handle))
        )

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:
        def get(m: Any) -> Utilization:
            u = m.nvmlDeviceGetUtilizationRates(handle)
            return Utilization(gpu=int(u.gpu), memory=int(u.memory))

        return self._call("nvmlDeviceGetUtilizationRates", get)

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo:
        def get(m: Any) -> MemoryInfo:
            i = m.nvmlDeviceGetMemoryInfo(handle)
            return MemoryInfo(total=int(i.total), used=int(i.used), free=int(i.free))

        return self._call("nvmlDeviceGetMemoryInfo", get)

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetPowerUsage", lambda m: int(m.nvmlDeviceGetPowerUsage(handle))
        )

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetEnforcedPowerLimit",
            lambda m: int(m.nvmlDeviceGetEnforcedPowerLimit(handle)),
        )

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetTotalEnergyConsumption",
            lambda m: int(m.nvmlDeviceGetTotalEnergyConsumption(handle)),
        )

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        try:
            return self._call(
                "nvmlDeviceGetTemperature",
                lambda m: int(m.nvmlDeviceGetTemperature(handle, sensor)),
            )
        except NvmlError as exc:
            if exc.code != NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
        # Drivers that dropped the deprecated call have its versioned successor.
        return self._call(
            "nvmlDeviceGetTemperatureV", lambda m: int(m.nvmlDeviceGetTemperatureV(handle, sensor))
        )

    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int) -> int:
        return self._call(
            "nvmlDeviceGetClockInfo", lambda m: int(m.nvmlDeviceGetClockInfo(handle, clock_type))
        )

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int:
        return self._call(
            "nvmlDeviceGetTotalEccErrors",
            lambda m: int(m.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type)),
        )

    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> list[int]:
        return self._call(
            "nvmlDeviceGetRetiredPages",
            lambda m: [int(p) for p in m.nvmlDeviceGetRetiredPages(handle, cause)],
        )

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetRetiredPagesPendingStatus",
            lambda m: int(m.nvmlDeviceGetRetiredPagesPendingStatus(handle)),
        )

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        def get(m: Any) -> tuple[int, int, int, int]:
            corr, unc, pending, failure = m.nvmlDeviceGetRemappedRows(handle)
            return int(corr), int(unc), int(pending), int(failure)

        return self._call("nvmlDeviceGetRemappedRows", get)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[ProcessInfo]:
        def get(m: Any) -> list[ProcessInfo]:
            out: list[ProcessInfo] = []
            for p in m.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(p, "usedGpuMemory", None)
                out.append(
                    ProcessInfo(
                        pid=int(p.pid),
                        used_gpu_memory=int(used) if used is not None else None,
                        gpu_instance_id=int(getattr(p, "gpuInstanceId", NVML_INVALID_INSTANCE_ID)),
                        compute_instance_id=int(
                            getattr(p, "computeInstanceId", NVML_INVALID_INSTANCE_ID)
                        ),
                    )
                )
            return out

        return self._call("nvmlDeviceGetComputeRunningProcesses", get)

    def nvmlDeviceGetMigMode(self, handle: object) -> tuple[int, int]:
        def get(m: Any) -> tuple[int, int]:
            current, pending = m.nvmlDeviceGetMigMode(handle)
            return int(current), int(pending)

        return self._call("nvmlDeviceGetMigMode", get)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetMaxMigDeviceCount",
            lambda m: int(m.nvmlDeviceGetMaxMigDeviceCount(handle)),
        )

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> object:
        return self._call(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            lambda m: m.nvmlDeviceGetMigDeviceHandleByIndex(handle, index),
        )

    def nvmlDeviceGetGpuInstanceId(self, mig_handle: object) -> int:
        return self._call(
            "nvmlDeviceGetGpuInstanceId", lambda m: int(m.nvmlDeviceGetGpuInstanceId(mig_handle))
        )

    def nvmlDeviceGetComputeInstanceId(self, mig_handle: object) -> int:
        return self._call(
            "nvmlDeviceGetComputeInstanceId",
            lambda m: int(m.nvmlDeviceGetComputeInstanceId(mig_handle)),
        )

    def nvmlDeviceGetAttributes(self, mig_handle: object) -> DeviceAttributes:
        def get(m: Any) -> DeviceAttributes:
            a = m.nvmlDeviceGetAttributes(mig_handle)
            return DeviceAttributes(
                multiprocessor_count=int(a.multiprocessorCount),
                gpu_instance_slice_count=int(a.gpuInstanceSliceCount),
                compute_instance_slice_count=int(a.computeInstanceSliceCount),
                memory_size_mb=int(a.memorySizeMB),
            )

        return self._call("nvmlDeviceGetAttributes", get)

    def nvmlDeviceGetGpuInstanceById(self, handle: object, gpu_instance_id: int) -> object:
        return self._call(
            "nvmlDeviceGetGpuInstanceById",
            lambda m: m.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id),
        )

    def nvmlGpuInstanceGetInfo(self, gpu_instance: object) -> GpuInstanceInfo:
        def get(m: Any) -> GpuInstanceInfo:
            i = m.nvmlGpuInstanceGetInfo(gpu_instance)
            return GpuInstanceInfo(id=int(i.id), profile_id=int(i.profileId))

        return self._call("nvmlGpuInstanceGetInfo", get)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: object, profile: int
    ) -> GpuInstanceProfileInfo:
        def get(m: Any) -> GpuInstanceProfileInfo:
            i = m.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            return GpuInstanceProfileInfo(
                id=int(i.id),
                slice_count=int(i.sliceCount),
                memory_size_mb=int(i.memorySizeMB),
                name=_text(getattr(i, "name", b"")),
            )

        return self._call("nvmlDeviceGetGpuInstanceProfileInfo", get)

    def nvmlDeviceGetSupportedEventTypes(self, handle: object) -> int:
        return self._call(
            "nvmlDeviceGetSupportedEventTypes",
            lambda m: int(m.nvmlDeviceGetSupportedEventTypes(handle)),
        )

    def nvmlEventSetCreate(self) -> object:
        return self._call("nvmlEventSetCreate", lambda m: m.nvmlEventSetCreate())

    def nvmlDeviceRegisterEvents(self, handle: object, event_types: int, event_set: object) -> None:
        self._call(
            "nvmlDeviceRegisterEvents",
            lambda m: m.nvmlDeviceRegisterEvents(handle, event_types, event_set),
        )

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> EventData:
        def get(m: Any) -> EventData:
            d = m.nvmlEventSetWait(event_set, timeout_ms)
            return EventData(
                uuid=_text(m.nvmlDeviceGetUUID(d.device)),
                event_type=int(d.eventType),
                event_data=int(d.eventData),
                gpu_instance_id=int(getattr(d, "gpuInstanceId", NVML_INVALID_INSTANCE_ID)),
                compute_instance_id=int(getattr(d, "computeInstanceId", NVML_INVALID_INSTANCE_ID)),
            )

        return self._call("nvmlEventSetWait", get)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._call("nvmlEventSetFree", lambda m: m.nvmlEventSetFree(event_set))
