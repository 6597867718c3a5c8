"""The chaos soak on real parts: the real `provisioner run` process against the real local Slurm
(scripts/slurm-up.sh: slurmctld, on-prem slurmds, CLOUD nodes whose slurmd the controller's
local launcher starts as the VM's boot) and moto's server as AWS behind the fault layer, with
jobs from the bundled Philly trace replayed at accelerated time (runtimes and arrivals scaled
down to seconds). Used by tests/chaos/test_live_soak.py and `bench/chaos.py --live`.

A seeded schedule injects, in wall time:

* `kill`: SIGKILL of the controller process at a random moment, or while one of its cloud
  calls is held on the wire (moto carried a resize or terminate out and the answer is still
  in flight, or a read is slow), or while the soak holds the store's write lock (a pass
  blocked inside a transaction); a new process starts on the same store;
* `capacity`, `partial_fill`, `throttle`, `lost_response` (apply-then-drop) at moto;
* `slurm_down`: slurmctld stopped (SIGTERM) and started again by scripts/slurm-up.sh;
* `stale`: slurmctld frozen (SIGSTOP) past the controller's Slurm timeout, then thawed;
* `spot_interruption`: moto terminates a running instance and its "VM" dies with it (the
  node's slurmd, slurmstepd and job processes get SIGKILL), as a reclaimed spot VM does;
* `old_store`: the controller is killed and its SQLite file replaced by an older copy;
* `telemetry`: duplicate and clock-skewed pushes to `POST /v1/telemetry` with a node-bound
  agent token, and one for another node;
* `cloud_skew`: moto's clock (its launch and termination stamps, its answers' `Date` header) ten
  minutes ahead of or behind the host's, for the whole seed. The controller's own clock is not
  stepped here (it is the host's, shared with slurmctld); the in-process soak steps it.

The checks read the world from outside, never the product's billing code: moto's instance
listing (launch times, the terminate times moto's own `terminate` recorded, capacity tags),
Slurm's job completion log (jobcomp/filetxt: every end of every job, with its state and
nodes), the jobs' own marks (each job appends `start` and `done` lines to its file), prices
from the shipped catalog CSV, and the ledger rows the controller wrote. After every fault and
at the end:

* every job has exactly one COMPLETED record and one `done` mark; an attempt that ended any
  other way, or a second start, must be on a node whose VM the soak interrupted;
* every instance-second moto ran is in the ledger within a cent (price x seconds, 60 s
  minimum, by hand, on moto's own clock);
* what moto runs (pending or running) never costs more per hour than the global cap, and the
  team's ledger spend stays within its budget;
* moto never launched more instances than scale-up intents asked for, plus the ones the
  group replaced after an interruption;
* no instance outlives the end of the work by more than the idle timeout, Slurm's suspend
  time, one orphan grace period and a restart's slack.

Limit, said plainly: GCP is not in this soak (the harness's CLOUD nodes are one AWS pool);
the GCE client runs against its fake in the `gcp` tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from provisioner.demo.chaos import (
    FAULT_KINDS as SOAK_FAULT_KINDS,
)
from provisioner.demo.chaos import backup_sqlite, capacity_of, catalog_prices
from provisioner.demo.chaos_faults import CLOUD_FAULTS, FIELD_FAULTS, REGION, inject_cloud_fault

# The controller process runs on the host's clock, which it shares with slurmctld: it is not
# stepped here (the in-process soak steps the controller's wall clock). The clouds' field
# behaviour (late failures, groups acting on their own, unreachable GCP zones, launch errors)
# is soaked in process, where both clouds' stand-ins run; this soak has AWS only.
# Spot warnings need a VM whose watcher reports them: the same-host stand-in has none (the test
# hosts run them end to end, tests/hosts/test_spot_warning_aws.py).
FAULT_KINDS = tuple(
    k for k in SOAK_FAULT_KINDS if k not in ("clock_step", "spot_warning") and k not in FIELD_FAULTS
)

REPO = Path(__file__).resolve().parents[2]
DEMO_POLICIES = REPO / "policies" / "demo" / "slurm"
POOL = "cloud-aws"
TEAM, ACCOUNT = "vision", "acct-v"
TEAM_BUDGET = Decimal("50")
# three spot p4d.24xlarge ($7.246/h each in the shipped catalog) fit under the cap, four do not
GLOBAL_CAP = Decimal("22")
ORPHAN_GRACE_S = 20.0
IDLE_TIMEOUT_S = 5.0  # policies/demo/slurm
SLURM_TIMEOUT_S = 2.0
TICK_S = 0.5
_WEIGHTS = {
    "kill": 4,
    "capacity": 1,
    "partial_fill": 1,
    "throttle": 1,
    "lost_response": 2,
    "slurm_down": 1,
    "stale": 1,
    "spot_interruption": 2,
    "old_store": 1,
    "telemetry": 2,
}


@dataclass
class LiveResult:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    kill_moments: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    jobs: int = 0
    instances: int = 0
    recover_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _TerminateLog:
    """moto's own record of when it terminated each instance (its `terminate`, timed)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._orig: Any = None

    def install(self) -> None:
        import moto.ec2.models.instances as mi

        mod: Any = mi
        self._orig = orig = mod.Instance.terminate
        log = self.at

        def terminate(instance: Any) -> Any:
            if instance._state.name != "terminated":
                log.setdefault(instance.id, time.time())
            return orig(instance)

        mod.Instance.terminate = terminate

    def uninstall(self) -> None:
        import moto.ec2.models.instances as mi

        if self._orig is not None:
            mod: Any = mi
            mod.Instance.terminate = self._orig


class LiveSoak:
    def __init__(
        self,
        seed: int,
        cluster: Any,
        moto: Any,
        workdir: Path,
        *,
        jobs: int = 12,
        fault_window_s: float = 60.0,
        settle_s: float = 480.0,
        fault_gap_s: tuple[float, float] = (1.0, 2.5),
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        # moto's clock ten minutes off the host's, from a stream of its own (the other faults'
        # schedule of a seed stays as it was)
        self.cloud_skew_s = random.Random(f"clocks-{seed}").choice([-600.0, 600.0])
        self.cluster = cluster
        self.moto = moto
        self.dir = workdir / f"live-{seed}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        # under the cluster's folder: 24.11's jobs run in its root, which sees that folder only
        self.marks = Path(cluster.dir) / "jobs" / f"soak-{seed}-{os.getpid()}"
        shutil.rmtree(self.marks, ignore_errors=True)
        self.marks.mkdir(parents=True)
        self.n_jobs = jobs
        self.fault_window_s = fault_window_s
        self.settle_s = settle_s
        self.fault_gap_s = fault_gap_s
        self.controller = f"live-chaos-{seed}"
        self.store_path = self.dir / "store.sqlite"
        self.url = f"sqlite:///{self.store_path}"
        self.port = _free_port()
        self.prices = catalog_prices()
        self.result = LiveResult(seed)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.copies: list[Path] = []
        self.interrupted: dict[str, float] = {}  # instance id -> when the cloud took it
        self.interrupted_nodes: dict[str, list[float]] = {}  # node -> when its VM died
        self.intent_nodes: dict[str, int] = {}
        self.intent_asked: dict[str, float] = {}  # token -> when it was recorded
        self.job_ids: list[str] = []
        self.events: list[str] = []
        self.jobcomp = Path(cluster.env["SLURM_CONF"]).parent.parent / "log" / "jobcomp.txt"
        self._jobcomp_from = self.jobcomp.stat().st_size if self.jobcomp.exists() else 0
        self.term_log = _TerminateLog()
        self.t0 = time.time()

    # ------------------------------------------------------------------ setup
    def _policies(self) -> Path:
        dst = self.dir / "policies"
        shutil.copytree(DEMO_POLICIES, dst)
        burst = yaml.safe_load((dst / "burst.yaml").read_text())
        burst["controller"] = self.controller
        (dst / "burst.yaml").write_text(yaml.safe_dump(burst))
        pools = yaml.safe_load((dst / "pools.yaml").read_text())
        for p in pools["pools"]:
            p["team"] = TEAM
        (dst / "pools.yaml").write_text(yaml.safe_dump(pools))
        budgets = {
            "budgets": {
                "global_usd_per_hour": str(GLOBAL_CAP),
                "teams": {TEAM: {"monthly_usd": str(TEAM_BUDGET)}},
                "team_of_account": {ACCOUNT: TEAM},
            }
        }
        (dst / "budgets.yaml").write_text(yaml.safe_dump(budgets))
        return dst

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
        c = self.cluster.env
        env.update(
            {
                "SLURM_CONF": c["SLURM_CONF"],
                "PROVISIONER_SLURM_BIN_DIR": c.get("PROVISIONER_SLURM_BIN_DIR", ""),
                "PROVISIONER_SLURM_MODE": "cli",
                "PROVISIONER_SLURM_TIMEOUT_S": str(SLURM_TIMEOUT_S),
                "PROVISIONER_STATE_DIR": c["PROVISIONER_STATE_DIR"],
                "PROVISIONER_LAUNCHER": "same-host-stand-in",
                "PROVISIONER_POLICIES": str(self.policies),
                "PROVISIONER_STORE_URL": self.url,
                "PROVISIONER_POOL_DRIVER": "sdk",
                "PROVISIONER_API_PORT": str(self.port),
                "PROVISIONER_TICK_S": str(TICK_S),
                "PROVISIONER_ORPHAN_GRACE_S": str(ORPHAN_GRACE_S),
                "PROVISIONER_HA": "off",
                "AWS_ENDPOINT_URL": self.moto.endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": REGION,
            }
        )
        if not env["PROVISIONER_SLURM_BIN_DIR"]:
            del env["PROVISIONER_SLURM_BIN_DIR"]
        return env

    def _tokens(self) -> None:
        """A viewer token and an agent token bound to onprem-1, made before any store copy is
        taken, so every copy the soak restores holds them."""
        from provisioner.api.auth import create_token
        from provisioner.store import Store

        store = Store(self.url)
        try:
            now = time.time()
            self.viewer = create_token(store, "viewer", "soak", now)
            self.agent = create_token(store, "agent", "soak-agent", now, node="onprem-1")
        finally:
            store.close()

    def _start(self) -> None:
        self._log = (self.dir / "controller.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "provisioner.cli", "run", "--no-preflight"],
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _restart(self, killed_at: float) -> None:
        time.sleep(self.rng.uniform(0.0, 1.0))  # the supervisor's restart delay (wall time)
        self._start()
        self.result.recover_s.append(self._wait_first_pass() - killed_at)

    def _status(self) -> dict[str, Any] | None:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/status",
            headers={"Authorization": f"Bearer {self.viewer}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return dict(json.load(resp))
        except (OSError, ValueError):
            return None

    def _wait_first_pass(self, timeout_s: float = 90.0) -> float:
        """When the new process had a fresh snapshot (its first whole pass); a deadline, since
        a real process has to start."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            st = self._status()
            snap = (st or {}).get("snapshot")
            if snap and not snap.get("stale"):
                return time.time()
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the controller exited {self.proc.returncode}: {self._tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"the controller made no pass within {timeout_s:.0f} s: {self._tail()}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "controller.log").read_text(errors="replace")[-3000:]
        return ""

    # ------------------------------------------------------------------ jobs
    def _trace_window(self) -> list[tuple[float, int, float]]:
        """`n` consecutive Philly jobs from a seeded offset: (arrival s, GPUs, runtime s), with
        arrivals squeezed into the first 40% of the fault window and runtimes into 6-30 s."""
        from provisioner.demo.trace_slice import DEFAULT_TRACE
        from provisioner.simulate.trace import load_trace

        trace = [j for j in load_trace(DEFAULT_TRACE) if 1 <= j.gpus <= 8]
        start = self.rng.randrange(0, max(1, len(trace) - self.n_jobs))
        window = trace[start : start + self.n_jobs]
        first = window[0].submit_s
        span = max(1.0, window[-1].submit_s - first)
        out = []
        for j in window:
            at = (j.submit_s - first) / span * self.fault_window_s * 0.4
            # four times the trace's GPUs (capped at a node): the two 4-GPU on-prem nodes are
            # oversubscribed, and 8-GPU jobs fit only a cloud node, so the controller bursts
            gpus = min(8, 4 * j.gpus)
            out.append((at, gpus, max(6.0, min(30.0, j.duration_s / 200.0))))
        return out

    def _submit(self, gpus: int, runtime_s: float) -> str:
        marks = self.marks
        # the job marks its own start and end: a second start or a missing end is visible
        # whatever Slurm's records say
        script = (
            f'echo "start $SLURMD_NODENAME $(date +%s.%N)" >> {marks}/$SLURM_JOB_ID; '
            f"sleep {runtime_s:.1f}; "
            f'echo "done $SLURMD_NODENAME $(date +%s.%N)" >> {marks}/$SLURM_JOB_ID'
        )
        # a job no on-prem node can hold names the cloud partition too, as users must
        parts = "onprem" if gpus <= 4 else "onprem,cloud"
        jid: str = self.cluster.sbatch(
            "-p", parts, f"--gres=gpu:{gpus}", "-t", "3", "-A", ACCOUNT,
            "-J", f"soak-{self.seed}", wrap=script,
        )  # fmt: skip
        return jid

    # ------------------------------------------------------------------ faults
    def _fault(self, kind: str) -> bool:
        """Inject one fault; False when there was nothing to inject it on (yet)."""
        if kind == "spot_interruption" and not self._interrupt():
            return False
        if kind == "old_store" and not self.copies:
            return False
        self.result.faults[kind] += 1
        self.events.append(f"{time.time() - self.t0:.1f}s {kind}")
        if kind == "kill":
            self._kill_fault()
        elif kind in CLOUD_FAULTS:
            inject_cloud_fault(self.moto, kind, self.rng)
        elif kind == "slurm_down":
            self._slurmctld_down(self.rng.uniform(1.0, 4.0))
        elif kind == "stale":
            self._slurmctld_frozen(SLURM_TIMEOUT_S * 2 + 1)
        elif kind == "old_store":
            self._old_store()
        elif kind == "telemetry":
            self._telemetry()
        return True

    def _kill_fault(self) -> None:
        moment = self.rng.choice(["random", "cloud_call", "transaction"])
        if moment == "cloud_call":
            action, apply = self.rng.choice(
                [("SetDesiredCapacity", True), ("TerminateInstanceInAutoScalingGroup", True),
                 ("DescribeAutoScalingGroups", False), ("DescribeInstances", False)]
            )  # fmt: skip
            fault = self.moto.add_fault(action, "InternalFailure" if apply else "",
                                        service="autoscaling", status=500, apply=apply,
                                        hold_s=5.0)  # fmt: skip
            if not self.moto.state.holding.wait(timeout=4.0):
                fault.times = 0  # never called in time: a kill at a random moment instead
                moment = "random"
            else:
                moment = f"cloud_call:{action}"
        if moment == "transaction":
            with sqlite3.connect(self.store_path, timeout=10) as db:
                db.execute("BEGIN IMMEDIATE")  # the store's write lock: a pass blocks on it
                time.sleep(self.rng.uniform(0.6, 1.5))
                killed_at = time.time()
                self._kill()
                db.rollback()
        else:
            if moment == "random":
                time.sleep(self.rng.uniform(0.0, TICK_S * 2))
            killed_at = time.time()
            self._kill()
        self.result.kill_moments[moment.split(":")[0]] += 1
        self.moto.clear_faults()
        self._restart(killed_at)

    def _slurmctld_pid(self) -> int:
        run = Path(self.cluster.env["SLURM_CONF"]).parent.parent / "run"
        return int((run / "slurmctld.pid").read_text().strip())

    def _slurmctld_down(self, seconds: float) -> None:
        pid = self._slurmctld_pid()
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(seconds)
        env = dict(os.environ)
        env["SLURM_SERIES"] = self.cluster.series
        if self.cluster.series == "24.11":
            env["PORT_BASE"] = os.environ.get("SLURM24_PORT_BASE", "6917")
        subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm-up.sh"), str(self.cluster.dir)],
            env=env, capture_output=True, timeout=120, check=True,
        )  # fmt: skip

    def _slurmctld_frozen(self, seconds: float) -> None:
        pid = self._slurmctld_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    def _interrupt(self) -> bool:
        """The cloud reclaims a running instance bound to a node: moto terminates it, and the
        VM's processes die at once (slurmstepd first, so no step reports an end)."""
        from provisioner.store import Store

        store = Store(self.url)
        try:
            bound = {
                si.instance.instance_id: si.instance.node_name
                for si in store.instances()
                if si.instance.node_name
            }
        finally:
            store.close()
        running = {i["InstanceId"] for i in self._moto() if i["State"]["Name"] == "running"}
        choices = sorted(iid for iid in bound if iid in running)
        if not choices:
            return False  # nothing to reclaim yet
        iid = self.rng.choice(choices)
        node = bound[iid]
        now = time.time()
        self.interrupted[iid] = now
        self.interrupted_nodes.setdefault(node, []).append(now)
        self._ec2().terminate_instances(InstanceIds=[iid])
        jobs = self.cluster.runner.run(["squeue", "-h", "-w", node, "-o", "%i"], timeout_s=10)
        _kill_vm(node, jobs.stdout.split() if jobs.ok else [], self.cluster.launcher)
        return True

    def _old_store(self) -> None:
        self._collect_intents()  # what the copy is about to forget still counts
        killed_at = time.time()
        self._kill()
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{self.store_path}{suffix}").unlink(missing_ok=True)
        shutil.copy(self.rng.choice(self.copies), self.store_path)
        self._restart(killed_at)

    def _telemetry(self) -> None:
        now = time.time()
        skew = self.rng.choice([-3 * 3600.0, -120.0, 0.0, 6 * 3600.0])
        body = {
            "node": "onprem-1",
            "sampled_ts": now + skew,
            "gpus": [{"index": 0, "uuid": "GPU-soak-0", "util_pct": 40.0, "power_w": 250.0,
                      "energy_mj": 1000.0 * (now - self.t0)}],
        }  # fmt: skip
        codes = [self._post_telemetry(body) for _ in range(2)]  # the same sample twice
        codes.append(self._post_telemetry({**body, "node": "onprem-2", "sampled_ts": now}))
        self.result.checks += 1
        if any(c >= 500 for c in codes):
            self._violation(f"telemetry answered {codes}")
        if skew > 3600 and any(200 <= c < 300 for c in codes[:2]):
            self._violation(f"a sample {skew:.0f} s in the future was accepted: {codes}")
        if 200 <= codes[2] < 300:
            self._violation("an agent token pushed another node's telemetry")

    def _post_telemetry(self, body: dict[str, Any]) -> int:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/telemetry",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self.agent}",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0  # the controller is restarting: not an answer

    # ------------------------------------------------------------------ outside views
    def _ec2(self) -> Any:
        import boto3

        return boto3.client("ec2", endpoint_url=self.moto.endpoint, region_name=REGION,
                            aws_access_key_id="t", aws_secret_access_key="t")  # fmt: skip

    def _moto(self) -> list[dict[str, Any]]:
        res = self._ec2().describe_instances(
            Filters=[{"Name": "tag:controller", "Values": [self.controller]}]
        )
        return [i for r in res["Reservations"] for i in r["Instances"]]

    def _job_records(self) -> list[dict[str, str]]:
        """Slurm's completion records of this soak's jobs (jobcomp/filetxt)."""
        ids = set(self.job_ids)
        out = []
        with self.jobcomp.open(errors="replace") as fh:
            fh.seek(self._jobcomp_from)
            for line in fh:
                rec = dict(re.findall(r"(\w+)=(\S*)", line))
                if rec.get("JobId") in ids:
                    out.append(rec)
        return out

    def _marks(self, jid: str) -> list[tuple[str, str, float]]:
        path = self.marks / jid
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((parts[0], parts[1], float(parts[2])))
        return rows

    def _violation(self, text: str) -> None:
        if text not in self.result.violations:
            self.result.violations.append(text)

    def _interrupted_on(self, node: str, start: float, end: float) -> bool:
        return any(start - 2 <= t <= end + 2 for t in self.interrupted_nodes.get(node, ()))

    # ------------------------------------------------------------------ invariants
    def check(self, *, final: bool) -> None:
        insts = self._moto()
        self.result.instances = len(insts)
        live = [i for i in insts if i["State"]["Name"] in ("pending", "running")]
        burn = sum((self.prices[capacity_of(i)] for i in live), Decimal(0))
        self.result.checks += 1
        if burn > GLOBAL_CAP:
            self._violation(f"t+{time.time() - self.t0:.0f}s: moto runs ${burn}/h > ${GLOBAL_CAP}")
        self._check_intents(insts)
        self._check_jobs(final=final)
        if final:
            self._check_money(insts)

    def _collect_intents(self, store: Any = None) -> None:
        """The scale-up intents the store holds now, kept across store copies."""
        from provisioner.store import Store

        own = store is None
        store = Store(self.url) if own else store
        try:
            for it in store.intents(kind="scale_up"):
                self.intent_nodes[it.token] = max(self.intent_nodes.get(it.token, 0), it.nodes)
                self.intent_asked.setdefault(it.token, it.created_ts)
        finally:
            if own:
                store.close()

    def _check_intents(self, insts: list[dict[str, Any]]) -> None:
        from provisioner.store import Store

        store = Store(self.url)  # one opening for the intents and the team's spend
        try:
            self._collect_intents(store)
            spent = sum((e.cost for e in store.ledger_entries() if e.team == TEAM), Decimal(0))
        finally:
            store.close()
        self.result.checks += 2
        asked = sum(self.intent_nodes.values()) + len(self.interrupted)
        if len(insts) > asked:
            self._violation(f"{len(insts)} instances launched for intents asking {asked}")
        if spent > TEAM_BUDGET:
            self._violation(f"team {TEAM} spent ${spent} > ${TEAM_BUDGET}")

    def _check_jobs(self, *, final: bool) -> None:
        records = self._job_records()
        for rec in records:
            self.result.checks += 1
            if rec.get("JobState") == "COMPLETED":
                continue
            start, end = _slurm_ts(rec.get("StartTime")), _slurm_ts(rec.get("EndTime"))
            nodes = _expand(rec.get("NodeList", ""))
            # an attempt whose script never started (a node that never booted, a launch that
            # failed) lost no work: the job's own marks say whether it ran there
            ran = [
                m for m in self._marks(rec["JobId"])
                if m[0] == "start" and m[1] in nodes and start - 2 <= m[2] <= end + 2
            ]  # fmt: skip
            if ran and not any(self._interrupted_on(n, start, end) for n in nodes):
                self._violation(
                    f"job {rec['JobId']} ended {rec.get('JobState')} on {rec.get('NodeList')} "
                    "with no interruption there"
                )
        for jid in self.job_ids:
            marks = self._marks(jid)
            starts = [m for m in marks if m[0] == "start"]
            dones = [m for m in marks if m[0] == "done"]
            self.result.checks += 1
            if len(dones) > 1:
                self._violation(f"job {jid} ran to its end {len(dones)} times")
            # every start but the last that did not reach `done` lost its run: the VM must
            # have been taken under it
            for _, node, at in starts[: len(starts) - 1] if len(starts) > 1 else []:
                if not any(t >= at - 2 for t in self.interrupted_nodes.get(node, ())):
                    self._violation(f"job {jid} restarted after a run on {node} nobody took")
        if not final:
            return
        completed = Counter(r["JobId"] for r in records if r.get("JobState") == "COMPLETED")
        for jid in self.job_ids:
            self.result.checks += 1
            dones = [m for m in self._marks(jid) if m[0] == "done"]
            if completed[jid] != 1 or len(dones) != 1:
                self._violation(
                    f"job {jid}: {completed[jid]} COMPLETED records, {len(dones)} done marks"
                )

    def _check_money(self, insts: list[dict[str, Any]]) -> None:
        from provisioner.store import Store

        store = Store(self.url)
        try:
            for i in insts:
                iid = i["InstanceId"]
                self.result.checks += 1
                ended = self.term_log.at.get(iid)
                if ended is None:
                    self._violation(f"{iid} still running at the end")
                    continue
                # the terminate log is on the host's clock, LaunchTime on moto's
                ran = ended - (i["LaunchTime"].timestamp() - self.cloud_skew_s)
                expected = self.prices[capacity_of(i)] * Decimal(repr(max(60.0, ran))) / 3600
                rows = store.ledger_entries(instance_id=iid)
                billed = sum((e.cost for e in rows), Decimal(0))
                if abs(billed - expected) > Decimal("0.01"):
                    self._violation(
                        f"{iid}: moto ran it {ran:.1f} s = ${expected:.4f}, ledger ${billed}"
                    )
                launched = i["LaunchTime"].timestamp() - self.cloud_skew_s
                self._check_billed_window(iid, store.instance(iid), rows, launched)
        finally:
            store.close()

    def _check_billed_window(self, iid: str, si: Any, rows: list[Any], launched: float) -> None:
        """Promise 5, from the store's records of what the controller asked for and saw: no
        row before the request (the pool's first one for a machine its group launched on its
        own, or an orphan), none after the end was seen, no history backwards."""
        self.result.checks += 1
        if si is None or not rows:
            return  # forgotten with an older store copy: its books went with it
        steps = [t.at_ts for t in si.instance.history]
        if steps != sorted(steps):
            self._violation(f"{iid}: its history runs backwards {steps}")
        asked = self.intent_asked.get(si.intent_token)
        if asked is None or launched < asked - 1.0:
            asked = min(self.intent_asked.values(), default=None)
        start = min(e.start_ts for e in rows)
        if asked is not None and start < asked - 1e-6:
            self._violation(f"{iid}: billed from {start:.1f}, before its request at {asked:.1f}")
        if si.instance.state.terminal:
            end, seen = max(e.end_ts for e in rows), si.instance.history[-1].at_ts
            if end > seen + 1e-6:
                self._violation(f"{iid}: billed until {end:.1f}, after the end seen at {seen:.1f}")

    def _check_lifetimes(self, work_done: float) -> None:
        suspend = float(self.cluster.env.get("SLURM_SUSPEND_TIME", "10"))
        limit = work_done + IDLE_TIMEOUT_S + suspend + ORPHAN_GRACE_S + 30.0
        for iid, at in self.term_log.at.items():
            self.result.checks += 1
            if at > limit:
                self._violation(
                    f"{iid} lived until t+{at - self.t0:.0f}s, past t+{limit - self.t0:.0f}s"
                )

    # ------------------------------------------------------------------ the run
    def run(self) -> LiveResult:
        self.policies = self._policies()
        self.env = self._env()
        self.term_log.install()
        self.moto.use_clock(lambda: datetime.now(UTC) + timedelta(seconds=self.cloud_skew_s))
        self.result.faults["cloud_skew"] += 1
        try:
            self._tokens()
            self._start()
            self._wait_first_pass()
            self._run_faulty()
            self._settle()
        finally:
            self._kill()
            self.moto.clear_faults()
            self.moto.use_clock(None)
            self.term_log.uninstall()
        self.result.wall_s = time.time() - self.t0
        return self.result

    def _run_faulty(self) -> None:
        plan = self._trace_window()
        start = time.time()
        next_fault = start + self.rng.uniform(*self.fault_gap_s)
        next_copy = start + 4.0
        kinds = list(_WEIGHTS)
        weights = [_WEIGHTS[k] for k in kinds]
        # every kind at least once per seed, the rest drawn by weight
        order = [*kinds]
        self.rng.shuffle(order)
        next_intents = start

        def faulty(now: float) -> bool:
            # the window runs on (up to twice as long) until every kind was injected once
            return now - start < self.fault_window_s * (2 if order else 1)

        while faulty(time.time()) or plan:
            now = time.time()
            if now >= next_intents:
                with contextlib.suppress(Exception):  # the store may be mid-replacement
                    self._collect_intents()
                next_intents = now + 0.5
            while plan and plan[0][0] <= now - start:
                _, gpus, runtime = plan.pop(0)
                self.job_ids.append(self._submit(gpus, runtime))
            if now >= next_copy:
                dst = self.dir / f"copy-{len(self.copies)}.sqlite"
                with contextlib.suppress(sqlite3.Error):
                    backup_sqlite(self.store_path, dst)
                    self.copies = [*self.copies, dst][-3:]
                next_copy = now + 8.0
            if now >= next_fault and faulty(now):
                # every kind once per seed first: the first of those not yet injected that
                # has something to act on now (a reclaim needs a running bound instance, an
                # old store a copy); then kinds drawn by weight
                for kind in [*reversed(order), self.rng.choices(kinds, weights)[0]]:
                    if self._fault(kind):
                        if kind in order:
                            order.remove(kind)
                        break
                if self.rng.random() < 0.5:
                    self.moto.clear_faults()  # cloud faults last a pass or a few
                self.check(final=False)
                next_fault = time.time() + self.rng.uniform(*self.fault_gap_s)
            time.sleep(0.05)
        self.result.jobs = len(self.job_ids)

    def _settle(self) -> None:
        """No more faults: the work must finish and the fleet drain, within a deadline."""
        self.moto.clear_faults()
        deadline = time.monotonic() + self.settle_s
        work_done = 0.0
        while time.monotonic() < deadline:
            records = self._job_records()
            done = {r["JobId"] for r in records if r.get("JobState") == "COMPLETED"}
            live = [i for i in self._moto() if i["State"]["Name"] in ("pending", "running")]
            if set(self.job_ids) <= done:
                if not work_done:
                    work_done = max(
                        (m[2] for j in self.job_ids for m in self._marks(j) if m[0] == "done"),
                        default=time.time(),
                    )
                if not live:
                    break
            time.sleep(0.5)
            self.check(final=False)
        time.sleep(TICK_S * 6)  # a few passes to bill the last terminations
        # a clean stop, then the books are read as the controller left them
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        self.check(final=True)
        self._check_lifetimes(work_done or time.time())


def _kill_vm(node: str, job_ids: list[str], launcher: Any) -> None:
    """SIGKILL what runs on `node`'s "VM": its jobs' slurmstepd, the jobs, then its slurmd."""
    steps, procs = [], []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (pid_dir / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for jid in job_ids:
            if cmd.startswith(f"slurmstepd: [{jid}."):
                steps.append(int(pid_dir.name))
            elif f"SLURM_JOB_ID={jid}".encode() in env:
                procs.append(int(pid_dir.name))
    slurmd = launcher._pid(node)
    for pid in [*steps, *procs, *([slurmd] if slurmd else [])]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _slurm_ts(text: str | None) -> float:
    if not text or text in ("Unknown", "None"):
        return time.time()
    return datetime.fromisoformat(text).astimezone().timestamp()


def _expand(nodelist: str) -> list[str]:
    from provisioner.domain.hostlist import expand_hostlist

    return list(expand_hostlist(nodelist)) if nodelist and nodelist != "(null)" else []


def summarize(results: list[LiveResult]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    moments: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
        moments.update(r.kill_moments)
    recover = sorted(x for r in results for x in r.recover_s)
    return {
        "seeds": len(results),
        "faults": sum(faults.values()),
        "faults_by_kind": {k: faults.get(k, 0) for k in FAULT_KINDS},
        "kill_moments": dict(moments),
        "checks": sum(r.checks for r in results),
        "violations": sum(len(r.violations) for r in results),
        "violation_texts": [f"seed {r.seed}: {v}" for r in results for v in r.violations][:20],
        "jobs": sum(r.jobs for r in results),
        "instances": sum(r.instances for r in results),
        "recover_s_p50": round(recover[len(recover) // 2], 2) if recover else None,
        "recover_s_max": round(recover[-1], 2) if recover else None,
        "wall_s": round(sum(r.wall_s for r in results), 1),
    }
