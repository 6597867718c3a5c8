"""Builders for planner tests: small snapshots and policies written out in full."""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

from provisioner.config.loader import policy_from_mapping
from provisioner.config.models import Policy
from provisioner.domain.gpu_share import NodeShares
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, Offer, OfferKey
from provisioner.plan.catalog import Catalog

T0 = 1_800_000_000.0


def offer(
    cloud: str = "aws",
    region: str = "us-east-1",
    itype: str = "p4d.24xlarge",
    gpus: float = 8,
    od: str = "32",
    spot: str | None = "8",
    model: str = "A100",
    risk: int | None = 5,
) -> Offer:
    return Offer(
        cloud=cloud,
        region=region,
        instance_type=itype,
        gpu_model=model,
        gpus_per_node=gpus,
        gpu_mem_gb=40.0,
        vcpus=96,
        mem_gb=1152.0,
        ondemand_usd_hr=Decimal(od),
        spot_usd_hr=Decimal(spot) if spot is not None else None,
        spot_interruption_pct_max=risk,
    )


def catalog(*offers: Offer) -> Catalog:
    return Catalog(offers or (offer(), offer(itype="a2-1g", gpus=1, od="4", spot="1")))


def policy(**over: Any) -> Policy:
    data: dict[str, Any] = {
        "onprem": {"gpu_model": "A100", "gpus_per_node": 4},
        "waiting": {
            "default": {"runtime_factor": 0.5, "per_gpu_s": 600, "cap_s": 86400},
            "partitions": {"inference": {"urgent": True, "spot_allowed": False}},
        },
        "pools": [
            {
                "name": "aws-a100",
                "cloud": "aws",
                "regions": ["us-east-1"],
                "gpu_model": "A100",
                "max_nodes": 10,
                "boot_seconds": 300,
            }
        ],
        "guardrails": {"idle_timeout_s": 600, "require_nvml_idle": False},
    }
    for key, value in over.items():
        data[key] = value
    return policy_from_mapping(data, "test")


def onprem_nodes(n: int = 2, gpus: int = 4, alloc: int = 0) -> tuple[Node, ...]:
    state = NodeState.ALLOCATED if alloc >= gpus else NodeState.IDLE
    return tuple(
        Node(
            name=f"onprem-{i + 1}",
            kind=NodeKind.ONPREM,
            gpus=gpus,
            gpus_alloc=alloc,
            gpu_type="a100",
            state=state,
        )
        for i in range(n)
    )


def burst_node(name: str, pool: str, shares: NodeShares, gpus: int = 0, gpu_type: str = "") -> Node:
    """A running (partly used) burst node of `pool` with parts of GPUs free or held."""
    return Node(
        name,
        NodeKind.BURST,
        gpus,
        gpu_type=gpu_type,
        state=NodeState.MIXED,
        pool=pool,
        features=("cloud",),
        shares=shares,
    )


def running(job_id: str, gpus: int, node: str, ends_in: float, started: float = T0 - 100) -> Job:
    return Job(
        job_id=job_id,
        gpus=gpus,
        submit_ts=started,
        state=JobState.RUNNING,
        start_ts=started,
        nodes=(node,),
        expected_runtime_s=(T0 - started) + ends_in,
    )


def pending(job_id: str, gpus: int, runtime: float | None, submit: float = T0, **kw: Any) -> Job:
    return Job(job_id=job_id, gpus=gpus, submit_ts=submit, expected_runtime_s=runtime, **kw)


def p4d_instance(
    instance_id: str, state: InstanceState, launched_ago: float, node_name: str = ""
) -> CloudInstance:
    """A spot p4d.24xlarge of pool aws-a100, launched `launched_ago` seconds before T0."""
    return CloudInstance(
        instance_id=instance_id,
        pool="aws-a100",
        offer=OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT),
        gpu_model="A100",
        gpus=8,
        price_usd_hr=Decimal("8"),
        state=state,
        launched_ts=T0 - launched_ago,
        node_name=node_name,
    )


def join_program(name: str = "gpu_burst_join") -> ModuleType:
    """The VM's join program (infra/bootstrap/gpu-burst-join.py), loaded as a module."""
    path = Path(__file__).resolve().parents[2] / "infra" / "bootstrap" / "gpu-burst-join.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
