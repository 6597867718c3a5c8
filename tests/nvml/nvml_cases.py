"""Fake GPU cases shared by the NVML agent tests (the fake sits at the one NVML seam)."""

from __future__ import annotations

from datetime import UTC, datetime

from provisioner.agent.nvml_api import ProcessInfo
from provisioner.agent.nvml_fake import FakeGpu, FakeMig, FakeNvml, a100

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
UUID0 = "GPU-a1000000-0000-0000-0000-000000000000"
UUID1 = "GPU-a1000001-0000-0000-0000-000000000001"
MIG_PARENT = "GPU-a1000002-0000-0000-0000-000000000002"
MIG_A = "MIG-11111111-1111-1111-1111-111111111111"
MIG_B = "MIG-22222222-2222-2222-2222-222222222222"


def busy_a100() -> FakeGpu:
    return a100(
        0,
        util_gpu=87,
        util_mem=41,
        mem_used_mib=40960,
        power_mw=312_456,
        energy_mj=123_456_789,
        temperature_c=64,
        sm_clock_mhz=1410,
        mem_clock_mhz=1593,
        processes=[ProcessInfo(pid=4242, used_gpu_memory=40 * 1024**3)],
    )


def idle_a100() -> FakeGpu:
    return a100(1, util_gpu=0, util_mem=0, mem_used_mib=4, power_mw=61_000, energy_mj=98_765_432)


def mig_a100() -> FakeGpu:
    """An A100 in MIG mode with a 1g.10gb and a 3g.40gb instance; pid 5151 runs in GI 9."""
    return a100(
        2,
        uuid=MIG_PARENT,
        mig_mode=1,
        mem_used_mib=10240,
        migs=[
            FakeMig(gpu_instance_id=13, uuid=MIG_A, profile_id=19, slices=1, memory_mb=9728),
            FakeMig(
                gpu_instance_id=9,
                uuid=MIG_B,
                profile_id=9,
                slices=3,
                memory_mb=40192,
                mem_used_mib=10000,
            ),
        ],
        processes=[ProcessInfo(pid=5151, gpu_instance_id=9, compute_instance_id=0)],
    )


def two_a100_nvml() -> FakeNvml:
    return FakeNvml([busy_a100(), idle_a100()])


def jobs_by_pid(mapping: dict[int, str]):
    return lambda pid: mapping.get(pid)
