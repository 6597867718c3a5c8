"""`provisioner demo`: the controller end to end on a machine with no cloud account and no Slurm.

What is real: the planner, the reconcile loop, the actuator (boto3 against moto's EC2 and Auto
Scaling server on 127.0.0.1, started in this process), the SQLite store, the accountant and the
HTTP API. What is FAKE: the on-prem cluster, an in-memory Slurm stand-in
(`provisioner.demo.fake_slurm.FakeSlurm`) replaying a slice of the bundled Philly trace at
accelerated time, which also plays the burst nodes' boot. The controller's clock runs `speed`
times faster than the wall clock and is set once per pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from provisioner import data_files
from provisioner.clock import ManualClock
from provisioner.config.models import Policy
from provisioner.demo.fake_slurm import FakeSlurm
from provisioner.reconcile.loop import PassReport
from provisioner.store import Store
from provisioner.store.engine import private_folder

log = logging.getLogger("provisioner.demo")
DEMO_POLICIES = data_files.demo_policies_dir()


@dataclass(frozen=True, slots=True)
class DemoOptions:
    port: int = 8000
    host: str = "127.0.0.1"
    speed: float = 120.0
    duration_s: float | None = None
    tick_s: float = 0.5
    onprem_nodes: int = 4
    start_hour: float = 12.0
    hours: float = 48.0
    data_dir: Path = Path(".demo")
    policies: Path = DEMO_POLICIES
    summary_every_s: float = 2.0


def _cloud_usd(money: dict[str, Decimal]) -> Decimal:
    from provisioner.account.budgets import CLOUD_KINDS

    return sum((money.get(k, Decimal(0)) for k in CLOUD_KINDS), Decimal(0))


def _hm(seconds: float) -> str:
    m = int(seconds // 60)
    return f"{m // 60}h{m % 60:02d}m"


def _money(store: Store, now: float) -> dict[str, Decimal]:
    """Ledger totals by kind (job, idle, onprem, energy) so far."""
    from provisioner.account.reports import cost_report

    return {r.key[0]: r.cost for r in cost_report(store, ("kind",), 0.0, now + 1.0).rows}


@dataclass(frozen=True, slots=True)
class DemoWorld:
    """What a benchmark may read once the demo stops, before its cloud goes away: the fake
    cluster (its job log), moto's endpoint (the cloud's own records) and the demo's clock."""

    fake: FakeSlurm
    aws_endpoint: str
    store_path: Path
    start_ts: float
    now_ts: float


def run_demo(
    opts: DemoOptions,
    echo: Callable[[str], None] = print,
    inspect: Callable[[DemoWorld], None] | None = None,
) -> dict[str, object]:
    """Run the demo until `duration_s` (wall) or SIGINT/SIGTERM; returns the final figures.
    `inspect` sees the world once the controller has stopped."""
    import boto3

    from provisioner.api.auth import create_token
    from provisioner.bootstrap import SlurmParts, build_clouds, build_controller, load_settings
    from provisioner.bootstrap import serve as serve_controller
    from provisioner.config import load_policy
    from provisioner.demo.fake_nvml import push as push_nvml
    from provisioner.demo.fake_slurm import BurstPartition
    from provisioner.demo.trace_slice import demo_jobs
    from provisioner.iac.review import record_pool_creation_review
    from provisioner.reconcile.loop import LoopConfig
    from provisioner.testing.moto_faults import FaultyMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    policy: Policy = load_policy(opts.policies)
    data = opts.data_dir
    private_folder(data)
    db = data / "provisioner.sqlite"
    for stale in data.glob("provisioner.sqlite*"):
        stale.unlink()
    wall0 = time.monotonic()
    start = datetime.now(UTC).replace(microsecond=0)
    clock = ManualClock(start)
    t0 = start.timestamp()

    def latch() -> None:
        clock.set(datetime.fromtimestamp(t0 + (time.monotonic() - wall0) * opts.speed, UTC))

    fake = FakeSlurm(
        clock,
        onprem_nodes=opts.onprem_nodes,
        gpus_per_node=policy.onprem.gpus_per_node,
        burst=[
            BurstPartition(
                p.name,
                p.partition,
                p.max_nodes,
                gpus=8,
                features=("cloud", p.cloud, p.regions[0], p.capacity),
            )
            for p in policy.pools
        ],
        boot_s=min((p.boot_seconds for p in policy.pools), default=120.0),
    )
    jobs = demo_jobs(start_s=opts.start_hour * 3600.0, hours=opts.hours)
    for j in jobs:
        fake.submit(
            j.gpus,
            j.duration_s,
            submit_ts=t0 + j.offset_s,
            account=j.account,
            user=j.user,
            time_limit_s=j.time_limit_s,
            name=j.trace_id,
        )

    # The stand-in cloud keeps the demo's clock: its launch stamps and answers' Date headers
    # are in demo time, as a real cloud's are (near enough) in real time.
    moto = FaultyMotoServer(opts.host, 0, clock=clock.now).start()
    try:
        settings = load_settings(
            store_url=f"sqlite:///{db}",
            policies=opts.policies,
            slurm_mode="none",
            aws_endpoint_url=moto.endpoint,
            pool_driver="sdk",
            api_host=opts.host,
            api_port=opts.port,
            tick_s=opts.tick_s,
        )
        session = boto3.session.Session(
            aws_access_key_id="demo", aws_secret_access_key="demo", region_name="us-east-1"
        )
        clouds = build_clouds(settings, policy, aws_session=session)
        store = Store(settings.store_url)
        last_line = [0.0]
        grace = max(settings.orphan_grace_s, 3 * opts.tick_s * opts.speed)

        reviewed: set[str] = set()

        def on_pass(report: PassReport) -> None:
            rec = controller.reconciler
            plan = rec.last_plan
            # The fake nodes' NVML agents "push" their samples (see demo/fake_nvml.py).
            push_nvml(store, fake, policy, report.now_ts)
            if plan is not None:
                for su in plan.scale_ups:
                    d = su.decision
                    if su.pool not in reviewed:
                        # The first burst into a pool stores the pool's IaC review with its
                        # decision, as a controller creating the pool's stack would.
                        reviewed.add(su.pool)
                        try:
                            record_pool_creation_review(store, d.decision_id, policy, su.pool)
                        except Exception as exc:  # a review must never stop the demo
                            log.warning("IaC review of pool %s failed: %s", su.pool, exc)
                    wait = d.predicted_wait_s or 0.0
                    budget = d.wait_budget_s or 0.0
                    echo(
                        f"  + burst {su.nodes} x {su.offer} (${su.usd_per_hour_per_node}/h) for "
                        f"{len(su.job_ids)} job(s): on-prem start in "
                        f"{'more than ' if d.wait_is_lower_bound else ''}{_hm(wait)}, past its "
                        f"waiting budget of {_hm(budget)} since submit  [{d.decision_id}]"
                    )
                for dr in plan.drains:
                    echo(f"  - drain {dr.node} ({dr.instance_id}): idle")
            if report.terminated:
                echo(f"  - terminated {report.terminated} instance(s)")
            if time.monotonic() - last_line[0] >= opts.summary_every_s:
                last_line[0] = time.monotonic()
                echo(summary_line(report.now_ts))

        def summary_line(now: float) -> str:
            s = fake.summary()
            counts = store.instance_counts()
            up = counts.get("ready", 0) + counts.get("draining", 0)
            booting = sum(counts.get(k, 0) for k in ("requested", "allocated", "joining"))
            decisions = store.decision_counts()
            bursts = decisions.get("burst_wait_exceeds_budget", 0) + decisions.get(
                "burst_urgent", 0
            )
            money = _money(store, now)
            cloud = _cloud_usd(money)
            onprem = money.get("onprem", Decimal(0))
            when = datetime.fromtimestamp(now, UTC).strftime("%H:%M")
            return (
                f"[sim {when}Z +{_hm(now - t0)}] jobs {s['pending']} pending, {s['running']} "
                f"running ({s['running_burst']} in the cloud), {s['completed']} done | on-prem "
                f"{s['onprem_busy']}/{s['onprem_gpus']} GPUs | cloud nodes {up} up, {booting} "
                f"booting | bursts {bursts} | decisions {sum(decisions.values())} | cloud "
                f"${cloud:.2f} | on-prem ${onprem:.2f}"
            )

        controller = build_controller(
            settings,
            clock=clock,
            store=store,
            policy=policy,
            slurm=SlurmParts(observer=fake, node_control=fake, job_control=fake, launcher=fake),
            clouds=clouds,
            config=LoopConfig(orphan_grace_s=grace, retry_terminate_s=grace),
            on_pass=on_pass,
            before_pass=latch,
        )
        controller.extra_status["demo"] = {
            "fake_cluster": True,
            "speed": opts.speed,
            "trace": "philly_2017-10-02_4w",
            "start_hour": opts.start_hour,
        }
        now = clock.now().timestamp()
        viewer = create_token(store, "viewer", "demo-viewer", now)
        operator = create_token(store, "operator", "demo-operator", now)

        def banner(url: str) -> None:
            echo(
                f"provisioner demo: a FAKE on-prem cluster ({opts.onprem_nodes} nodes x "
                f"{policy.onprem.gpus_per_node} A100, in memory) replays {len(jobs)} jobs of the "
                f"Philly trace from hour {opts.start_hour:g} at {opts.speed:g}x; AWS is moto's "
                f"server at {moto.endpoint} (in this process). Planner, loop, actuator, store, "
                "accountant and API are the real ones."
            )
            echo(f"  console   {url}/   (open it in a browser; sign in with a token below)")
            echo(f"  API       {url}   (docs: {url}/docs, OpenAPI: {url}/openapi.json)")
            echo(f"  viewer    {viewer}")
            echo(f"  operator  {operator}   (POST /v1/operator/pause, /v1/plan)")
            echo(
                f'  try       curl -s -H "Authorization: Bearer {viewer}" '
                f"'{url}/v1/costs?group_by=team,kind'"
            )
            echo(f"  also      {url}/v1/decisions  {url}/v1/instances  {url}/metrics")
            echo(f"  store     {db}")
            echo(
                f"  tokens    more while it runs: {_command_name()} token create "
                "--role viewer --name me --demo"
            )
            stop = f"stops after {opts.duration_s:g} s" if opts.duration_s else "Ctrl-C to stop"
            echo(f"  {stop}.")

        try:
            passes = serve_controller(controller, on_started=banner, duration_s=opts.duration_s)
        except KeyboardInterrupt:
            passes = controller.reconciler.passes
        now = clock.now().timestamp()
        echo(summary_line(now))
        money = _money(store, now)
        decisions = store.decision_counts()
        instances = store.instances()
        result: dict[str, object] = {
            "passes": passes,
            "wall_s": round(time.monotonic() - wall0, 1),
            "simulated_s": round(now - t0),
            "now": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
            "bursts": decisions.get("burst_wait_exceeds_budget", 0)
            + decisions.get("burst_urgent", 0),
            "decisions": sum(decisions.values()),
            "instances": len(instances),
            "terminated": sum(1 for si in instances if si.instance.state.terminal),
            "cloud_usd": str(_cloud_usd(money)),
            "onprem_usd": str(money.get("onprem", Decimal(0))),
            "ledger_usd": str(sum(money.values(), Decimal(0))),
            "store": str(db),
        }
        echo(
            f"demo finished: {passes} passes in {result['wall_s']} s ({_hm(now - t0)} "
            f"simulated), {result['bursts']} bursts, {result['instances']} instances launched, "
            f"{result['terminated']} ended; cloud ${result['cloud_usd']}, on-prem "
            f"${result['onprem_usd']}. The store stays at {db}."
        )
        echo(json.dumps(result, sort_keys=True))
        store.close()
        if inspect is not None:
            inspect(DemoWorld(fake, moto.endpoint, db, t0, now))
        return result
    finally:
        moto.stop()


def _command_name() -> str:
    """How to run `provisioner` from here: the script beside this Python (.venv/bin/provisioner in
    a checkout, as the README gives it; the venv an installed wheel went into), else the name."""
    script = Path(sys.executable).parent / "provisioner"
    if not script.exists():
        return "provisioner"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)
