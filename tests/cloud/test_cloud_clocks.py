"""A cloud's clock measured from its own answers, through the real SDKs: moto's server (AWS) and
the Compute Engine fake, each on a clock ten minutes off the controller's. The skew comes from
the `Date` header of every answer; the launch stamps the adapters list stay on the cloud's clock
(translating them is the loop's job, tests/reconcile/test_reconcile_clocks.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provisioner.act.clock_probe import watch_clouds
from provisioner.act.ports import CloudPorts
from provisioner.domain.cloud_clock import SkewTracker

T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
CONTROLLER = "burst-ctl"


class Clocks:
    """The controller's clock and a cloud's, ten minutes apart."""

    def __init__(self, skew_s: float) -> None:
        self.now = T0
        self.skew = timedelta(seconds=skew_s)

    def controller(self) -> float:
        return self.now.timestamp()

    def cloud(self) -> datetime:
        return self.now + self.skew


@pytest.fixture
def skewed_moto(moto_server: Any) -> Iterator[tuple[Any, Clocks]]:
    moto_server.reset()
    clocks = Clocks(+600.0)
    moto_server.use_clock(clocks.cloud)
    yield moto_server, clocks
    moto_server.use_clock(None)


@pytest.mark.aws
def test_the_skew_of_aws_is_measured_from_its_date_headers(skewed_moto):
    import boto3

    from provisioner.act.aws import AwsCapacity, AwsClients

    server, clocks = skewed_moto
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    # fresh clients: the hooks stay on them
    clients = AwsClients(server.endpoint, session=session)
    capacity = AwsCapacity(["us-east-1"], clients)
    tracker = SkewTracker()
    probes = watch_clouds({"aws": CloudPorts(driver=None, capacity=capacity)}, tracker,  # type: ignore[arg-type]
                          clocks.controller)  # fmt: skip
    clients.ec2("us-east-1").run_instances(
        ImageId="ami-12c6146b",
        InstanceType="p4d.24xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "controller", "Value": CONTROLLER}]}
        ],
    )
    (owned,) = capacity.list_owned(CONTROLLER)
    est = tracker.estimate("aws", probes["aws"].account)
    assert est is not None and est.samples >= 2
    # within the header's one-second resolution (the controller's clock stands still here)
    assert est.skew_s == pytest.approx(600.0, abs=1.1) and est.warning
    # the listing itself stays on the cloud's clock: its launch stamp is ten minutes ahead
    assert owned.launched_ts == pytest.approx(clocks.cloud().timestamp(), abs=1.0)
    assert owned.stamp_error == ""


@pytest.mark.gcp
def test_the_skew_of_gcp_is_measured_from_its_date_headers():
    from google.auth.credentials import AnonymousCredentials

    from provisioner.act.gcp import GcpCapacity, GcpClients
    from provisioner.testing.fake_gce import FakeGCE

    clocks = Clocks(-600.0)
    fake = FakeGCE(op_polls_until_done=0, clock=clocks.cloud).start()
    try:
        clients = GcpClients("skew-proj", fake.endpoint, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        capacity = GcpCapacity(clients)
        tracker = SkewTracker()
        watch_clouds({"gcp": CloudPorts(driver=None, capacity=capacity)}, tracker,  # type: ignore[arg-type]
                     clocks.controller)  # fmt: skip
        from google.cloud import compute_v1

        clients.instances().insert_unary(
            project="skew-proj",
            zone="us-central1-a",
            instance_resource=compute_v1.Instance(
                name="vm-1", machine_type="a2-highgpu-8g", labels={"controller": CONTROLLER}
            ),
        )
        (owned,) = capacity.list_owned(CONTROLLER)
        est = tracker.estimate("gcp", "skew-proj")
        assert est is not None and est.skew_s == pytest.approx(-600.0, abs=1.1)
        assert owned.launched_ts == pytest.approx(clocks.cloud().timestamp(), abs=0.01)
    finally:
        fake.stop()


@pytest.mark.gcp
def test_an_unreadable_gce_timestamp_names_the_instance_and_is_never_zero():
    from google.cloud import compute_v1

    from provisioner.act.gcp import _owned

    inst = compute_v1.Instance(
        name="vm-odd",
        machine_type="zones/us-central1-a/machineTypes/a2-highgpu-8g",
        status="RUNNING",
        creation_timestamp="yesterday-ish",
        labels={"controller": CONTROLLER},
    )
    owned = _owned(inst, "us-central1-a")
    assert owned.launched_ts is None
    assert "vm-odd" in owned.stamp_error and "creation_timestamp" in owned.stamp_error
