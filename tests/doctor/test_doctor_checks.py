"""`provisioner doctor`'s checks on their own (issue 16 item 6): verdicts and fixes for a pool
whose partition, nodes or features do not exist, a pool the catalog cannot serve, a cap no
offer fits under, a busy API port and an unreachable store. The live-Slurm run is in
tests/e2e/test_e2e_doctor.py."""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest

from provisioner.config.models import Budgets, Policy, PoolPolicy, TeamBudget
from provisioner.doctor import (
    Check,
    DoctorFailed,
    budget_checks,
    catalog_checks,
    pool_check,
    port_check,
    raise_on_failure,
    store_check,
)
from provisioner.plan.catalog import load_catalog

POOL = PoolPolicy(
    name="cloud-aws",
    cloud="aws",
    regions=["us-east-1"],
    gpu_model="A100",
    instance_types=["p4d.24xlarge"],
    max_nodes=2,
    partition="cloud",
)


def node(name: str, state="IDLE+CLOUD+POWERED_DOWN", parts="cloud", feats="cloud,aws"):
    return {"NodeName": name, "State": state, "Partitions": parts, "AvailableFeatures": feats}


NODES = {n: node(n) for n in ("cloud-aws-1", "cloud-aws-2")} | {
    "gpu-1": node("gpu-1", state="IDLE", parts="onprem", feats="onprem")
}


def test_a_pool_matching_the_live_slurm_is_ok():
    c = pool_check(POOL, {"onprem", "cloud"}, NODES)
    assert c.verdict == "ok" and "2 CLOUD node(s)" in c.detail


def test_a_misspelt_partition_fails_naming_it_and_the_fix():
    c = pool_check(POOL.model_copy(update={"partition": "clod"}), {"onprem", "cloud"}, NODES)
    assert c.verdict == "fail"
    assert "'clod' does not exist" in c.detail and "cloud, onprem" in c.detail
    assert "pools.yaml" in c.fix


@pytest.mark.parametrize(
    ("nodes", "needle"),
    [
        ({"gpu-1": NODES["gpu-1"]}, "no Slurm node is named cloud-aws-<n>"),
        ({"cloud-aws-1": node("cloud-aws-1", state="IDLE")}, "not a CLOUD node"),
        ({"cloud-aws-1": node("cloud-aws-1", parts="onprem")}, "not in partition 'cloud'"),
        ({"cloud-aws-1": node("cloud-aws-1", feats="cloud,gcp")}, "lacks feature 'aws'"),
    ],
)
def test_missing_or_wrong_cloud_nodes_fail(nodes, needle):
    c = pool_check(POOL, {"cloud"}, nodes)
    assert c.verdict == "fail" and needle in c.detail, c


def test_fewer_nodes_than_max_nodes_is_a_warning():
    c = pool_check(POOL.model_copy(update={"max_nodes": 4}), {"cloud"}, NODES)
    assert c.verdict == "warn" and "2 < max_nodes 4" in c.detail


def test_catalog_without_offers_and_a_cap_below_every_offer_fail():
    catalog = load_catalog()
    typo = POOL.model_copy(update={"regions": ["us-east-7"]})
    (c,) = catalog_checks(Policy(pools=[typo]), catalog)
    assert c.verdict == "fail" and "us-east-7" in c.detail
    (ok,) = catalog_checks(Policy(pools=[POOL]), catalog)
    assert ok.verdict == "ok"
    tight = Policy(pools=[POOL], budgets=Budgets(global_usd_per_hour=Decimal("1")))
    (c,) = catalog_checks(tight, catalog)
    assert c.verdict == "fail" and "never burst" in c.detail


def test_budgets_name_teams_without_a_budget():
    pol = Policy(
        pools=[POOL.model_copy(update={"team": "nlp"})],
        budgets=Budgets(teams={"vision": TeamBudget(monthly_usd=Decimal("10"))}),
    )
    (c,) = budget_checks(pol)
    assert c.verdict == "warn" and "'nlp'" in c.detail


def test_idle_burst_nodes_that_no_agent_could_release_are_named():
    from provisioner.config.models import Guardrails, NodeBootstrap
    from provisioner.doctor import idle_release_check

    pol = Policy(pools=[POOL], guardrails=Guardrails(require_nvml_idle=True))
    c = idle_release_check(pol)
    assert c.verdict == "warn" and POOL.name in c.detail and "never be released" in c.detail
    assert "node.agent_wheels" in c.fix
    node = NodeBootstrap(controller_api="http://10.0.0.2:8000", agent_wheels="https://a.example/w/")
    assert idle_release_check(pol.model_copy(update={"node": node})).verdict == "ok"
    off = pol.model_copy(update={"guardrails": Guardrails(require_nvml_idle=False)})
    assert idle_release_check(off).verdict == "ok"


def test_busy_api_port_fails_and_a_free_one_is_ok():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        c = port_check("127.0.0.1", port)
        assert c.verdict == "fail" and str(port) in c.detail
    assert port_check("127.0.0.1", 0).verdict == "ok"


def test_store_unreachable_fails_and_a_fresh_one_is_ok(tmp_path):
    bad = store_check(f"sqlite:///{tmp_path / 'missing-dir' / 'x.sqlite'}")
    assert bad.verdict == "fail"
    good = store_check(f"sqlite:///{tmp_path / 'x.sqlite'}")
    assert good.verdict == "ok" and "migrated" in good.detail


def test_one_failure_stops_with_every_failed_check_listed():
    checks = [Check("a", "ok", "fine"), Check("pool p", "fail", "partition 'clod' ...", "fix")]
    with pytest.raises(DoctorFailed) as exc:
        raise_on_failure(checks)
    assert "pool p" in str(exc.value) and "nothing was started or bought" in str(exc.value)
    raise_on_failure(checks[:1])


def test_doctor_reads_the_claimed_identity_without_writing(tmp_path):
    from provisioner.doctor import stored_controller
    from provisioner.store import Store

    missing = tmp_path / "none" / "store.sqlite"
    assert stored_controller(f"sqlite:///{missing}") == "" and not missing.parent.exists()
    url = f"sqlite:///{tmp_path}/store.sqlite"
    store = Store(url)
    assert stored_controller(url) == ""  # migrated, nothing claimed yet
    store.claim_controller_id("burst-0a1b2c3d")
    store.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert stored_controller(url) == "burst-0a1b2c3d"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
