"""The demo's NVML stand-in: what the NVML agents of the FAKE on-prem nodes would push.

`provisioner demo` has no GPUs, so each pass it makes one telemetry payload per on-prem node of
the in-memory cluster and stores it exactly as `POST /v1/telemetry` does (`upsert_telemetry`,
then `record_payload`), so the GPU, waste and health views have something to show. The numbers
are made up but stable: a GPU runs its job's load, a pure function of the job id, so about one
job in four sits allocated but idle (the waste the console shows) and one GPU runs hot.
"""

from __future__ import annotations

import hashlib

from provisioner.config.models import Policy
from provisioner.demo.fake_slurm import FakeSlurm
from provisioner.domain.nodes import NodeKind
from provisioner.domain.telemetry import GpuReading, GpuTelemetry, JobGpu
from provisioner.observe.telemetry_ingest import UsageStore, record_payload, record_usage

MEM_TOTAL_MIB = 81_920  # A100 80 GB
IDLE_W = 55.0
MAX_W = 400.0


def _load(job_id: str) -> float:
    """A job's GPU utilisation in %, stable for the job: most are busy, one in four idles."""
    h = int(hashlib.sha256(job_id.encode()).hexdigest()[:8], 16)
    return 1.0 if h % 4 == 0 else 62.0 + h % 37


def payloads(slurm: FakeSlurm, now_ts: float) -> list[GpuTelemetry]:
    out = []
    for node in slurm.nodes.values():
        if node.kind is not NodeKind.ONPREM:
            continue
        owners: list[str] = [j for j, n in sorted(node.alloc.items()) for _ in range(n)]
        gpus = []
        jobs = []
        for i in range(node.gpus):
            job = owners[i] if i < len(owners) else ""
            util = _load(job) if job else 0.0
            hot = node.name.endswith("-1") and i == 0 and bool(job) and util > 50
            uuid = f"GPU-demo-{node.name}-{i}"
            gpus.append(
                GpuReading(
                    index=i,
                    uuid=uuid,
                    name="NVIDIA A100-SXM4-80GB",
                    util_pct=util,
                    mem_used_mib=int(MEM_TOTAL_MIB * (0.05 + 0.8 * util / 100)) if job else 0,
                    mem_total_mib=MEM_TOTAL_MIB,
                    power_w=round(IDLE_W + (MAX_W - IDLE_W) * util / 100, 1),
                    temperature_c=88.0 if hot else round(32 + 0.4 * util, 1),
                    jobs=(job,) if job else (),
                )
            )
            if job:
                jobs.append(JobGpu(job_id=job, gpu_index=i, gpu_uuid=uuid))
        out.append(
            GpuTelemetry(
                node=node.name,
                hostname=node.name,
                sampled_ts=now_ts,
                gpus=tuple(gpus),
                jobs=tuple(jobs),
            )
        )
    return out


def push(store: UsageStore, slurm: FakeSlurm, policy: Policy, now_ts: float) -> int:
    """Store this pass's payloads as the API's `POST /v1/telemetry` would; the node count."""
    n = 0
    for p in payloads(slurm, now_ts):
        store.upsert_telemetry(p.node, p.to_gpu_samples(), now_ts)
        record_usage(store, p)
        record_payload(store, p, now_ts, policy)
        n += 1
    return n
