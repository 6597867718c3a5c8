"""The moto stand-in's spot warnings, as an instance's own metadata (the IMDS stand-in) shows
them: 404 until EC2 warns, then the documented documents, and the instance taken at the
notice's time on the stand-in's clock (provisioner/testing/spot_notices.py; EC2 User Guide,
"Spot Instance interruption notices" and "EC2 instance rebalance recommendations")."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from cloud_helpers import AwsEnv

from provisioner.testing.imds import Imds

pytestmark = pytest.mark.aws

ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"


def test_a_spot_notice_shows_in_metadata_and_the_instance_goes_at_its_time(aws: AwsEnv) -> None:
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    aws.server.use_clock(lambda: now)
    try:
        ec2 = aws.ec2()
        (inst,) = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"]
        iid = inst["InstanceId"]
        imds = Imds(ec2, aws.clients.autoscaling("us-east-1"), iid, endpoint=aws.server.endpoint)
        assert imds.answer(ACTION) is None and imds.answer(REBALANCE) is None  # 404s

        aws.server.recommend_rebalance(iid, "us-east-1")
        assert json.loads(imds.answer(REBALANCE) or "") == {"noticeTime": "2026-12-05T12:00:00Z"}
        assert imds.answer(ACTION) is None  # a recommendation takes nothing away

        now += timedelta(seconds=30)
        aws.server.warn_spot(iid, "us-east-1")
        notice = json.loads(imds.answer(ACTION) or "")
        assert notice == {"action": "terminate", "time": "2026-12-05T12:02:30Z"}

        now += timedelta(seconds=119)
        state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] == "running"  # a second before its time
        now += timedelta(seconds=1)
        state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] in ("shutting-down", "terminated")
    finally:
        aws.server.use_clock(None)
