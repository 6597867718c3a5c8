"""Issue 32: a MIG pool's layout travels as data, from the pool to the node's settings in its
bootstrap, and the join program sets it with nvidia-smi before slurmd starts. The nvidia-smi here
is a stand-in script that logs its arguments (no GPU on this machine)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from provisioner.act.specs import NodeImages, spec_for_offer
from provisioner.act.userdata import NodeBootstrap, node_settings
from provisioner.config.loader import policy_from_mapping
from provisioner.domain.errors import ConfigError
from provisioner.domain.offers import CapacityType
from tests.unit.helpers import join_program, offer

REPO = Path(__file__).resolve().parents[2]
POOL = {
    "name": "aws-mig",
    "cloud": "aws",
    "regions": ["us-east-1"],
    "gpu_model": "A100",
    "mig": {"profile": "1g.10gb", "per_gpu": 7},
}


def _settings(pool: dict) -> dict:
    policy = policy_from_mapping({"onprem": {"gpu_model": "A100"}, "pools": [pool]}, "t")
    spec = spec_for_offer(
        policy,
        policy.pools[0],
        offer(),
        CapacityType.ON_DEMAND,
        images=NodeImages({"aws": "ami-1"}),
    )
    return node_settings(spec, NodeBootstrap(controller_host="10.0.0.1"))


def test_a_mig_pools_layout_is_in_the_node_settings_and_a_whole_gpu_pools_is_not() -> None:
    assert _settings(POOL)["mig"] == {"profile": "1g.10gb", "per_gpu": 7, "gpus": 8}
    assert _settings({k: v for k, v in POOL.items() if k != "mig"})["mig"] == {}


@pytest.mark.parametrize(
    ("mig", "why"),
    [
        ({"profile": "3g.40gb", "per_gpu": 3}, "need 9 slices; a GPU has 7"),
        ({"profile": "a100", "per_gpu": 1}, "names no MIG profile"),
    ],
)
def test_a_layout_that_does_not_fit_a_gpu_is_refused(mig: dict, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"pools\[0\]\.mig: .*{why}"):
        _settings({**POOL, "mig": mig})


def test_the_join_program_cuts_every_gpu_before_slurmd(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "calls"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    join_program().apply_mig({"profile": "1g.10gb", "per_gpu": 7, "gpus": 2})
    cgi = ",".join(["1g.10gb"] * 7)
    assert log.read_text().splitlines() == [
        "-mig 1",
        f"mig -i 0 -cgi {cgi} -C",
        f"mig -i 1 -cgi {cgi} -C",
    ]
    join_program().apply_mig({})  # a whole-GPU pool: nvidia-smi is not run
    assert len(log.read_text().splitlines()) == 3


def test_a_mig_pools_nodes_declare_their_devices_to_slurm_not_whole_gpus() -> None:
    from provisioner.register.slurm_conf import BurstNodeSet, render_gres_conf, render_slurm_conf

    s = BurstNodeSet("aws-mig", "aws", "us-east-1", "ondemand", 2, 8, "a100", 96, 1_100_000,
                     mig_type="1g.10gb", mig_per_gpu=7)  # fmt: skip
    conf = render_slurm_conf([s])
    assert "NodeName=aws-mig-[1-2] CPUs=96 RealMemory=1100000 Gres=gpu:1g.10gb:56 " in conf
    assert "gpu:a100" not in conf
    assert render_gres_conf([s]).strip() == "NodeName=aws-mig-[1-2] AutoDetect=nvml"
    # the node settings give nvidia-smi the profile's own name, whatever Slurm calls the type
    named = {**POOL, "mig": {"profile": "nvidia_a100-sxm4-80gb_1g.10gb", "per_gpu": 7}}
    assert _settings(named)["mig"]["profile"] == "1g.10gb"
