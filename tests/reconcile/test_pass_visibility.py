"""Issue 16 items 2 and 7: a pass that raises shows in /v1/status, the metrics and the log;
a stale snapshot, pass errors and blocked bursts reach the operator's terminal at WARNING with
the cause. The controller runs against the demo's in-memory FAKE Slurm (no Slurm needed here;
the real slurmctld case is in tests/slurm) and no cloud."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from provisioner.api.auth import Role, create_token
from provisioner.bootstrap import SlurmParts, build_controller, load_settings
from provisioner.clock import ManualClock
from provisioner.config.loader import policy_from_mapping
from provisioner.demo.fake_slurm import FakeSlurm
from provisioner.domain.errors import SnapshotError
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.pass_log import PassLogger
from provisioner.store import Store

T0 = 1_768_046_400.0  # 2026-01-10T12:00:00Z


class SwitchableObserver:
    """The fake Slurm, or a chosen failure: a SnapshotError (slurmctld down) or a bug."""

    def __init__(self, fake: FakeSlurm) -> None:
        self.fake = fake
        self.fail: BaseException | None = None

    def observe(self) -> ClusterSnapshot:
        if self.fail is not None:
            raise self.fail
        return self.fake.observe()


@pytest.fixture
def world(db_url):
    clock = ManualClock(datetime.fromtimestamp(T0, UTC))
    fake = FakeSlurm(clock, onprem_nodes=1, gpus_per_node=8)
    obs = SwitchableObserver(fake)
    url = db_url
    store = Store(url)
    policy = policy_from_mapping({"controller": "burst-vis"}, "test policy")
    ctl = build_controller(
        load_settings(store_url=url, slurm_mode="none", tick_s=1.0),
        clock=clock,
        store=store,
        policy=policy,
        slurm=SlurmParts(observer=obs),  # type: ignore[arg-type]
        clouds={},
    )
    token = create_token(store, Role.VIEWER, "v", T0)
    client = TestClient(ctl.app, raise_server_exceptions=False)
    yield ctl, obs, client, {"Authorization": f"Bearer {token}"}, clock
    client.close()
    store.close()


def test_a_pass_that_raises_shows_in_status_and_metrics(world):
    ctl, obs, client, h, clock = world
    ctl.reconciler.run_pass()
    st = client.get("/v1/status", headers=h).json()["controller"]
    assert st["last_pass_errors"] == [] and st["failed_passes"] == 0

    obs.fail = OverflowError("int too large to convert")
    clock.advance(15)
    with pytest.raises(OverflowError):
        ctl.reconciler.run_pass()
    st = client.get("/v1/status", headers=h).json()["controller"]
    assert st["failed_passes"] == 1
    assert st["last_pass_errors"] == ["pass failed: OverflowError: int too large to convert"]
    metrics = client.get("/metrics", headers=h).text
    assert "provisioner_reconcile_pass_failures_total 1.0" in metrics
    assert "provisioner_last_pass_errors 1.0" in metrics

    obs.fail = None
    clock.advance(15)
    ctl.reconciler.run_pass()
    st = client.get("/v1/status", headers=h).json()["controller"]
    assert st["last_pass_errors"] == [] and st["failed_passes"] == 1


def test_loop_logs_a_failed_pass_with_its_cause(world, caplog):
    ctl, obs, _client, _h, _clock = world
    obs.fail = OverflowError("int too large to convert")
    with caplog.at_level(logging.INFO, logger="provisioner"):
        assert ctl.loop.run(max_passes=1) == 1
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("OverflowError: int too large to convert" in r.getMessage() for r in lines)


def test_stale_snapshot_is_one_warning_with_the_cause_then_one_recovery_line(world, caplog):
    ctl, obs, _client, _h, clock = world
    rec = ctl.reconciler
    pl = PassLogger(lambda: rec.last_snapshot, lambda: rec.last_plan)
    obs.fail = SnapshotError("slurmctld unreachable: Slurmctld(primary) at ctl-host is DOWN")
    with caplog.at_level(logging.INFO, logger="provisioner.controller"):
        for _ in range(3):
            pl.on_pass(rec.run_pass())
            clock.advance(15)
        obs.fail = None
        pl.on_pass(rec.run_pass())
    msgs = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "provisioner.controller"
    ]
    warnings = [m for lvl, m in msgs if lvl == "WARNING"]
    assert len(warnings) == 1, msgs
    assert "slurmctld unreachable" in warnings[0] and "ctl-host is DOWN" in warnings[0]
    assert ("INFO", "Slurm snapshot fresh again") in msgs


def test_blocked_bursts_errors_and_actions_reach_the_terminal_once(caplog):
    from decimal import Decimal

    from provisioner.domain.plan import Decision, Plan, ReasonCode
    from provisioner.reconcile.context import PassReport

    blocked = Decision(
        "d-1", ReasonCode.BLOCKED_TEAM_BUDGET, ("42",), detail={"why": "team vision at $5000"}
    )
    plan_now = [Plan(T0, (), (blocked,), {})]
    pl = PassLogger(lambda: None, lambda: plan_now[0])
    with caplog.at_level(logging.INFO, logger="provisioner.controller"):
        for _ in range(3):
            pl.on_pass(PassReport(now_ts=T0, errors=["list aws: throttled"], drained=0))
        pl.on_pass(PassReport(now_ts=T0, nodes_requested=2, drained=1, ledger_usd=Decimal(0)))
    msgs = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert msgs.count(("WARNING", "pass error: list aws: throttled")) == 1
    assert (
        msgs.count(
            ("WARNING", "burst blocked for job(s) 42: blocked_team_budget: team vision at $5000")
        )
        == 1
    )
    assert ("INFO", "pass actions: 2 node(s) requested, 1 drained") in msgs
    assert ("INFO", "pass completed without errors again") in msgs
