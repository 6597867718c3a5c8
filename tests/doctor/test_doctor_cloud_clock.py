"""`provisioner doctor` shows each cloud's clock against this host's, measured from the answers
of its own listing call, and warns past a minute (issue 25)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from provisioner.clock import ManualClock
from provisioner.config.loader import policy_from_mapping
from provisioner.plan.catalog import load_catalog

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _policy():
    return policy_from_mapping(
        {
            "controller": "doc-ctl",
            "node": {"controller_host": "127.0.0.1", "images": {"aws": "ami-12c6146b"}},
            "pools": [
                {
                    "name": "burst",
                    "cloud": "aws",
                    "regions": ["us-east-1"],
                    "gpu_model": "A100",
                    "instance_types": ["p4d.24xlarge"],
                    "max_nodes": 1,
                    "partition": "cloud",
                }
            ],
        },
        "doctor test policy",
    )


@pytest.mark.aws
@pytest.mark.parametrize(("skew_s", "verdict"), [(0.0, "ok"), (-180.0, "warn")])
def test_doctor_measures_the_cloud_clock(tmp_path, skew_s, verdict):
    import boto3

    from provisioner.bootstrap import build_clouds, load_settings
    from provisioner.doctor import run_doctor
    from provisioner.testing.moto_faults import FaultyMotoServer

    server = FaultyMotoServer(clock=lambda: NOW + timedelta(seconds=skew_s)).start()
    try:
        settings = load_settings(
            store_url=f"sqlite:///{tmp_path / 's.sqlite'}",
            slurm_mode="none",
            aws_endpoint_url=server.endpoint,
            pool_driver="sdk",
        )
        pol = _policy()
        session = boto3.session.Session(
            aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
        )
        checks = run_doctor(
            settings,
            pol,
            load_catalog(None),
            clouds=build_clouds(settings, pol, aws_session=session),
            check_port=False,
            clock=ManualClock(NOW),
        )
    finally:
        server.stop()
    (check,) = [c for c in checks if c.name == "cloud aws clock"]
    assert check.verdict == verdict, check.line()
    shown = float(re.search(r"([+-]\d+\.\d) s \(", check.detail).group(1))  # type: ignore[union-attr]
    assert shown == pytest.approx(skew_s, abs=1.1)  # the Date header's one-second resolution
