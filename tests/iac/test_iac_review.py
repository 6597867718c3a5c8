"""IaC reviews: pools rendered through infra/ under Pulumi mocks, diffed, priced, policy-checked."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from iac_helpers import AWS_POOL, GCP_POOL, commit_all, init_repo, pool, write_policies

from provisioner.domain.errors import ConfigError
from provisioner.iac.guard import Guard, load_policy_config
from provisioner.iac.preview import Rendering, detect, run_previews
from provisioner.iac.report import to_json, to_markdown
from provisioner.iac.review import build_review, review_for_pool_creation, review_working_tree
from provisioner.iac.sources import load_dir, load_git

pytestmark = pytest.mark.pulumi

ASG = "aws:autoscaling/group:Group"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
TPL = "gcp:compute/instanceTemplate:InstanceTemplate"
MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"


def review_dirs(tmp_path: Path, base_pools, head_pools, catalog, **kw):
    base = load_dir(write_policies(tmp_path / "base", base_pools))
    head = load_dir(write_policies(tmp_path / "head", head_pools))
    return build_review(head, base, catalog=catalog, **kw)


def pool_of(data, name):
    return next(p for p in data["pools"] if p["name"] == name)


def test_pool_added(tmp_path, catalog):
    review = review_dirs(tmp_path, [AWS_POOL], [AWS_POOL, GCP_POOL], catalog)
    data = review.to_dict()
    gcp, aws = pool_of(data, "gcp-a100"), pool_of(data, "aws-a100")
    assert gcp["status"] == "added" and aws["status"] == "unchanged"
    # capacity any on one region and type: a spot and an on-demand group, template + MIG each
    assert gcp["node_groups"] == {"base": 0, "head": 2}
    assert gcp["resource_counts"] == {"added": 4, "changed": 0, "removed": 0}
    assert {r["type"] for r in gcp["resources"]} == {TPL, MIG}
    assert data["summary"]["resources"] == {
        "added": 4,
        "changed": 0,
        "removed": 0,
        "unchanged": 2,
        "base": 2,
        "head": 6,
    }
    # priced: 2 nodes x a2-highgpu-1g (3.67339 on-demand, 1.92802 spot in us-central1)
    head = gcp["cost"]["head"]
    assert head["on_demand_usd_hr_at_max"]["min"] == "7.34678"
    assert head["spot_usd_hr_at_max"]["min"] == "3.85604"
    # expected: 0.25 x 730 h x 2 nodes x cheapest allowed (spot) = 703.73
    assert head["expected_usd_month"] == "703.73"
    assert head["expected_use_source"] == "review default"
    assert gcp["cost"]["expected_usd_month_delta"] == "703.73"
    assert data["summary"]["cost"]["expected_usd_month"]["delta"] == "703.73"
    assert review.verdict == "pass" and review.exit_code == 0
    md = to_markdown(data)
    assert "`gcp-a100` (gcp, 2 nodes) | added | +4 ~0 −0" in md
    assert "+$703.73" in md


def test_a_placement_change_is_shown_where_the_vms_go(tmp_path, catalog):
    placed = pool(
        GCP_POOL,
        zones=["us-central1-b"],
        subnetwork="burst-subnet",
        network_tags=["slurm-node"],
        root_disk_gb=300,
    )
    data = review_dirs(tmp_path, [GCP_POOL], [placed], catalog).to_dict()
    gcp = pool_of(data, "gcp-a100")
    assert gcp["status"] == "changed"
    changed = {c["path"] for c in gcp["policy_changes"]}
    assert {"zones", "subnetwork", "network_tags", "root_disk_gb"} <= changed, changed
    assert gcp["placement"] == {
        "zones": ["us-central1-b"],
        "subnetwork": "burst-subnet",
        "network_tags": ["slurm-node"],
        "root_disk_gb": 300,
    }
    # a new node shape: each group's template is replaced
    assert {r["type"] for r in gcp["resources"]} >= {TPL}
    md = to_markdown(data)
    assert (
        "Placement: zones `us-central1-b`; subnetwork `burst-subnet`; network tags "
        "`slurm-node`; root disk 300 GB." in md
    ), md


def test_pool_resized_changes_asg_max_size(tmp_path, catalog):
    review = review_dirs(
        tmp_path,
        [AWS_POOL, GCP_POOL],
        [pool(AWS_POOL, max_nodes=8), pool(GCP_POOL, max_nodes=3)],
        catalog,
    )
    data = review.to_dict()
    aws = pool_of(data, "aws-a100")
    assert aws["status"] == "changed"
    assert aws["policy_changes"] == [{"path": "max_nodes", "old": 4, "new": 8}]
    (asg,) = aws["resources"]
    assert asg["type"] == ASG and asg["status"] == "changed"
    assert asg["properties"] == [{"path": "maxSize", "old": 4, "new": 8}]
    # $/h at max size doubles: 8 x 7.246 spot
    assert aws["cost"]["head"]["spot_usd_hr_at_max"]["min"] == "57.968"
    assert aws["cost"]["base"]["spot_usd_hr_at_max"]["min"] == "28.984"
    assert Decimal(aws["cost"]["expected_usd_month_delta"]) == Decimal("5289.58")
    # GCP MIGs have no max size: the pool's max_nodes changes, no resource does
    gcp = pool_of(data, "gcp-a100")
    assert gcp["status"] == "changed" and gcp["resources"] == []
    assert gcp["policy_changes"] == [{"path": "max_nodes", "old": 2, "new": 3}]
    md = to_markdown(data)
    assert "`maxSize`: `4` → `8`" in md and "`max_nodes`: `4` → `8`" in md


def test_instance_type_changed(tmp_path, catalog):
    review = review_dirs(
        tmp_path, [AWS_POOL], [pool(AWS_POOL, instance_types=["p4de.24xlarge"])], catalog
    )
    data = review.to_dict()
    aws = pool_of(data, "aws-a100")
    assert aws["policy_changes"] == [
        {"path": "instance_types", "old": ["p4d.24xlarge"], "new": ["p4de.24xlarge"]}
    ]
    # the group's name carries the instance type: the old group goes, a new one comes
    statuses = {(r["status"], r["type"], r["name"]) for r in aws["resources"]}
    old = "burst-ctl-aws-a100-us-east-1-p4d-24xlarge-spot"
    new = "burst-ctl-aws-a100-us-east-1-p4de-24xlarge-spot"
    assert statuses == {
        ("removed", LT, f"{old}-lt"),
        ("removed", ASG, f"{old}-asg"),
        ("added", LT, f"{new}-lt"),
        ("added", ASG, f"{new}-asg"),
    }
    assert aws["cost"]["head"]["spot_usd_hr_at_max"]["cheapest"] == "us-east-1/p4de.24xlarge"
    assert Decimal(aws["cost"]["expected_usd_month_delta"]) > 0


def test_in_place_change_shows_properties(tmp_path, catalog):
    """A team change retags the same group: every tag set is an update, old → new."""
    review = review_dirs(tmp_path, [AWS_POOL], [pool(AWS_POOL, team="nlp")], catalog)
    aws = pool_of(review.to_dict(), "aws-a100")
    lt = next(r for r in aws["resources"] if r["type"] == LT)
    paths = {p["path"]: (p["old"], p["new"]) for p in lt["properties"]}
    assert paths["tags.team"] == ("vision", "nlp")
    assert paths["tagSpecifications[0].tags.team"] == ("vision", "nlp")


def test_policy_violation_fails_and_names_the_rule(tmp_path, catalog):
    review = review_dirs(tmp_path, [AWS_POOL], [pool(AWS_POOL, max_nodes=32)], catalog)
    assert review.verdict == "fail" and review.exit_code == 1
    data = review.to_dict()
    (v,) = [v for v in data["violations"] if v["level"] == "mandatory"]
    assert v["policy"] == "pool-max-size-within-cap" and v["pool"] == "aws-a100"
    assert v["resource_type"] == ASG and v["resource"].endswith("-asg")
    assert "maxSize 32 exceeds the cap of 16 nodes" in v["message"] and v["new"] is True
    md = to_markdown(data)
    assert "❌ **FAIL**" in md and "`pool-max-size-within-cap` (mandatory)" in md
    # the policy config raises the cap: the same change passes
    cfg = tmp_path / "pack.json"
    cfg.write_text(json.dumps({"pool-max-size-within-cap": {"maxPoolNodes": 64}}))
    guard = Guard(config=load_policy_config(cfg))
    ok = review_dirs(tmp_path, [AWS_POOL], [pool(AWS_POOL, max_nodes=32)], catalog, guard=guard)
    assert ok.verdict == "pass"


def test_existing_violation_is_not_new(tmp_path, catalog):
    bad = pool(AWS_POOL, max_nodes=20)
    review = review_dirs(tmp_path, [bad], [bad], catalog)
    (v,) = review.to_dict()["violations"]
    assert v["policy"] == "pool-max-size-within-cap" and v["new"] is False
    assert review.verdict == "fail"  # the head fails, new or not


def test_advisory_only_passes(tmp_path, catalog):
    """A batch pool on on-demand only: the spot rule is advisory, the review passes."""
    review = review_dirs(tmp_path, None, [pool(AWS_POOL, capacity="on-demand")], catalog)
    data = review.to_dict()
    assert review.verdict == "pass"
    assert [(v["policy"], v["level"]) for v in data["violations"]] == [
        ("batch-pools-use-spot", "advisory")
    ]
    assert data["summary"]["violations"] == {"mandatory": 0, "advisory": 1, "new": 1}
    assert pool_of(data, "aws-a100")["cost"]["head"]["spot_usd_hr_at_max"] is None


def test_a_batch_pool_that_can_use_spot_is_not_told_to(tmp_path, catalog):
    """`capacity: any` renders a spot and an on-demand group; the on-demand one is the fallback
    on purpose, so the spot rule holds for the pool (it used to flag every on-demand template)."""
    data = review_dirs(
        tmp_path,
        None,
        [pool(AWS_POOL, capacity="any", regions=["us-east-1", "us-west-2"])],
        catalog,
    ).to_dict()
    aws = pool_of(data, "aws-a100")
    assert aws["node_groups"]["head"] == 4  # spot + on-demand in each of 2 regions
    assert data["violations"] == []
    verdicts = {v["policy"]: v["verdict"] for v in aws["policy_verdicts"]}
    assert verdicts["batch-pools-use-spot"] == "pass"


def test_one_finding_on_many_resources_is_one_line(tmp_path, catalog):
    """The same message on every template of a pool is listed once, naming the templates."""
    cfg = tmp_path / "pack.json"
    cfg.write_text(json.dumps({"gpu-instance-types-allowed": {"allowedInstanceTypes": ["g6.*"]}}))
    guard = Guard(config=load_policy_config(cfg))
    head = [pool(AWS_POOL, capacity="any", regions=["us-east-1", "us-west-2"])]
    data = review_dirs(tmp_path, None, head, catalog, guard=guard).to_dict()
    found = [v for v in data["violations"] if v["policy"] == "gpu-instance-types-allowed"]
    assert len(found) == 4 and len({v["message"] for v in found}) == 1  # 4 templates, 1 message
    md = to_markdown(data)
    lines = [ln for ln in md.splitlines() if "is not in the allow list" in ln]
    assert len(lines) == 1, lines
    assert all(v["resource"] in lines[0] for v in found)
    assert "`gpu-instance-types-allowed` (mandatory): 4 resources" in md


def test_rules_that_read_no_resource_of_a_pool_are_not_applicable(tmp_path, catalog):
    """An AWS-only rule on a GCP pool, and the other way round, say "not applicable", not
    "pass"; rules that read the pool's resources pass or fail."""
    data = review_dirs(tmp_path, None, [AWS_POOL, GCP_POOL], catalog).to_dict()
    aws = {v["policy"]: v["verdict"] for v in pool_of(data, "aws-a100")["policy_verdicts"]}
    gcp = {v["policy"]: v["verdict"] for v in pool_of(data, "gcp-a100")["policy_verdicts"]}
    assert aws["imdsv2-required"] == "pass"
    assert aws["gpu-terminate-on-host-maintenance"] == "not applicable"
    assert gcp["imdsv2-required"] == "not applicable"
    assert gcp["gpu-terminate-on-host-maintenance"] == "pass"
    assert aws["no-public-ip"] == gcp["no-public-ip"] == "pass"
    md = to_markdown(data)
    assert "`imdsv2-required` on `gcp-a100`" in md
    assert "`gpu-terminate-on-host-maintenance` on `aws-a100`" in md
    # a mandatory failure shows as "fail" on that pool only
    bad = review_dirs(tmp_path / "b", None, [pool(AWS_POOL, max_nodes=32), GCP_POOL], catalog)
    bad_data = bad.to_dict()
    aws = {v["policy"]: v["verdict"] for v in pool_of(bad_data, "aws-a100")["policy_verdicts"]}
    gcp = {v["policy"]: v["verdict"] for v in pool_of(bad_data, "gcp-a100")["policy_verdicts"]}
    assert aws["pool-max-size-within-cap"] == "fail" and gcp["pool-max-size-within-cap"] == "pass"


def test_the_review_prints_no_absolute_path(tmp_path, catalog, monkeypatch):
    """Reviews are pasted into pull requests: paths are relative to where it ran, or names."""
    policies = write_policies(tmp_path / "work" / "policies", [AWS_POOL])
    monkeypatch.chdir(tmp_path / "work")
    data = review_working_tree(policies.resolve(), base_dir=None, catalog=None).to_dict()
    text = to_markdown(data) + to_json(data)
    assert data["head"] == "working tree policies"
    assert str(tmp_path) not in text
    monkeypatch.chdir(tmp_path.parent)  # elsewhere: still no absolute path
    data = review_working_tree(policies.resolve()).to_dict()
    assert str(tmp_path) not in to_markdown(data) + to_json(data)


def test_base_with_no_pools_git(tmp_path, catalog):
    """A base ref without policies/ at all: every head pool is added."""
    root = init_repo(tmp_path / "repo")  # HEAD: README only
    write_policies(root / "policies", [AWS_POOL, GCP_POOL])
    base = load_git("HEAD", root / "policies")
    try:
        assert base.policy.pools == [] and "no policy files" in base.notes[0]
        review = build_review(load_dir(root / "policies"), base, catalog=catalog)
    finally:
        base.close()
    data = review.to_dict()
    assert data["summary"]["pools"] == {"added": 2, "changed": 0, "removed": 0, "unchanged": 0}
    assert data["summary"]["resources"]["added"] == 6 and data["summary"]["resources"]["base"] == 0
    month = data["summary"]["cost"]["expected_usd_month"]
    assert month["base"] == "0.00" and month["delta"] == month["head"]


def test_pool_removed_git_base(repo, catalog):
    write_policies(repo / "policies", [AWS_POOL])
    review = review_working_tree(repo / "policies", base_ref="HEAD")
    data = review.to_dict()
    gcp = pool_of(data, "gcp-a100")
    assert gcp["status"] == "removed" and gcp["resource_counts"]["removed"] == 4
    assert gcp["cost"]["head"] is None and Decimal(gcp["cost"]["expected_usd_month_delta"]) < 0
    assert data["base"].startswith("HEAD (")


def test_git_base_bad_policy_file_names_ref_file_and_field(repo):
    (repo / "policies" / "pools.yaml").write_text("pools:\n  - name: x1\n    cloud: azure\n")
    commit_all(repo, "bad")
    write_policies(repo / "policies", [AWS_POOL])
    with pytest.raises(ConfigError) as err:
        load_git("HEAD", repo / "policies")
    assert str(err.value).startswith("HEAD:policies/pools.yaml: pools[0].cloud:")


def test_bad_base_ref(repo):
    from provisioner.domain.errors import InputError

    for ref in ("--output=/tmp/x", "no-such-branch", "a..b"):
        with pytest.raises(InputError):
            load_git(ref, repo / "policies")


def test_base_program_from_git(tmp_path, catalog):
    """A git base renders with its own pool program (here in infra/, where commits before the move
    into the package kept it): a program change shows in the diff; a base program that cannot
    load falls back to the working tree's, with a note."""
    from provisioner.iac.sources import default_infra_dir, package_program_file

    root = init_repo(tmp_path / "repo")
    write_policies(root / "policies", [AWS_POOL])
    real = default_infra_dir()
    infra = root / "infra"
    (infra / "bootstrap").mkdir(parents=True)
    template = "bootstrap/slurm-node.cloud-init.yaml"
    (infra / template).write_text((real / template).read_text())
    program = package_program_file().read_text()
    gp2 = program.replace('volume_type="gp3"', 'volume_type="gp2"')
    (infra / "pool_program.py").write_text(gp2)
    commit_all(root, "base with gp2 volumes")
    head = load_dir(root / "policies")

    base = load_git("HEAD", root / "policies", infra_dir=infra)
    try:
        assert base.infra_dir is not None
        data = build_review(head, base, catalog=catalog).to_dict()
    finally:
        base.close()
    (lt,) = [r for r in pool_of(data, "aws-a100")["resources"] if r["type"] == LT]
    assert lt["properties"] == [
        {"path": "blockDeviceMappings[0].ebs.volumeType", "old": "gp2", "new": "gp3"}
    ]

    (infra / "pool_program.py").write_text("raise ImportError('old program')\n")
    commit_all(root, "broken program")
    base = load_git("HEAD", root / "policies", infra_dir=infra)
    try:
        data = build_review(head, base, catalog=catalog).to_dict()
    finally:
        base.close()
    assert data["summary"]["resources"]["changed"] == 0
    assert any("could not be loaded" in n for n in data["notes"])


def test_json_and_markdown_say_the_same(tmp_path, catalog):
    review = review_dirs(tmp_path, [AWS_POOL], [pool(AWS_POOL, max_nodes=32), GCP_POOL], catalog)
    data = json.loads(to_json(review.to_dict()))
    md = to_markdown(data)
    assert data["verdict"] == "fail" and data["exit_code"] == 1
    assert data["schema"] == "gpu-burst/iac-review/v1"
    assert data["rendering"]["mode"] == "mocks"
    assert "Pulumi mocks" in data["rendering"]["note"] and "Pulumi mocks" in md
    for p in data["pools"]:
        assert f"`{p['name']}`" in md and p["status"] in md
    for v in data["violations"]:
        assert v["policy"] in md and v["resource"] in md
    assert f"${Decimal(data['summary']['cost']['expected_usd_month']['head']):,.2f}" in md
    assert {p["name"] for p in data["policies"]} >= {"pool-max-size-within-cap", "no-public-ip"}


def test_rendered_resources_pass_the_pack(tmp_path, catalog):
    """The program's own output is clean: no mandatory violation on a sane pool (way 3)."""
    review = review_dirs(tmp_path, None, [AWS_POOL, GCP_POOL], catalog)
    assert [v.policy for v in review.violations if v.mandatory] == []


def test_placeholder_images_and_sim_pools_are_noted(tmp_path, catalog):
    sim = {"name": "sim-a100", "cloud": "sim", "regions": ["any"], "gpu_model": "A100"}
    base = load_dir(write_policies(tmp_path / "base", None, node={}))
    head = load_dir(write_policies(tmp_path / "head", [AWS_POOL, sim], node={}))
    data = build_review(head, base, catalog=catalog).to_dict()
    notes = " ".join(data["notes"])
    assert "placeholder image" in notes and "aws-a100" in notes and "sim-a100" in notes


def test_review_for_pool_creation_is_stored_with_the_decision(tmp_path, catalog):
    from provisioner.config.loader import load_policy
    from provisioner.domain.offers import CapacityType, OfferKey
    from provisioner.domain.plan import Decision, ReasonCode
    from provisioner.iac.review import record_pool_creation_review
    from provisioner.store import Store

    policy = load_policy(write_policies(tmp_path / "p", [AWS_POOL, GCP_POOL]))
    review = review_for_pool_creation(policy, "aws-a100", catalog=catalog, decision_id="d-7")
    assert review["pool"] == "aws-a100" and review["verdict"] == "pass"
    assert [p["name"] for p in review["pools"]] == ["aws-a100"]
    assert review["pools"][0]["status"] == "added"
    with pytest.raises(KeyError):
        review_for_pool_creation(policy, "nope", catalog=catalog)

    store = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        offer = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
        store.record_decisions(
            [Decision("d-7", ReasonCode.BURST_WAIT_EXCEEDS_BUDGET, ("1",), offer)], 1.0
        )
        record_pool_creation_review(store, "d-7", policy, "aws-a100", catalog=catalog)
        stored = store.decision("d-7")
        assert stored is not None and stored.iac_review_format == "json"
        body = json.loads(stored.iac_review or "{}")
        assert body["pool"] == "aws-a100" and body["decision_id"] == "d-7"
        # the tags of the rendered resources carry the decision id
        assert body["pools"][0]["resources"][0]["name"].startswith("burst-ctl-aws-a100")
    finally:
        store.close()


def test_preview_path_with_a_fake_stack_factory(tmp_path, catalog, monkeypatch):
    """Where the CLI and a backend exist, every head group is previewed (fake stacks here)."""
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert detect("file:///state").mode == "mocks"
    assert "CLI is not installed" in detect("file:///state").note
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/pulumi")
    assert detect(None).mode == "mocks" and "no Pulumi backend" in detect(None).note
    rendering = detect("file:///state")
    assert rendering.mode == "preview+mocks"

    selected: list[str] = []

    class FakeStack:
        def __init__(self, name: str) -> None:
            self.name = name

        def preview(self):
            if self.name.endswith("-od"):
                raise RuntimeError("boom")
            return {"create": 2}

        def up(self):
            raise AssertionError("a review never deploys")

        def destroy(self):
            raise AssertionError("a review never destroys")

    class FakeStacks:
        def select(self, name, program, config):
            selected.append(name)
            return FakeStack(name)

        def remove(self, name):
            raise AssertionError

    from provisioner.config.loader import load_policy
    from provisioner.iac.render import specs_for_policy

    policy = load_policy(write_policies(tmp_path / "p", [GCP_POOL]))
    specs = specs_for_policy(policy, catalog).specs
    out = run_previews(rendering, specs, lambda s: None, stacks=lambda backend: FakeStacks())
    spot = "burst-ctl-gcp-a100-us-central1-a2-highgpu-1g-spot"
    assert out.previews == {spot: {"create": 2}}
    assert list(out.errors) == ["burst-ctl-gcp-a100-us-central1-a2-highgpu-1g-od"]
    assert "pulumi preview" in out.note and len(selected) == 2
    untouched = run_previews(Rendering("mocks"), specs, lambda s: None)
    assert untouched.previews == {}
