"""The world the reconcile tests run the controller against: moto's server as AWS (real boto3
over HTTP on 127.0.0.1), the demo's in-memory FAKE Slurm cluster, a ManualClock and a SQLite
file store. A uniquely named module (not conftest) so the crash child process imports it too.

One on-prem node of 8 GPUs is kept busy by a long job; one 8-GPU job waits behind it, so the
planner bursts one node of the pool `burst` (p4d.24xlarge, spot first) for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from provisioner.act.ports import TAG_CONTROLLER
from provisioner.bootstrap import (
    Controller,
    SlurmParts,
    build_clouds,
    build_controller,
    load_settings,
)
from provisioner.clock import ManualClock
from provisioner.config.loader import policy_from_mapping
from provisioner.config.models import Policy
from provisioner.demo.fake_slurm import BurstPartition, FakeSlurm
from provisioner.domain.money import cost_for_seconds
from provisioner.reconcile.loop import Hook, LoopConfig
from provisioner.store import Store

REPO = Path(__file__).resolve().parents[2]
CONTROLLER = "burst-test"
POOL = "burst"
TICK = 60.0
GRACE = 180.0
REGION = "us-east-1"


def policy(**guardrails: Any) -> Policy:
    g = {
        "idle_timeout_s": 300,
        "require_nvml_idle": False,
        "backoff_initial_s": 600,
        "backoff_max_s": 3600,
        "join_timeout_s": 900,
        **guardrails,
    }
    return policy_from_mapping(
        {
            "controller": CONTROLLER,
            "onprem": {"gpu_model": "A100", "gpus_per_node": 8},
            "waiting": {"default": {"runtime_factor": 0.01, "floor_s": 0, "cap_s": 60}},
            "guardrails": g,
            "node": {"controller_host": "127.0.0.1", "images": {"aws": "ami-12c6146b"}},
            "pools": [
                {
                    "name": POOL,
                    "cloud": "aws",
                    "regions": [REGION],
                    "gpu_model": "A100",
                    "instance_types": ["p4d.24xlarge"],
                    "capacity": "any",
                    "max_nodes": 2,
                    "boot_seconds": 120,
                    "partition": "cloud",
                    "team": "vision",
                }
            ],
            "budgets": {"global_usd_per_hour": "100", "team_of_account": {"acct-v": "vision"}},
        },
        "test policy",
    )


def run_env(store_url: str, aws_endpoint: str, **settings: str) -> dict[str, str]:
    """The environment of a `provisioner run` child: the demo policies, no Slurm, the SDK pool
    driver against moto, any port, a short tick; `settings` add PROVISIONER_<NAME> values."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
    env.update(
        {
            "PROVISIONER_STORE_URL": store_url,
            "PROVISIONER_POLICIES": str(REPO / "policies" / "demo"),
            "PROVISIONER_SLURM_MODE": "none",
            "PROVISIONER_POOL_DRIVER": "sdk",
            "PROVISIONER_API_PORT": "0",
            "PROVISIONER_TICK_S": "0.2",
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            **{f"PROVISIONER_{k.upper()}": v for k, v in settings.items()},
        }
    )
    return env


def start_clock() -> ManualClock:
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


def make_fake(clock: ManualClock, t0: float, *, burst_runtime_s: float = 900.0) -> FakeSlurm:
    fake = FakeSlurm(
        clock,
        onprem_nodes=1,
        gpus_per_node=8,
        burst=[BurstPartition(POOL, "cloud", 2, gpus=8, features=("cloud", "aws"))],
        boot_s=120.0,
        resume_timeout_s=600.0,
        suspend_timeout_s=30.0,
    )
    fake.submit(8, 7200.0, submit_ts=t0 - 20, account="acct-v", user="u1", time_limit_s=7200)
    fake.submit(
        8, burst_runtime_s, submit_ts=t0 - 10, account="acct-v", user="u2", time_limit_s=1200
    )
    return fake


def make_controller(
    store_url: str,
    clock: ManualClock,
    fake: FakeSlurm,
    endpoint: str,
    *,
    hook: Hook | None = None,
    pol: Policy | None = None,
) -> Controller:
    import boto3

    pol = pol or policy()
    settings = load_settings(
        store_url=store_url,
        slurm_mode="none",
        aws_endpoint_url=endpoint,
        pool_driver="sdk",
        tick_s=TICK,
    )
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    return build_controller(
        settings,
        clock=clock,
        store=Store(store_url),
        policy=pol,
        slurm=SlurmParts(observer=fake, node_control=fake, job_control=fake, launcher=fake),
        clouds=build_clouds(settings, pol, aws_session=session),
        hook=hook,
        config=LoopConfig(orphan_grace_s=GRACE, retry_terminate_s=GRACE, unbound_timeout_s=600),
    )


def aws_client(service: str, endpoint: str) -> Any:
    """A boto3 client of moto's server, to read the cloud's own records."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def live_instances(endpoint: str) -> list[dict[str, Any]]:
    """Our instances that moto still runs (pending or running)."""
    ec2 = aws_client("ec2", endpoint)
    out: list[dict[str, Any]] = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{TAG_CONTROLLER}", "Values": [CONTROLLER]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    for page in pages:
        for res in page["Reservations"]:
            out.extend(res["Instances"])
    return out


def ever_launched(endpoint: str) -> list[str]:
    """Every instance with our tag moto ever ran, terminated ones included."""
    import boto3

    ec2 = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="t",
        aws_secret_access_key="t",
    )
    res = ec2.describe_instances(Filters=[{"Name": "tag:controller", "Values": [CONTROLLER]}])
    return sorted(i["InstanceId"] for r in res["Reservations"] for i in r["Instances"])


@dataclass
class Books:
    """Ledger check per instance: rows sum to price x billed seconds (60 s minimum)."""

    ledger: Decimal
    expected: Decimal


def books(store: Store) -> Books:
    from provisioner.account.billing import billed_seconds, billing_start

    ledger = Decimal(0)
    expected = Decimal(0)
    for si in store.instances():
        inst = si.instance
        ledger += sum(
            (e.cost for e in store.ledger_entries(instance_id=inst.instance_id)), Decimal(0)
        )
        start = billing_start(inst)
        if start is None:
            continue
        end = si.ended_ts if inst.state.terminal and si.ended_ts is not None else si.billed_until_ts
        if end is None:
            continue
        expected += cost_for_seconds(inst.price_usd_hr, billed_seconds(end - start))
    return Books(ledger, expected)
