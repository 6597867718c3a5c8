"""The agent's /metrics text, checked line by line against DCGM-exporter names and labels."""

from __future__ import annotations

import pytest
from nvml_cases import MIG_PARENT, T0, UUID0, UUID1, busy_a100, idle_a100, jobs_by_pid, mig_a100

from provisioner.agent.metrics import format_value, render_down, render_metrics
from provisioner.agent.nvml_api import NVML_ERROR_NOT_SUPPORTED
from provisioner.agent.nvml_fake import FakeNvml, a100
from provisioner.agent.sampler import NvmlSampler
from provisioner.domain.telemetry import GpuReading, GpuTelemetry

pytestmark = pytest.mark.nvml

HOST = "gpu-n1.example"
MODEL = "NVIDIA A100-SXM4-80GB"
L0 = (
    f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    f'modelName="{MODEL}",Hostname="{HOST}",hpc_job="1001"'
)
L1 = (
    f'gpu="1",UUID="{UUID1}",pci_bus_id="00000000:08:00.0",device="nvidia1",'
    f'modelName="{MODEL}",Hostname="{HOST}"'
)

# (name, type, help, value on GPU 0 (busy, job 1001), value on GPU 1 (idle))
EXPECTED = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "1410", "1410"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "1593", "1593"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "64", "35"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "312.456", "61"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "123456789",
        "98765432",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "87", "0"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "41", "0"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "40960", "81916"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "40960", "4"),
    ("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).", "81920", "81920"),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_RETIRED_PENDING",
        "counter",
        "Total number of pages pending retirement.",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "0",
        "0",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "0",
        "0",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "0", "0"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending", "0", "0"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "0", "79"),
    ("DCGM_FI_DEV_MIG_MODE", "gauge", "MIG mode (1 enabled).", "0", "0"),
    (
        "provisioner_agent_xid_events_total",
        "counter",
        "Xid events seen since the agent started.",
        "0",
        "1",
    ),
]


def sample(nvml, clock, jobs=None) -> GpuTelemetry:
    with NvmlSampler(
        nvml, clock, node="gpu-n1", hostname=HOST, job_resolver=jobs_by_pid(jobs or {})
    ) as s:
        return s.sample()


def test_two_a100_line_by_line(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    with NvmlSampler(
        nvml, clock, node="gpu-n1", hostname=HOST, job_resolver=jobs_by_pid({4242: "1001"})
    ) as s:
        nvml.inject_xid(UUID1, 79)
        text = render_metrics(s.sample())
    expected: list[str] = []
    for name, typ, help_text, v0, v1 in EXPECTED:
        expected += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {typ}",
            f"{name}{{{L0}}} {v0}",
            f"{name}{{{L1}}} {v1}",
        ]
    expected += [
        "# HELP provisioner_agent_nvml_up 1 when the last NVML sample succeeded.",
        "# TYPE provisioner_agent_nvml_up gauge",
        f'provisioner_agent_nvml_up{{Hostname="{HOST}"}} 1',
        "# HELP provisioner_agent_last_sample_timestamp_seconds Unix time of the last NVML sample.",
        "# TYPE provisioner_agent_last_sample_timestamp_seconds gauge",
        f'provisioner_agent_last_sample_timestamp_seconds{{Hostname="{HOST}"}} '
        f"{int(T0.timestamp())}",
    ]
    lines = text.splitlines()
    for i, (got, want) in enumerate(zip(lines, expected, strict=False)):
        assert got == want, f"line {i + 1}"
    assert len(lines) == len(expected)
    assert text.endswith("\n")


def test_not_supported_power_drops_only_that_series(clock):
    nvml = FakeNvml(
        [a100(0, errors={"nvmlDeviceGetPowerUsage": NVML_ERROR_NOT_SUPPORTED}), idle_a100()]
    )
    with NvmlSampler(nvml, clock, node="gpu-n1", hostname=HOST) as s:
        lines = render_metrics(s.sample()).splitlines()
    power = [ln for ln in lines if ln.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    assert power == [f"DCGM_FI_DEV_POWER_USAGE{{{L1}}} 61"]
    assert any(ln.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="0"') for ln in lines)


def test_family_with_no_series_is_left_out(clock):
    errors = {"nvmlDeviceGetRetiredPages": NVML_ERROR_NOT_SUPPORTED}
    nvml = FakeNvml([a100(0, errors=errors), a100(1, errors=errors)])
    with NvmlSampler(nvml, clock, node="gpu-n1", hostname=HOST) as s:
        text = render_metrics(s.sample())
    assert "DCGM_FI_DEV_RETIRED_SBE" not in text
    assert "DCGM_FI_DEV_RETIRED_DBE" not in text
    assert "# TYPE DCGM_FI_DEV_RETIRED_PENDING counter" in text


def test_lost_gpu_has_only_the_lost_series(clock):
    nvml = FakeNvml([busy_a100(), idle_a100()])
    with NvmlSampler(nvml, clock, node="gpu-n1", hostname=HOST) as s:
        nvml.gpus[1].lost = True
        lines = render_metrics(s.sample()).splitlines()
    gpu1 = [ln for ln in lines if 'gpu="1"' in ln]
    assert gpu1 == [
        'provisioner_agent_gpu_lost{gpu="1",UUID="",pci_bus_id="",device="",modelName="",'
        f'Hostname="{HOST}"}} 1'
    ]
    assert sum(1 for ln in lines if 'gpu="0"' in ln) == len(EXPECTED)


def test_mig_instance_series(clock):
    nvml = FakeNvml([mig_a100()])
    with NvmlSampler(
        nvml, clock, node="gpu-n1", hostname=HOST, job_resolver=jobs_by_pid({5151: "2002"})
    ) as s:
        lines = render_metrics(s.sample()).splitlines()
    base = (
        f'gpu="0",UUID="{MIG_PARENT}",pci_bus_id="00000000:09:00.0",device="nvidia2",'
        f'modelName="{MODEL}",Hostname="{HOST}"'
    )
    fb_used = [ln for ln in lines if ln.startswith("DCGM_FI_DEV_FB_USED{")]
    assert fb_used == [
        f"DCGM_FI_DEV_FB_USED{{{base}}} 10240",
        f'DCGM_FI_DEV_FB_USED{{{base},GPU_I_PROFILE="3g.40gb",GPU_I_ID="9",hpc_job="2002"}} 10000',
        f'DCGM_FI_DEV_FB_USED{{{base},GPU_I_PROFILE="1g.10gb",GPU_I_ID="13"}} 0',
    ]
    assert f"DCGM_FI_DEV_MIG_MODE{{{base}}} 1" in lines
    # A MIG-enabled GPU has no whole-device utilisation: the series is absent, not zero.
    assert not any(ln.startswith("DCGM_FI_DEV_GPU_UTIL") for ln in lines)
    # Parent series carry no job: the job is on its instance.
    assert f"DCGM_FI_DEV_GPU_TEMP{{{base}}} 35" in lines


def test_two_jobs_on_one_gpu_two_series(clock):
    from provisioner.agent.nvml_api import ProcessInfo

    nvml = FakeNvml([a100(0, processes=[ProcessInfo(pid=1), ProcessInfo(pid=2)])])
    t = sample(nvml, clock, jobs={1: "11", 2: "22"})
    util = [ln for ln in render_metrics(t).splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert [ln.split("hpc_job=")[1] for ln in util] == ['"11"} 0', '"22"} 0']


def test_label_values_are_escaped():
    t = GpuTelemetry(
        node="n",
        hostname='we"ird\\host\nx',
        sampled_ts=0,
        gpus=(GpuReading(index=0, uuid="GPU-1", util_pct=1.5),),
    )
    line = next(ln for ln in render_metrics(t).splitlines() if ln.startswith("DCGM_FI_DEV_GPU"))
    assert line.endswith('Hostname="we\\"ird\\\\host\\nx"} 1.5')


def test_render_down():
    assert render_down("h1").splitlines() == [
        "# HELP provisioner_agent_nvml_up 1 when the last NVML sample succeeded.",
        "# TYPE provisioner_agent_nvml_up gauge",
        'provisioner_agent_nvml_up{Hostname="h1"} 0',
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "1"), (False, "0"), (7, "7"), (7.0, "7"), (0.25, "0.25"), (float("nan"), "NaN")],
)
def test_format_value(value, text):
    assert format_value(value) == text
