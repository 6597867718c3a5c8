"""Clocks in the loop (promise 5): a cloud ten minutes off, and the controller's own clock
stepped, against moto's server and the fake Slurm cluster. Expected dollars come from moto's own
records (its LaunchTime and the time in StateTransitionReason, on the cloud's clock) and the
catalog's price, never from the product's billing."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from reconcile_world import (
    TICK,
    make_controller,
    make_fake,
    start_clock,
)

from provisioner.clock import SteadyClock
from provisioner.domain.instances import InstanceState

pytestmark = pytest.mark.aws
S = InstanceState
SPOT_P4D = Decimal("7.246")  # p4d.24xlarge spot, us-east-1, policies/catalog/gpu_offers.csv


def _moto_instance(endpoint: str, iid: str) -> dict:
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="t", aws_secret_access_key="t")  # fmt: skip
    return ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]


def _cloud_run_s(inst: dict) -> float:
    """Terminate minus launch, on the cloud's own clock (what it bills)."""
    m = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\)", inst["StateTransitionReason"])
    assert m, inst["StateTransitionReason"]
    ended = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return (ended - inst["LaunchTime"]).total_seconds()


def _burst_to_the_end(c, clock, passes: int = 40) -> None:
    for _ in range(passes):
        r = c.reconciler.run_pass()
        assert not [e for e in r.errors if "dated" in e or "OutOfOrder" in e], r.errors
        clock.advance(TICK)


def _check_books(c, endpoint: str) -> None:
    """Every instance: history in order; billed from no earlier than its request to no later
    than the controller saw it end; billed seconds = the cloud's running time, within a pass."""
    (si,) = c.store.instances()
    inst = si.instance
    assert inst.state is S.TERMINATED
    steps = [t.at_ts for t in inst.history]
    assert steps == sorted(steps)
    (intent,) = c.store.intents(kind="scale_up")
    rows = c.store.ledger_entries(instance_id=inst.instance_id)
    assert rows
    assert min(e.start_ts for e in rows) >= intent.created_ts
    assert max(e.end_ts for e in rows) <= inst.history[-1].at_ts
    ran = max(60.0, _cloud_run_s(_moto_instance(endpoint, inst.instance_id)))
    expected = SPOT_P4D * Decimal(repr(ran)) / 3600
    billed = sum((e.cost for e in rows), Decimal(0))
    one_pass = SPOT_P4D * Decimal(repr(TICK)) / 3600
    assert expected - Decimal("0.01") <= billed <= expected + one_pass


def test_a_cloud_ten_minutes_ahead_is_measured_and_billed_on_its_own_durations(db_url, moto):
    clock = start_clock()
    moto.use_clock(lambda: clock.now() + timedelta(minutes=10))
    fake = make_fake(clock, clock.now().timestamp())
    c = make_controller(db_url, clock, fake, moto.endpoint)
    _burst_to_the_end(c, clock)
    _check_books(c, moto.endpoint)
    (skew,) = c.store.cloud_skews()
    assert skew.cloud == "aws" and skew.skew_s == pytest.approx(600.0, abs=1.0) and skew.warning
    (si,) = c.store.instances()
    alloc = next(t for t in si.instance.history if t.to_state is S.ALLOCATED)
    assert alloc.cloud_ts is not None and alloc.cloud_ts <= alloc.at_ts
    # shown in /metrics
    from provisioner.api.auth import create_token

    token = create_token(c.store, "viewer", "m", clock.now().timestamp())
    with TestClient(c.app) as http:
        text = http.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    line = next(
        ln for ln in text.splitlines() if ln.startswith("provisioner_cloud_clock_skew_seconds{")
    )
    assert 'cloud="aws"' in line and float(line.rsplit(" ", 1)[1]) == pytest.approx(600.0, abs=1.0)
    assert 'provisioner_cloud_clock_skew_warning{account="default",cloud="aws"} 1.0' in text
    # and in /v1/status, beside the last pass's errors and warnings
    (cc,) = c.reconciler.status()["cloud_clocks"]
    assert cc["cloud"] == "aws" and cc["warning"] and cc["skew_s"] == pytest.approx(600, abs=1)


def test_the_controller_clock_stepped_back_never_dates_a_step_before_the_last(db_url, moto):
    """NTP steps the controller's clock back ten minutes mid-burst: the lifecycle holds at
    its last stamp instead of running backwards."""
    clock = start_clock()
    moto.use_clock(clock.now)
    fake = make_fake(clock, clock.now().timestamp())
    c = make_controller(db_url, clock, fake, moto.endpoint)
    for _ in range(3):
        c.reconciler.run_pass()
        clock.advance(TICK)
    held = c.reconciler.run_pass().now_ts
    clock.set(clock.now() - timedelta(minutes=10))
    moto.use_clock(lambda: clock.now() + timedelta(minutes=10))  # the cloud did not step
    assert c.reconciler.run_pass().now_ts == held  # holds at the last stamp
    _burst_to_the_end(c, clock, passes=50)
    (si,) = c.store.instances()
    steps = [t.at_ts for t in si.instance.history]
    assert steps == sorted(steps) and si.instance.state is S.TERMINATED


def test_the_controller_wall_clock_stepped_an_hour_forward_is_not_an_hour_of_anything(db_url, moto):
    """The controller runs on its steady clock: a wall-clock step of an hour neither expires
    the booting node's join timeout nor bills an hour nobody ran."""
    clock = start_clock()  # the world's true time, which the cloud and Slurm keep
    step = [0.0]
    mono0 = clock.now().timestamp()
    steady = SteadyClock(
        wall=lambda: clock.now().timestamp() + step[0],
        monotonic=lambda: clock.now().timestamp() - mono0,
        boot_id="host-a",
    )
    moto.use_clock(clock.now)
    fake = make_fake(clock, clock.now().timestamp())
    c = make_controller(db_url, steady, fake, moto.endpoint)  # type: ignore[arg-type]
    c.reconciler.run_pass()  # the burst is bought
    clock.advance(TICK)
    step[0] = 3600.0  # NTP steps the wall clock an hour forward while the node boots
    _burst_to_the_end(c, clock)
    (si,) = c.store.instances()
    assert [t.to_state for t in si.instance.history][:4] == [S.REQUESTED, S.ALLOCATED,
                                                           S.JOINING, S.READY]  # fmt: skip
    assert not any("did not join" in t.reason for t in si.instance.history)
    _check_books(c, moto.endpoint)


def test_a_launch_stamp_far_in_the_future_is_named_in_the_pass_warnings(db_url, moto):
    """A stand-in whose launch stamps run an hour ahead of its own Date headers (a cloud with
    a broken clock): the instance is billed from when the controller saw it, the pass names
    it in its warnings (and /v1/status), and the loop goes on."""
    import moto.ec2.models.instances as moto_instances

    clock = start_clock()
    moto.use_clock(clock.now)  # Date headers on the test's clock: skew 0
    stamps: Any = moto_instances  # launch stamps an hour ahead (use_clock(None) restores)
    stamps.utcnow = lambda: (clock.now() + timedelta(hours=1)).replace(tzinfo=None)
    fake = make_fake(clock, clock.now().timestamp())
    c = make_controller(db_url, clock, fake, moto.endpoint)
    warned: list[str] = []
    for _ in range(3):
        r = c.reconciler.run_pass()
        assert not r.errors, r.errors
        warned += r.warnings
        clock.advance(TICK)
    (si,) = c.store.instances()
    named = [w for w in warned if si.instance.instance_id in w]
    assert named and "3600 s in the future" in named[0] and "measured skew +0.0 s" in named[0]
    alloc = next(t for t in si.instance.history if t.to_state is S.ALLOCATED)
    assert alloc.cloud_ts is not None and alloc.cloud_ts <= alloc.at_ts  # never in the future
