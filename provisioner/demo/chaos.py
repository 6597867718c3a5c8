"""A seeded chaos soak: the controller's promises checked from the outside under random faults.

The world: the real controller (reconcile loop, planner, store on a SQLite file, accountant and
HTTP API, built by `bootstrap.build_controller`), moto's server over HTTP as AWS behind the fault
layer (`moto_faults`), the Compute Engine fake (`testing.fake_gce`, driven by the real
google-cloud-compute clients) as GCP, and the demo's FAKE in-memory Slurm cluster
(`demo.fake_slurm`) running jobs taken from the bundled Philly trace at accelerated time. One pool
per cloud; the planner takes whichever offer is cheaper and allowed (AWS, until a fault or the cap
makes it GCP). Time is one world clock moved by hand. The fake cluster keeps it. Each cloud keeps
it skewed by ten minutes, ahead or behind (`cloud_skew`: its launch and termination stamps and
its answers' `Date` headers; a real cloud's clock is off, it does not step). The controller runs
on its own `SteadyClock`, whose monotonic clock is the world's and whose wall clock NTP may step
(`clock_step`).

A seeded schedule injects, between passes and inside them:

* `kill`: the controller dies at a random moment, in the middle of a cloud call (a botocore
  request about to be sent), in the middle of a store transaction (before its commit), or at a
  crash step of the loop; a new controller starts on the same store file;
* `capacity` (no capacity left), `partial_fill` (room for one instance), `throttle` and
  `lost_response` (apply-then-drop: the cloud carries out a resize or terminate, the answer is
  lost), each on one cloud picked at random;
* `slurm_down` (slurmctld unreachable for a few passes: stale snapshots) and `stale` (one);
* `spot_interruption`: the cloud takes a running instance away (either cloud);
* `spot_warning`: the cloud warns first (EC2's two-minute notice, or a GCE preemption whose
  group recreates the VM under the same name 30 s later), and the node's watcher reports it
  (the report posted to the controller's inbox, as the API would, with the notice's time on
  the cloud's clock and the VM's own address);
* `old_store`: the controller dies and its store file is replaced by an older copy of itself;
* `telemetry`: duplicate and clock-skewed NVML pushes to `POST /v1/telemetry`;
* `cloud_skew`: each cloud's clock ten minutes ahead of or behind the world's, for the whole seed
  (counted once per cloud);
* `clock_step`: while instances run, the controller host's wall clock steps an hour forward or
  ten minutes back (a restart after it resumes from the store's clock mark, as on one boot).

After every step, and at the end, the invariants are checked from moto's records, the GCE
fake's record of every VM it created, the fake cluster's job records and the ledger, never from
the product's billing code:

* every job completes exactly once, and none is requeued because the controller took away the
  node it ran on (requeues after an injected spot interruption are the cloud's doing);
* every instance-second either cloud ran is in the ledger, within a cent (price x seconds,
  60 s minimum, by hand, on the cloud's own clock), and no more than one pass beyond it, once the
  instance is gone and billed. The exception, reported as
  `lost_to_rollback` rather than as a violation: a GCE VM created and deleted between an older
  store copy and its swap-in (a deleted VM leaves the Compute API's listing; only the Cloud
  Billing export would still show it);
* the $/h of what the clouds run never exceeds the global cap, and no team's month spend exceeds
  its budget;
* no node group ever holds more instances than scale-up intents asked for (one intent never
  yields two instances);
* no instance outlives the end of the work by more than the idle timeout plus one grace period;
* no dollar is billed for an instance before it was requested (the intent that launched it; for
  a machine its group launched on its own, or an orphan, the pool's first request), or after the
  controller saw it end (its record's last step), and no history runs backwards (promise 5).

Honest limits: the kill is in-process (a `BaseException` raised at the moment: nothing after it
runs, the open transaction is lost as the kernel would lose it, but the process is not an OS
process killed by signal 9; the crash tests in tests/reconcile do that at the loop's steps).
Slurm is the in-memory fake, not slurmctld (tests/chaos/live_soak.py runs the real one, AWS
only). A kill in the middle of a cloud call hits AWS calls only: the GCP clients' HTTP session is
not hooked.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from provisioner import data_files
from provisioner.clock import ManualClock
from provisioner.demo.chaos_faults import (
    CLOUD_FAULTS,
    FIELD_FAULTS,
    GCP_REGION,
    GCP_TYPE,
    ITYPE,
    REGION,
    inject_cloud_fault,
    inject_field_fault,
    inject_gce_fault,
)
from provisioner.demo.chaos_jobs import MIG_TYPE, submit_share_jobs
from provisioner.domain.errors import NotKnown, SnapshotError
from provisioner.domain.jobs import JobState
from provisioner.domain.nodes import NodeKind
from provisioner.domain.snapshot import ClusterSnapshot

FAULT_KINDS = (
    "kill",
    "capacity",
    "partial_fill",
    "throttle",
    "lost_response",
    "slurm_down",
    "stale",
    "spot_interruption",
    "old_store",
    "telemetry",
    "cloud_skew",
    "clock_step",
    *("late_failure", "rebalance", "unreachable_zone", "launch_error", "spot_warning"),
)
# The clouds' field behaviour (FIELD_FAULTS, docs/clouds.md) is drawn from a stream of its
# own, so the other kinds keep the draws they always had.
TICK_S = 60.0
SHARE_JOBS = 3  # per seed
GRACE_S = 180.0
IDLE_TIMEOUT_S = 300.0
POOL = "burst"
GCP_POOL = "burst-gcp"
GCP_PROJECT = "chaos-proj"
# us-east-1 p4d.24xlarge ($21.96/h) and us-central1 a2-highgpu-8g ($29.39/h, spot $15.42) in
# the shipped catalog (policies/catalog/gpu_offers.csv): read there by `catalog_prices` and
# `gcp_price`, so the soak's expected dollars come from the price list, not the ledger. The
# cap lets two or three machines run at once, never the whole fleet (3 AWS + 2 GCP).
GLOBAL_CAP = Decimal("55")
TEAM_BUDGET = Decimal("5000")
EPOCH = datetime(2026, 3, 2, tzinfo=UTC)
CLOUD_SKEW_S = 600.0  # each cloud's clock this far ahead or behind the world's
CLOCK_STEPS_S = (3600.0, -600.0)  # the controller host's wall clock stepped by NTP
BOOT = "soak-host"  # the controller's host never reboots: a restart resumes its clock


class Killed(BaseException):
    """The controller dies here: not an Exception, so nothing in the loop catches it."""


@dataclass
class SoakResult:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    jobs: int = 0
    share_jobs: int = 0  # of MIG devices only, beside `jobs` (issue 32)
    instances: int = 0
    gcp_instances: int = 0  # of `instances`, the ones on GCP
    kills: int = 0
    recover_s: list[float] = field(default_factory=list)
    # VMs that lived and were deleted between an older store copy and its swap-in: deleted
    # GCE VMs leave the Compute API's listing, so nothing the controller can read finds them
    # again (only Cloud Billing's export would). Reported with their dollars, not as violations.
    lost_to_rollback: list[str] = field(default_factory=list)
    lost_to_rollback_usd: Decimal = Decimal(0)
    # GCE VMs deleted between an older store copy and its swap-in whose record that copy
    # held: GCE keeps no end stamp, so the restored controller bills one until it first
    # misses it. Reported with the dollars billed beyond what the cloud ran.
    overbilled_after_rollback: list[str] = field(default_factory=list)
    overbilled_after_rollback_usd: Decimal = Decimal(0)
    steps: int = 0


# --------------------------------------------------------------------------- the world's clock


class _TerminateLog:
    """The soak's own record of when moto terminated each instance, in world time."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.at: dict[str, float] = {}
        self._orig: Any = None

    def install(self) -> None:
        import moto.ec2.models.instances as moto_instances

        inst_mod: Any = moto_instances  # patched for the soak's life, restored by uninstall
        clock, log = self.clock, self.at
        self._orig = orig = inst_mod.Instance.terminate

        def terminate(instance: Any) -> Any:
            if instance._state.name != "terminated":
                log.setdefault(instance.id, clock.now().timestamp())
            return orig(instance)

        inst_mod.Instance.terminate = terminate

    def uninstall(self) -> None:
        import moto.ec2.models.instances as moto_instances

        if self._orig is not None:
            inst_mod: Any = moto_instances
            inst_mod.Instance.terminate = self._orig
            self._orig = None


# --------------------------------------------------------------------------- the soak


class Soak:
    def __init__(self, seed: int, workdir: Path, server: Any, *, steps: int, jobs: int) -> None:
        from provisioner.demo.fake_slurm import BurstPartition, FakeSlurm
        from provisioner.testing.fake_gce import FakeGCE

        self.seed = seed
        self.rng = random.Random(seed)
        # the clock faults draw from their own stream, so the other faults' schedule of a seed
        # is the one it had before they were added
        self.clock_rng = random.Random(f"clocks-{seed}")
        self.field_rng = random.Random(f"field-{seed}")
        self.warning_rng = random.Random(f"warnings-{seed}")  # spot warnings: a stream of their own
        self.dir = workdir / f"seed-{seed}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.server = server
        self.steps = steps
        self.controller_name = f"chaos-{seed}"
        self.url = f"sqlite:///{self.dir / 'store.sqlite'}"
        self.clock = ManualClock(EPOCH)
        self.t0 = self.clock.now().timestamp()
        # each cloud's clock ten minutes off the world's, ahead or behind
        self.skew = {
            c: self.clock_rng.choice([-CLOUD_SKEW_S, CLOUD_SKEW_S]) for c in ("aws", "gcp")
        }
        self.wall_step = 0.0  # how far NTP has stepped the controller host's wall clock
        self.steps_due = self.clock_rng.sample(CLOCK_STEPS_S, len(CLOCK_STEPS_S))
        # GCP for this seed: a fresh Compute Engine fake on its own (skewed) clock
        self.gce = FakeGCE(op_polls_until_done=0, clock=self._cloud_clock("gcp")).start()
        self.fake = FakeSlurm(
            self.clock,
            onprem_nodes=1,
            gpus_per_node=8,
            onprem_mig=(MIG_TYPE, 7),  # and one GPU's 7 slices: jobs asking for parts of GPUs
            burst=[
                BurstPartition(POOL, "cloud", 3, gpus=8, features=("cloud", "aws")),
                BurstPartition(GCP_POOL, "cloud", 2, gpus=8, features=("cloud", "gcp")),
            ],
            boot_s=120.0,
            resume_timeout_s=600.0,
            suspend_timeout_s=30.0,
        )
        self.result = SoakResult(seed)
        self.result.faults["cloud_skew"] += len(self.skew)
        self.slurm_down_until = -1.0
        self.stale_once = False
        self.interrupted: dict[str, float] = {}  # instance id -> when the cloud took it
        self.intent_nodes: dict[str, int] = {}  # intent token -> nodes, across store copies
        self.intent_asked: dict[str, tuple[float, str]] = {}  # token -> (created, pool)
        self.copies: list[tuple[Path, float]] = []  # an older store copy, and when it was taken
        self.swaps: list[tuple[float, float]] = []  # (when a copy was swapped in, its age)
        self.prices = catalog_prices()
        # Odd seeds buy GCP spot ($15.42/h, cheaper than AWS: GCP first, AWS the fallback);
        # even seeds GCP on-demand ($29.39/h: AWS first, GCP when AWS fails or is capped).
        self.gcp_capacity = "spot" if seed % 2 else "on-demand"
        self.gcp_price = gcp_price(self.gcp_capacity)
        self.kill_at: tuple[str, int] | None = None
        self.kill_count = 0
        self.events: list[str] = []  # what happened, for a violation's context
        self.debug = False
        self._requeues_seen = 0
        self._submit_jobs(jobs)
        self.c = self._start()

    # ---------------------------------------------------------------- setup
    def _submit_jobs(self, n: int) -> None:
        """`n` consecutive jobs from the Philly trace, from a seeded offset: sizes as recorded,
        runtimes capped at 40 min and arrivals compressed into the first half of the run."""
        from provisioner.demo.trace_slice import DEFAULT_TRACE
        from provisioner.simulate.trace import load_trace

        trace = [j for j in load_trace(DEFAULT_TRACE) if 1 <= j.gpus <= 8]
        start = self.rng.randrange(0, max(1, len(trace) - n))
        window = trace[start : start + n]
        first = window[0].submit_s
        span = max(1.0, window[-1].submit_s - first)
        for j in window:
            at = self.t0 + (j.submit_s - first) / span * (self.steps * TICK_S / 2)
            self.fake.submit(
                j.gpus,
                max(60.0, min(j.duration_s, 2400.0)),
                submit_ts=at,
                partition="onprem",
                account="acct-v",
                user=f"u{j.gpus}",
                time_limit_s=2400.0,
            )
        self.result.jobs = len(window)
        self.result.share_jobs = submit_share_jobs(
            self.fake, self.seed, self.t0, self.steps * TICK_S / 3, SHARE_JOBS
        )

    def _policy(self) -> Any:
        from provisioner.config.loader import policy_from_mapping

        return policy_from_mapping(
            {
                "controller": self.controller_name,
                "onprem": {"gpu_model": "A100", "gpus_per_node": 8},
                "waiting": {"default": {"runtime_factor": 0.01, "floor_s": 0, "cap_s": 120}},
                "guardrails": {
                    "idle_timeout_s": IDLE_TIMEOUT_S,
                    "require_nvml_idle": False,
                    "backoff_initial_s": 120,
                    "backoff_max_s": 600,
                    "join_timeout_s": 900,
                },
                "node": {
                    "controller_host": "127.0.0.1",
                    "images": {"aws": "ami-12c6146b", "gcp": "projects/debian-cloud/x"},
                    "gcp_project": GCP_PROJECT,
                },
                "pools": [
                    {
                        "name": POOL,
                        "cloud": "aws",
                        "regions": [REGION],
                        "gpu_model": "A100",
                        "instance_types": [ITYPE],
                        "capacity": "on-demand",
                        "max_nodes": 3,
                        "boot_seconds": 120,
                        "partition": "cloud",
                        "team": "vision",
                    },
                    {
                        "name": GCP_POOL,
                        "cloud": "gcp",
                        "regions": [GCP_REGION],
                        "gpu_model": "A100",
                        "instance_types": [GCP_TYPE],
                        "capacity": self.gcp_capacity,
                        "max_nodes": 2,
                        "boot_seconds": 120,
                        "partition": "cloud",
                        "team": "vision",
                    },
                ],
                "budgets": {
                    "global_usd_per_hour": str(GLOBAL_CAP),
                    "teams": {"vision": {"monthly_usd": str(TEAM_BUDGET)}},
                    "team_of_account": {"acct-v": "vision"},
                },
            },
            "chaos soak policy",
        )

    def _tick(self) -> None:
        """The world moves a pass on: a tick and a fraction of a second, as a real clock is never
        on the whole second when a pass starts (the clouds' whole-second Date headers then fall
        at different phases, as they do in the field)."""
        self.clock.advance(TICK_S + self.clock_rng.random())

    def _cloud_clock(self, cloud: str) -> Callable[[], datetime]:
        return lambda: self.clock.now() + timedelta(seconds=self.skew[cloud])

    def _controller_clock(self) -> Any:
        """The controller host's clock: its monotonic clock runs with the world's, its wall
        clock is the world's plus whatever NTP stepped it by."""
        from provisioner.clock import SteadyClock

        return SteadyClock(
            wall=lambda: self.clock.now().timestamp() + self.wall_step,
            monotonic=lambda: self.clock.now().timestamp() - self.t0 + 1000.0,
            boot_id=BOOT,
        )

    def _start(self) -> Any:
        import boto3
        from google.auth.credentials import AnonymousCredentials

        from provisioner.bootstrap import (
            SlurmParts,
            build_clouds,
            build_controller,
            load_settings,
        )
        from provisioner.reconcile.loop import LoopConfig
        from provisioner.store import Store

        pol = self._policy()
        settings = load_settings(
            store_url=self.url,
            slurm_mode="none",
            aws_endpoint_url=self.server.endpoint,
            gce_endpoint=self.gce.endpoint,
            gcp_project=GCP_PROJECT,
            pool_driver="sdk",
            tick_s=TICK_S,
        )
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        # every client made from this session dies here when a `cloud_call` kill is armed
        session.events.register("before-send", lambda **_: self._maybe_die("cloud_call"))
        observer = _FlakySlurm(self)
        return build_controller(
            settings,
            clock=self._controller_clock(),
            store=Store(self.url),
            policy=pol,
            slurm=SlurmParts(
                observer=observer,
                node_control=self.fake,
                job_control=self.fake,
                launcher=self.fake,
            ),
            clouds=build_clouds(
                settings,
                pol,
                aws_session=session,
                gcp_credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            ),
            hook=lambda _step: self._maybe_die("step"),
            config=LoopConfig(
                orphan_grace_s=GRACE_S,
                retry_terminate_s=GRACE_S,
                unbound_timeout_s=600,
                sweep_max_disagreements=5,
            ),
        )

    def _restart(self) -> None:
        t = time.monotonic()
        with contextlib.suppress(Exception):
            self.c.store.close()
        self.c = self._start()
        self.result.recover_s.append(time.monotonic() - t)

    # ---------------------------------------------------------------- faults
    def _fault(self, kind: str) -> None:
        self.result.faults[kind] += 1
        self.events.append(kind)
        srv = self.server
        if kind == "spot_warning":
            where = self._spot_warning()
            self.events.append(f"{kind} on {where}")
        elif kind in CLOUD_FAULTS:
            if self.rng.random() < 0.5:
                inject_cloud_fault(srv, kind, self.rng)
            else:
                inject_gce_fault(self.gce, kind, self.rng)
                self.events.append(f"{kind} on gcp")
        elif kind in FIELD_FAULTS:
            where = inject_field_fault(srv, self.gce, kind, self.field_rng)
            self.events.append(f"{kind} on {where}")
        elif kind == "slurm_down":
            self.slurm_down_until = (
                self.clock.now().timestamp() + self.rng.choice([1, 2, 3]) * TICK_S
            )
        elif kind == "stale":
            self.stale_once = True
        elif kind == "spot_interruption":
            running = [i["InstanceId"] for i in self._moto_instances()
                       if i["State"]["Name"] == "running"]  # fmt: skip
            running += [v.name for v in self._gce_vms() if v.deleted_ts is None]
            if running:
                victim = self.rng.choice(running)
                self.interrupted[victim] = self.clock.now().timestamp()
                if victim in self.gce.vms:
                    self.gce.delete_vm(self.gce.vms[victim].zone, victim)
                else:
                    self._ec2().terminate_instances(InstanceIds=[victim])
        elif kind == "old_store":
            if self.copies:
                self.result.kills += 1
                with contextlib.suppress(Exception):
                    self.c.store.close()
                copy, taken = self.rng.choice(self.copies)
                shutil.copy(copy, self.dir / "store.sqlite")
                self.swaps.append((self.clock.now().timestamp(), taken))
                self._restart()
        elif kind == "telemetry":
            self._telemetry()
        elif kind == "clock_step":
            step = self.steps_due.pop() if self.steps_due else self.clock_rng.choice(CLOCK_STEPS_S)
            self.wall_step += step
            self.events.append(f"controller wall clock stepped {step:+.0f} s")

    def _spot_warning(self) -> str:
        """The cloud warns a running, joined instance it goes; its watcher reports it. The
        cloud it happened on ("none" when no instance has joined)."""
        from provisioner.domain.instances import InstanceState
        from provisioner.domain.spot_warnings import SpotWarning, WarningKind

        joined = sorted(
            (si.instance for si in self.c.store.instances(live_only=True)
             if si.instance.state is InstanceState.READY and si.instance.node_name),
            key=lambda i: i.instance_id,
        )  # fmt: skip
        if not joined:
            return "none"
        inst = self.warning_rng.choice(joined)
        iid = inst.instance_id
        noticed = self.c.reconciler.ctx.now()
        if inst.offer.cloud == "gcp":
            vm = (
                self.gce.instances.get((self.gce.vms[iid].zone, iid))
                if iid in self.gce.vms
                else None
            )
            if vm is None:
                return "none"
            self.gce.preempt(self.gce.vms[iid].zone, iid)
            ip = str(vm["networkInterfaces"][0]["networkIP"])
            warning = SpotWarning(inst.node_name, iid, WarningKind.PREEMPTION, noticed, None, ip)
        else:
            found = [i for i in self._moto_instances() if i["InstanceId"] == iid]
            if not found or found[0]["State"]["Name"] != "running":
                return "none"
            self.server.warn_spot(iid, REGION)
            action = self.server.state.notices.metadata(iid)["instance_action"]["time"]
            when = datetime.fromisoformat(action.replace("Z", "+00:00")).timestamp()
            ip = str(found[0].get("PrivateIpAddress", ""))
            warning = SpotWarning(inst.node_name, iid, WarningKind.INTERRUPTION, noticed, when, ip)
        self.interrupted[iid] = self.clock.now().timestamp()
        self.c.reconciler.deps.spot_inbox.post(warning)
        return str(inst.offer.cloud)

    def _telemetry(self) -> None:
        from fastapi.testclient import TestClient

        from provisioner.api.auth import Role, create_token

        now = self.clock.now().timestamp()
        token = create_token(self.c.store, Role.ADMIN, "chaos-agent", now)
        skew = self.rng.choice([-3 * 3600.0, -120.0, 0.0, 90.0, 6 * 3600.0])
        body = {
            "node": "onprem-1",
            "sampled_ts": now + skew,
            "gpus": [
                {"index": 0, "uuid": "GPU-chaos-0", "util_pct": 50.0, "power_w": 300.0,
                 "energy_mj": 1000.0 * (now - self.t0)}
            ],
        }  # fmt: skip
        with TestClient(self.c.app) as client:
            for _ in range(2):  # the same sample twice
                client.post(
                    "/v1/telemetry", json=body, headers={"Authorization": f"Bearer {token}"}
                )

    def _arm_kill(self) -> None:
        """Arm a death at a random moment of the next pass."""
        where = self.rng.choice(["cloud_call", "transaction", "step"])
        self.kill_at = (where, self.rng.randint(1, 3))
        self.kill_count = 0

    def _maybe_die(self, where: str) -> None:
        if self.kill_at is None or self.kill_at[0] != where:
            return
        self.kill_count += 1
        if self.kill_count >= self.kill_at[1]:
            self.kill_at = None
            raise Killed(where)

    # ---------------------------------------------------------------- one step
    def step(self, i: int) -> None:
        faults = 0
        kill = False
        for kind in FAULT_KINDS:
            if kind == "cloud_skew":
                continue  # set for the whole seed
            if kind == "spot_warning":
                if self.warning_rng.random() < _RATE[kind]:
                    self._fault(kind)
                    faults += 1
                continue
            if kind in FIELD_FAULTS:
                if self.field_rng.random() < _RATE[kind]:
                    self._fault(kind)
                    faults += 1
                continue
            if kind == "clock_step":
                # mid-burst only, from the clock faults' own stream: an hour forward and ten
                # minutes back early in every seed, then more now and then
                rate = 0.25 if self.steps_due else _RATE[kind]
                if self.clock_rng.random() < rate and self._live_instances():
                    self._fault(kind)
                    faults += 1
                continue
            if self.rng.random() < _RATE[kind]:
                if kind == "kill":
                    kill = True
                else:
                    self._fault(kind)
                faults += 1
        if kill:
            self._arm_kill()
        try:
            self.c.reconciler.run_pass()
        except Killed as death:
            self.result.kills += 1
            self.result.faults["kill"] += 1
            self.events.append(f"killed at {death}")
            self._restart()
        self.kill_at = None
        if i % 7 == 3:  # an older copy of the store for `old_store` faults
            dst = self.dir / f"store-{i}.sqlite"
            with contextlib.suppress(Exception):
                backup_sqlite(self.dir / "store.sqlite", dst)
                self.copies.append((dst, self.clock.now().timestamp()))
                self.copies = self.copies[-3:]
        # faults of the cloud last a pass or two, as a capacity shortage does
        if self.rng.random() < 0.5:
            self.server.clear_faults()
            self.gce.clear_faults()
        if self.debug:
            states = sorted(
                (i["InstanceId"][-4:], i["State"]["Name"]) for i in self._moto_instances()
            )
            recs = sorted(
                (
                    si.instance.instance_id[-4:],
                    str(si.instance.state),
                    si.instance.node_name,
                    str(si.instance.price_usd_hr),
                )
                for si in self.c.store.instances()
            )
            print(f"step {i} t+{self.clock.now().timestamp() - self.t0:.0f} "
                  f"events={self.events[-3:]} moto={states} store={recs}")  # fmt: skip
        self._tick()
        self.check(final=False)
        self.result.steps += 1

    # ---------------------------------------------------------------- invariants
    def _ec2(self) -> Any:
        import boto3

        return boto3.client("ec2", endpoint_url=self.server.endpoint, region_name=REGION,
                            aws_access_key_id="t", aws_secret_access_key="t")  # fmt: skip

    def _moto_instances(self) -> list[dict[str, Any]]:
        res = self._ec2().describe_instances(
            Filters=[{"Name": "tag:controller", "Values": [self.controller_name]}]
        )
        return [i for r in res["Reservations"] for i in r["Instances"]]

    def _gce_vms(self) -> list[Any]:
        """Every VM the GCE fake created for this controller, deleted ones included."""
        with self.gce.lock:
            return [
                v for v in (*self.gce.vms.values(), *self.gce.retired)
                if v.labels.get("controller") == self.controller_name
            ]  # fmt: skip

    def _violation(self, text: str) -> None:
        if text not in self.result.violations:
            self.result.violations.append(text)
            if self.debug:
                print(f"VIOLATION {text}; recent: {self.events[-6:]}")

    def check(self, *, final: bool) -> None:
        now = self.clock.now().timestamp()
        insts = self._moto_instances()
        self.result.instances = len(insts)
        running = [i for i in insts if i["State"]["Name"] in ("pending", "running")]
        vms = self._gce_vms()
        self.result.instances += len(vms)
        self.result.gcp_instances = len(vms)
        # budgets: what the clouds run now, and each team's month spend
        burn = sum((self.prices[capacity_of(i)] for i in running), Decimal(0))
        burn += self.gcp_price * sum(1 for v in vms if v.deleted_ts is None)
        self.result.checks += 1
        if burn > GLOBAL_CAP:
            self._violation(f"t+{now - self.t0:.0f}s: cloud runs ${burn}/h > cap ${GLOBAL_CAP}/h")
        spent = sum(
            (e.cost for e in self.c.store.ledger_entries() if e.team == "vision"), Decimal(0)
        )
        self.result.checks += 1
        if spent > TEAM_BUDGET:
            self._violation(f"team vision spent ${spent} > ${TEAM_BUDGET}")
        # one intent never yields two instances: no more launches than intents asked for,
        # beyond a group's replacement of an instance the cloud interrupted (intents are
        # collected after every pass, so ones an old store copy forgot still count)
        for it in self.c.store.intents(kind="scale_up"):
            self.intent_nodes[it.token] = max(self.intent_nodes.get(it.token, 0), it.nodes)
            self.intent_asked.setdefault(it.token, (it.created_ts, it.pool))
        self.result.checks += 1
        asked = sum(self.intent_nodes.values()) + len(self.interrupted)
        if len(insts) + len(vms) > asked:
            launched = len(insts) + len(vms)
            self._violation(f"{launched} instances launched for intents asking {asked}")
            if self.debug:
                print("  intents", self.intent_nodes, "interrupted", self.interrupted)
                for it in self.c.store.intents(kind="scale_up"):
                    print("  intent", it.token[:8], it.status, it.nodes, it.scale_up_payload.target,
                          it.result, it.error_code)  # fmt: skip
        # jobs: completed at most once, never requeued because the controller took the node
        self.result.checks += 1
        for j in self.fake.jobs.values():
            if j.completions > 1:
                self._violation(f"job {j.job_id} completed {j.completions} times")
            if j.share is not None and j.node and self.fake.nodes[j.node].kind is NodeKind.BURST:
                self._violation(f"job {j.job_id} on MIG devices ran on burst node {j.node}")
        # each requeue is judged once, right after the pass that made it, against the
        # bindings of that moment (a node is bound to other instances later)
        by_node_gone = self._nodes_taken_by_cloud()
        fresh = self.fake.requeues[self._requeues_seen :]
        self._requeues_seen = len(self.fake.requeues)
        for jid, node, ts, cause, started in fresh:
            if cause in ("vm_gone", "mark_failed") and started and not by_node_gone(node, ts):
                self._violation(f"job {jid} killed on {node} at t+{ts - self.t0:.0f}s ({cause})")
        if not final:
            return
        self.result.checks += 1
        for j in self.fake.jobs.values():
            if j.state is not JobState.COMPLETED or j.completions != 1:
                self._violation(f"job {j.job_id} ended {j.state} after {j.completions} runs")
        # dollars: every instance-second a cloud ran is in the ledger, within a cent, and no
        # more than one pass beyond it. Times in world time (the soak knows each cloud's skew);
        # durations are the same on the cloud's own clock.
        aws, gcp = self.skew["aws"], self.skew["gcp"]
        log = dict(self.terminations.at)  # world time
        ran_by_cloud = [  # (instance, launched, terminated or None, $/h), world time
            (i["InstanceId"], i["LaunchTime"].timestamp() - aws, log.get(i["InstanceId"]),
             self.prices[capacity_of(i)])
            for i in insts
        ] + [(name, launched - gcp, None if ended is None else ended - gcp, self.gcp_price)
             for name, (launched, ended) in _by_name(vms).items()]  # fmt: skip
        records = {si.instance.instance_id: si for si in self.c.store.instances()}
        for iid, launched, ended, price in ran_by_cloud:
            self.result.checks += 1
            if ended is None:
                self._violation(f"{iid} still running at the end")
                continue
            log[iid] = ended
            expected = price * Decimal(repr(max(60.0, ended - launched))) / 3600
            if iid not in records and iid in self.gce.vms and self._rolled_back_over(ended):
                self.result.lost_to_rollback.append(iid)
                self.result.lost_to_rollback_usd += expected
                continue
            rows = self.c.store.ledger_entries(instance_id=iid)
            billed = sum((e.cost for e in rows), Decimal(0))
            one_pass = price * Decimal(repr(TICK_S)) / 3600
            if billed < expected - Decimal("0.01"):
                self._violation(f"{iid}: the cloud ran ${expected:.4f}, the ledger has ${billed}")
            elif billed > expected + one_pass + Decimal("0.01"):
                if iid in self.gce.vms and self._rolled_back_over(ended):
                    # its end went back in time with the store: the VM was deleted after the
                    # copy was taken, and GCE keeps no end stamp to find it by (see below)
                    self.result.overbilled_after_rollback.append(iid)
                    self.result.overbilled_after_rollback_usd += billed - expected
                    continue
                self._violation(
                    f"{iid}: the cloud ran ${expected:.4f}, the ledger has ${billed}: "
                    "more than a pass beyond"
                )
            self._check_billed_window(iid, records.get(iid), rows, launched)
        # nothing outlives the work by more than the idle timeout and one grace period
        work_done = max((j.end_ts or 0.0) for j in self.fake.jobs.values())
        limit = work_done + IDLE_TIMEOUT_S + GRACE_S + 4 * TICK_S
        for iid, at in log.items():
            self.result.checks += 1
            if at > limit:
                self._violation(
                    f"{iid} lived until t+{at - self.t0:.0f}s, past t+{limit - self.t0:.0f}s"
                )

    def _check_billed_window(
        self, iid: str, si: Any, rows: list[Any], launched_world: float
    ) -> None:
        """Promise 5, from the store's records of what the controller asked for and saw: no
        row before the request, none after the end was seen, no history backwards."""
        self.result.checks += 1
        if si is None or not rows:
            return  # forgotten with an older store copy: its books went with it
        inst = si.instance
        steps = [t.at_ts for t in inst.history]
        if steps != sorted(steps):
            self._violation(f"{iid}: its history runs backwards {steps}")
        first_of_pool = min(
            (t for t, pool in self.intent_asked.values() if pool == inst.pool), default=None
        )
        asked = self.intent_asked.get(si.intent_token, (None, ""))[0]
        if asked is None or launched_world < asked - 1.0:
            # an orphan, or a machine its group launched on its own: the pool's first request
            asked = first_of_pool
        # Clamped by a request the store knows, billing starts no earlier than it, exactly;
        # asked for earlier than the store remembers, it starts at the cloud's stamp, placed
        # on the controller's clock to within the one-second resolution of the clouds' Date
        # headers (and the slew of a stepped clock).
        slack = 1e-6 if asked == self.intent_asked.get(si.intent_token, (None, ""))[0] else 1.0
        start = min(e.start_ts for e in rows)
        if asked is not None and start < asked - slack:
            self._violation(f"{iid}: billed from t+{start - self.t0:.1f}s, before its request "
                            f"at t+{asked - self.t0:.1f}s")  # fmt: skip
        if inst.state.terminal:
            end = max(e.end_ts for e in rows)
            seen = inst.history[-1].at_ts
            if end > seen + 1e-6:
                self._violation(f"{iid}: billed until t+{end - self.t0:.1f}s, after the end was "
                                f"seen at t+{seen - self.t0:.1f}s")  # fmt: skip

    def _live_instances(self) -> bool:
        running = any(i["State"]["Name"] in ("pending", "running") for i in self._moto_instances())
        return running or any(v.deleted_ts is None for v in self._gce_vms())

    def _rolled_back_over(self, ended: float) -> bool:
        """An older store copy, taken before `ended`, was swapped in after it: the record and
        the books of a machine gone by then went back in time with the store."""
        return any(taken < ended <= swapped for swapped, taken in self.swaps)

    def _nodes_taken_by_cloud(self) -> Callable[[str, float], bool]:
        """Whether an injected interruption took the VM under `node` by `ts`: one bound to the
        node was interrupted by then, or (its record lost with an old store copy) any was in
        the few passes before."""
        bound: dict[str, set[str]] = {}
        for si in self.c.store.instances():
            if si.instance.node_name:
                bound.setdefault(si.instance.node_name, set()).add(si.instance.instance_id)

        def taken(node: str, ts: float) -> bool:
            ids = bound.get(node, set())
            if any(self.interrupted.get(iid, float("inf")) <= ts for iid in ids):
                return True
            return not ids and any(ts - 4 * TICK_S <= t <= ts for t in self.interrupted.values())

        return taken

    # ---------------------------------------------------------------- the run
    terminations: _TerminateLog

    def run(self) -> SoakResult:
        from sqlalchemy import event
        from sqlalchemy.orm import Session

        def before_commit(_session: Any) -> None:
            self._maybe_die("transaction")

        self.terminations = _TerminateLog(self.clock)
        self.terminations.install()
        self.server.use_clock(self._cloud_clock("aws"))
        event.listen(Session, "before_commit", before_commit)
        try:
            for i in range(self.steps):
                self.step(i)
            # quiet: no more faults; let the work finish and the fleet drain
            self.server.clear_faults()
            self.gce.clear_faults()
            self.slurm_down_until = -1.0
            for _ in range(200):
                done = all(j.state is JobState.COMPLETED for j in self.fake.jobs.values())
                live = [
                    i
                    for i in self._moto_instances()
                    if i["State"]["Name"] in ("pending", "running")
                ] + [v for v in self._gce_vms() if v.deleted_ts is None]
                if done and not live and not self.c.store.pending_intents():
                    break
                self.c.reconciler.run_pass()
                self._tick()
                self.check(final=False)
            for _ in range(3):  # bill the last terminations
                self.c.reconciler.run_pass()
                self._tick()
            self.check(final=True)
        finally:
            event.remove(Session, "before_commit", before_commit)
            self.terminations.uninstall()
            self.server.use_clock(None)
            self.gce.stop()
            with contextlib.suppress(Exception):
                self.c.store.close()
        return self.result


_RATE = {
    "kill": 0.2,
    "capacity": 0.05,
    "partial_fill": 0.05,
    "throttle": 0.06,
    "lost_response": 0.06,
    "slurm_down": 0.04,
    "stale": 0.05,
    "spot_interruption": 0.05,
    "old_store": 0.03,
    "telemetry": 0.08,
    "clock_step": 0.03,
    "late_failure": 0.05,
    "rebalance": 0.05,
    "unreachable_zone": 0.04,
    "launch_error": 0.04,
    "spot_warning": 0.05,
}


class _FlakySlurm:
    """The fake cluster's observer, unreachable while the soak has slurmctld down."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak

    def observe(self) -> ClusterSnapshot:
        s = self.soak
        if s.clock.now().timestamp() < s.slurm_down_until:
            raise SnapshotError("slurmctld unreachable (chaos: slurm_down)")
        if s.stale_once:
            s.stale_once = False
            raise SnapshotError("squeue timed out (chaos: stale)")
        return s.fake.observe()


def _by_name(vms: list[Any]) -> dict[str, tuple[float, float | None]]:
    """Each GCE VM name's first creation and last deletion (None: one still runs). A group
    that recreates a preempted VM reuses its name, and the one record under that name bills
    from the first machine's start to the last one's end (docs/clouds.md, "Spot warnings")."""
    out: dict[str, tuple[float, float | None]] = {}
    for v in vms:
        first, last = out.get(v.name, (v.created_ts, v.deleted_ts))
        ends = (last, v.deleted_ts)
        out[v.name] = (
            min(first, v.created_ts),
            None if None in ends else max(e for e in ends if e is not None),
        )
    return out


def capacity_of(inst: dict[str, Any]) -> str:
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    return "spot" if tags.get("capacity") == "spot" else "on-demand"


def catalog_prices() -> dict[str, Decimal]:
    """The p4d.24xlarge prices in us-east-1 from the shipped price list (not the product)."""
    row = _catalog_row("aws", REGION, ITYPE)
    return {"on-demand": Decimal(row[8]), "spot": Decimal(row[9])}


def gcp_price(capacity: str) -> Decimal:
    """The a2-highgpu-8g price in us-central1 (on-demand or spot) from the shipped price list."""
    row = _catalog_row("gcp", GCP_REGION, GCP_TYPE)
    return Decimal(row[9] if capacity == "spot" else row[8])


def _catalog_row(cloud: str, region: str, instance_type: str) -> list[str]:
    import csv

    path = data_files.catalog_csv()
    with path.open(newline="") as fh:
        for row in csv.reader(fh):
            if row[:3] == [cloud, region, instance_type]:
                return row
    raise NotKnown(f"{path}: no {instance_type} in {cloud} {region}")


def _boto_clients(capacity: Any) -> Iterator[Any]:
    """The boto3 clients an AWS capacity adapter holds (its EC2 and Auto Scaling clients)."""
    for value in vars(capacity).values():
        if hasattr(value, "meta") and hasattr(value.meta, "events"):
            yield value


def backup_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite file (the online backup API)."""
    import sqlite3

    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def run_seeds(
    seeds: list[int], workdir: Path, *, steps: int = 60, jobs: int = 24
) -> dict[str, Any]:
    """Run the soak for each seed on one moto server; the figures as one JSON-able dict."""
    from provisioner.testing.moto_faults import FaultyMotoServer

    server = FaultyMotoServer().start()
    results: list[SoakResult] = []
    try:
        for seed in seeds:
            server.reset()
            results.append(Soak(seed, workdir, server, steps=steps, jobs=jobs).run())
    finally:
        server.stop()
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
    recover = sorted(x for r in results for x in r.recover_s)
    return {
        "seeds": len(results),
        "faults": sum(faults.values()),
        "faults_by_kind": {k: faults.get(k, 0) for k in FAULT_KINDS},
        "checks": sum(r.checks for r in results),
        "violations": sum(len(r.violations) for r in results),
        "violation_texts": [f"seed {r.seed}: {v}" for r in results for v in r.violations][:20],
        "jobs": sum(r.jobs for r in results),
        "share_jobs": sum(r.share_jobs for r in results),
        "instances": sum(r.instances for r in results),
        "gcp_instances": sum(r.gcp_instances for r in results),
        "kills": sum(r.kills for r in results),
        "lost_to_rollback": sum(len(r.lost_to_rollback) for r in results),
        "lost_to_rollback_usd": str(sum((r.lost_to_rollback_usd for r in results), Decimal(0))),
        "overbilled_after_rollback": sum(len(r.overbilled_after_rollback) for r in results),
        "overbilled_after_rollback_usd": str(
            sum((r.overbilled_after_rollback_usd for r in results), Decimal(0))
        ),
        "recover_s_p50": round(recover[len(recover) // 2], 3) if recover else None,
        "recover_s_max": round(recover[-1], 3) if recover else None,
    }
