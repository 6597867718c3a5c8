"""The sampler against the fake NVML: normal GPUs, MIG, per-call errors, lost GPU, no driver."""

from __future__ import annotations

import types

import pytest
from nvml_cases import (
    MIG_A,
    MIG_B,
    MIG_PARENT,
    T0,
    UUID0,
    UUID1,
    busy_a100,
    idle_a100,
    jobs_by_pid,
    mig_a100,
)

from provisioner.agent.nvml_api import (
    BINDING_NOT_INSTALLED,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NvmlError,
    ProcessInfo,
    PynvmlBackend,
)
from provisioner.agent.nvml_fake import FakeNvml, a100
from provisioner.agent.sampler import (
    NvmlSampler,
    NvmlUnavailable,
    ProcJobResolver,
    profile_from_size,
)

pytestmark = pytest.mark.nvml


def sampler(nvml, clock, **kw) -> NvmlSampler:
    return NvmlSampler(nvml, clock, node="gpu-n1", hostname="gpu-n1.example", **kw)


def test_two_a100_every_metric(two_a100, clock):
    with sampler(two_a100, clock, job_resolver=jobs_by_pid({4242: "1001"})) as s:
        t = s.sample()
    assert t.node == "gpu-n1" and t.hostname == "gpu-n1.example"
    assert t.sampled_ts == T0.timestamp()
    assert t.driver_version == "550.54.15"
    g0, g1 = t.gpus
    assert (g0.index, g0.uuid, g0.name, g0.device) == (0, UUID0, "NVIDIA A100-SXM4-80GB", "nvidia0")
    assert g0.pci_bus_id == "00000000:07:00.0"
    assert (g0.util_pct, g0.mem_util_pct) == (87.0, 41.0)
    assert (g0.mem_used_mib, g0.mem_free_mib, g0.mem_total_mib) == (40960, 40960, 81920)
    assert g0.power_w == pytest.approx(312.456)
    assert g0.energy_mj == 123_456_789
    assert (g0.temperature_c, g0.sm_clock_mhz, g0.mem_clock_mhz) == (64.0, 1410, 1593)
    assert (g0.ecc_sbe_volatile, g0.ecc_dbe_volatile) == (0, 0)
    assert (g0.ecc_sbe_aggregate, g0.ecc_dbe_aggregate) == (0, 0)
    assert (g0.retired_pages_sbe, g0.retired_pages_dbe, g0.retired_pages_pending) == (0, 0, False)
    assert (g0.remapped_rows_correctable, g0.remapped_rows_uncorrectable) == (0, 0)
    assert (g0.remap_pending, g0.remap_failure) == (False, False)
    assert g0.mig_enabled is False
    assert g0.xid_last == 0 and g0.xid_count == 0 and g0.xids_seen == ()
    assert g0.process_count == 1 and g0.jobs == ("1001",)
    assert g0.unavailable == () and not g0.lost
    assert g1.uuid == UUID1 and g1.util_pct == 0.0 and g1.jobs == () and g1.process_count == 0
    assert t.mig_instances == ()
    assert [(j.job_id, j.gpu_index, j.gpu_uuid, j.pids) for j in t.jobs] == [
        ("1001", 0, UUID0, (4242,))
    ]
    assert two_a100.shutdowns == 1


def test_not_supported_power_omits_only_power(clock):
    nvml = FakeNvml(
        [
            a100(0, errors={"nvmlDeviceGetPowerUsage": NVML_ERROR_NOT_SUPPORTED}),
            idle_a100(),
        ]
    )
    with sampler(nvml, clock) as s:
        g0, g1 = s.sample().gpus
    assert g0.power_w is None
    assert g0.unavailable == ("power: Not Supported",)
    assert g0.energy_mj is not None and g0.util_pct == 0.0 and g0.temperature_c == 35.0
    assert g1.power_w == 61.0 and g1.unavailable == ()


def test_gpu_lost_on_one_device(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    with sampler(nvml, clock) as s:
        nvml.gpus[1].lost = True
        g0, g1 = s.sample().gpus
    assert g0.util_pct == 87.0 and not g0.lost
    assert g1.lost and g1.index == 1
    assert g1.unavailable == ("uuid: GPU is lost",)
    assert g1.util_pct is None and g1.power_w is None and g1.mem_used_mib is None
    # After "GPU is lost" the sampler stops asking that GPU.
    calls_after_lost = [c for c in nvml.calls if c == "nvmlDeviceGetUUID"]
    assert len(calls_after_lost) == 2 + 2  # xid registration (2) + one sample (2)


def test_handle_lookup_failure_keeps_other_gpus(clock):
    nvml = FakeNvml(
        [busy_a100(), a100(1, errors={"nvmlDeviceGetHandleByIndex": NVML_ERROR_GPU_IS_LOST})]
    )
    with sampler(nvml, clock, watch_xid=False) as s:
        g0, g1 = s.sample().gpus
    assert g0.uuid == UUID0
    assert g1.lost and g1.uuid == "" and g1.unavailable == ("handle: GPU is lost",)


def test_mig_instances_profiles_and_jobs(clock):
    nvml = FakeNvml([busy_a100(), mig_a100()])
    with sampler(nvml, clock, job_resolver=jobs_by_pid({4242: "1001", 5151: "2002"})) as s:
        t = s.sample()
    parent = t.gpu(1)
    assert parent is not None
    assert parent.uuid == MIG_PARENT and parent.mig_enabled is True
    assert parent.util_pct is None  # not read on MIG GPUs, and not reported as unavailable
    assert parent.unavailable == ()  # utilisation was not even asked (the fake would refuse)
    assert parent.jobs == ("2002",)
    assert [(m.gpu_index, m.uuid, m.gpu_instance_id, m.profile) for m in t.mig_instances] == [
        (1, MIG_A, 13, "1g.10gb"),
        (1, MIG_B, 9, "3g.40gb"),
    ]
    a, b = t.mig_instances
    assert (a.mem_total_mib, a.mem_used_mib, a.mem_free_mib) == (9728, 0, 9728)
    assert (b.mem_total_mib, b.mem_used_mib) == (40192, 10000)
    assert a.parent_uuid == MIG_PARENT and a.compute_instance_id == 0
    assert a.jobs == () and b.jobs == ("2002",)
    assert [(j.job_id, j.gpu_index, j.gpu_instance_id) for j in t.jobs] == [
        ("1001", 0, None),
        ("2002", 1, 9),
    ]


def test_mig_profile_falls_back_to_attributes_without_privileges(clock):
    gpu = mig_a100()
    gpu.gpu_instance_query_allowed = False
    nvml = FakeNvml([gpu])
    with sampler(nvml, clock) as s:
        t = s.sample()
    assert [m.profile for m in t.mig_instances] == ["1g.10gb", "3g.40gb"]


@pytest.mark.parametrize(
    ("slices", "mb", "name"),
    [(1, 4864, "1g.5gb"), (1, 9728, "1g.10gb"), (3, 40192, "3g.40gb"), (7, 81408, "7g.80gb")],
)
def test_profile_from_size(slices, mb, name):
    assert profile_from_size(slices, mb) == name


def test_xid_events_non_blocking(two_a100, clock):
    with sampler(two_a100, clock) as s:
        assert two_a100.registered == {UUID0, UUID1}
        two_a100.inject_xid(UUID1, 79)
        two_a100.inject_xid(UUID1, 13)
        t1 = s.sample()
        t2 = s.sample()
    g1 = t1.gpu(1)
    assert g1 is not None
    assert (g1.xid_last, g1.xid_count, g1.xids_seen) == (13, 2, (13, 79))
    assert t1.gpu(0).xid_count == 0  # type: ignore[union-attr]
    assert t2.gpu(1).xid_count == 2  # type: ignore[union-attr]


def test_xid_unsupported_leaves_xid_unknown(clock):
    nvml = FakeNvml([a100(0, supported_events=0)])
    with sampler(nvml, clock) as s:
        g = s.sample().gpus[0]
    assert g.xid_last is None and g.xid_count is None


def test_event_set_failure_is_not_fatal(clock):
    nvml = FakeNvml([busy_a100()], event_set_error=NVML_ERROR_NOT_SUPPORTED)
    with sampler(nvml, clock) as s:
        g = s.sample().gpus[0]
    assert g.util_pct == 87.0 and g.xid_last is None


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1) not found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (NVML_ERROR_NO_PERMISSION, "no permission"),
        (BINDING_NOT_INSTALLED, "pip install 'gpu-burst-provisioner[nvml]'"),
    ],
)
def test_no_driver_is_unavailable(clock, code, words):
    nvml = FakeNvml([busy_a100()], init_error=code)
    with pytest.raises(NvmlUnavailable, match=r".+") as info:
        sampler(nvml, clock).open()
    assert words in str(info.value)
    assert info.value.code == code


def test_no_gpu_is_unavailable_and_shuts_down(clock):
    nvml = FakeNvml([])
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        sampler(nvml, clock).open()
    assert nvml.shutdowns == 1


def test_sample_before_open_is_a_bug(two_a100, clock):
    with pytest.raises(RuntimeError):
        sampler(two_a100, clock).sample()


def test_resolver_crash_costs_only_the_mapping(two_a100, clock):
    def broken(pid: int) -> str | None:
        raise PermissionError(pid)

    with sampler(two_a100, clock, job_resolver=broken) as s:
        t = s.sample()
    assert t.jobs == () and t.gpus[0].process_count == 1


# --------------------------------------------------------------------------- /proc job mapping


def test_proc_resolver_environ_then_cgroup(tmp_path):
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "environ").write_bytes(b"HOME=/home/a\0SLURM_JOB_ID=777\0PATH=/bin\0")
    (tmp_path / "200").mkdir()  # environ unreadable (not there): cgroup v2 path
    (tmp_path / "200" / "cgroup").write_text(
        "0::/system.slice/slurmstepd.scope/job_888/step_0/user/task_0\n"
    )
    (tmp_path / "300").mkdir()  # cgroup v1
    (tmp_path / "300" / "cgroup").write_text("4:devices:/slurm/uid_1000/job_999/step_batch\n")
    (tmp_path / "400").mkdir()
    (tmp_path / "400" / "environ").write_bytes(b"HOME=/root\0")
    (tmp_path / "400" / "cgroup").write_text("0::/user.slice/user-0.slice/session-1.scope\n")
    r = ProcJobResolver(tmp_path)
    assert [r(100), r(200), r(300), r(400), r(500)] == ["777", "888", "999", None, None]


def test_sampler_with_proc_resolver(tmp_path, clock):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "environ").write_bytes(b"SLURM_JOB_ID=31337\0")
    nvml = FakeNvml([a100(0, processes=[ProcessInfo(pid=4242), ProcessInfo(pid=1)])])
    with sampler(nvml, clock, job_resolver=ProcJobResolver(tmp_path)) as s:
        g = s.sample().gpus[0]
    assert g.jobs == ("31337",) and g.process_count == 2


# --------------------------------------------------------------------------- the real backend


def _stub_pynvml(**functions):
    """A module shaped like pynvml with NVMLError; functions raise or return as given."""

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            self.value = value

    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    for name, fn in functions.items():
        setattr(mod, name, fn(NVMLError))
    return mod


def test_backend_translates_library_not_found():
    def init(err):
        def f():
            raise err(NVML_ERROR_LIBRARY_NOT_FOUND)

        return f

    backend = PynvmlBackend(loader=lambda: _stub_pynvml(nvmlInit=init))
    with pytest.raises(NvmlError) as info:
        backend.nvmlInit()
    assert info.value.code == NVML_ERROR_LIBRARY_NOT_FOUND


def test_backend_without_binding(clock):
    def missing():
        raise ImportError("No module named 'pynvml'")

    s = sampler(PynvmlBackend(loader=missing), clock)
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py"):
        s.open()


def test_backend_missing_function_is_function_not_found():
    backend = PynvmlBackend(loader=lambda: _stub_pynvml(nvmlInit=lambda e: lambda: None))
    backend.nvmlInit()
    with pytest.raises(NvmlError) as info:
        backend.nvmlDeviceGetTotalEnergyConsumption(object())
    assert info.value.code == 13


def test_backend_converts_structures():
    class Util:
        gpu, memory = 50, 7

    class Pci:
        busId = b"00000000:3B:00.0"

    backend = PynvmlBackend(
        loader=lambda: _stub_pynvml(
            nvmlInit=lambda e: lambda: None,
            nvmlDeviceGetUtilizationRates=lambda e: lambda h: Util(),
            nvmlDeviceGetPciInfo=lambda e: lambda h: Pci(),
            nvmlDeviceGetUUID=lambda e: lambda h: b"GPU-x",
            nvmlDeviceGetPowerUsage=lambda e: _raise(e, NVML_ERROR_NOT_SUPPORTED),
        )
    )
    backend.nvmlInit()
    assert backend.nvmlDeviceGetUtilizationRates(1).gpu == 50
    assert backend.nvmlDeviceGetPciInfo(1) == "00000000:3B:00.0"
    assert backend.nvmlDeviceGetUUID(1) == "GPU-x"
    with pytest.raises(NvmlError) as info:
        backend.nvmlDeviceGetPowerUsage(1)
    assert info.value.code == NVML_ERROR_NOT_SUPPORTED


def test_backend_temperature_falls_back_to_versioned_call():
    backend = PynvmlBackend(
        loader=lambda: _stub_pynvml(
            nvmlInit=lambda e: lambda: None,
            nvmlDeviceGetTemperature=lambda e: _raise(e, 13),
            nvmlDeviceGetTemperatureV=lambda e: lambda h, s: 41,
        )
    )
    backend.nvmlInit()
    assert backend.nvmlDeviceGetTemperature(1, 0) == 41


def _raise(err, code):
    def f(*_):
        raise err(code)

    return f


def test_backend_before_init_is_uninitialized():
    with pytest.raises(NvmlError) as info:
        PynvmlBackend().nvmlDeviceGetCount()
    assert info.value.code == 1


def test_gpu_without_mig_support_has_mig_off(clock):
    nvml = FakeNvml(
        [
            a100(0, errors={"nvmlDeviceGetMigMode": NVML_ERROR_NOT_SUPPORTED}),
            a100(1, errors={"nvmlDeviceGetMigMode": NVML_ERROR_NO_PERMISSION}),
        ]
    )
    with sampler(nvml, clock) as s:
        g0, g1 = s.sample().gpus
    assert g0.mig_enabled is False and g0.unavailable == () and g0.util_pct == 0.0
    assert g1.mig_enabled is None and g1.unavailable == ("mig_mode: Insufficient Permissions",)
