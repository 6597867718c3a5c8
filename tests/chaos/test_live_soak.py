"""The chaos soak on real parts with a short, seeded budget: the real `provisioner run` process
against the real local Slurm and moto's server, under kill -9, cloud, Slurm, store and
telemetry faults (tests/chaos/live_soak.py; `bench/chaos.py --live` runs more seeds)."""

from __future__ import annotations

import pytest
from live_soak import FAULT_KINDS, LiveSoak, summarize
from slurm_harness import Cluster

pytestmark = [pytest.mark.chaos, pytest.mark.slurm, pytest.mark.timeout(900)]


def test_live_soak_keeps_every_promise(cluster: Cluster, moto_server, tmp_path):
    moto_server.reset()
    result = LiveSoak(7, cluster, moto_server, tmp_path, jobs=10, fault_window_s=45).run()
    out = summarize([result])
    assert out["violations"] == 0, (out["violation_texts"], result)
    assert {k for k, n in out["faults_by_kind"].items() if n > 0} == set(FAULT_KINDS), out
    assert out["jobs"] == 10 and out["instances"] >= 1, out
