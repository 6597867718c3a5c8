"""`provisioner iac review` through typer's CliRunner: formats, exit codes, bad input."""

from __future__ import annotations

import json

import pytest
from iac_helpers import AWS_POOL, GCP_POOL, init_repo, pool, write_policies
from typer.testing import CliRunner

from provisioner.cli import app

pytestmark = pytest.mark.pulumi

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["iac", "review", *args])


def test_markdown_against_a_git_base(repo):
    write_policies(repo / "policies", [pool(AWS_POOL, max_nodes=6), GCP_POOL])
    res = run("--policies", str(repo / "policies"), "--base", "main")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("## IaC review: burst pools")
    assert "✅ **PASS**" in out and "Base: `main (" in out
    assert "`maxSize`: `4` → `6`" in out
    assert "Pulumi mocks" in out and "CLI is not installed" in out


def test_default_base_is_head_in_git(repo):
    res = run("--policies", str(repo / "policies"), "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["base"].startswith("HEAD (")
    assert data["summary"]["pools"]["unchanged"] == 2


def test_json_flag_is_the_json_format(repo):
    """`--json`, as every report command takes it, is `--format json`."""
    flag = run("--policies", str(repo / "policies"), "--json")
    fmt = run("--policies", str(repo / "policies"), "--format", "json")
    assert flag.exit_code == fmt.exit_code == 0, flag.output
    assert json.loads(flag.stdout) == json.loads(fmt.stdout)


def test_violation_exits_1_and_names_the_rule(tmp_path):
    base = write_policies(tmp_path / "base", [AWS_POOL])
    head = write_policies(tmp_path / "head", [pool(AWS_POOL, max_nodes=40)])
    res = run("--policies", str(head), "--base-dir", str(base), "--format", "markdown")
    assert res.exit_code == 1
    assert "❌ **FAIL**" in res.stdout and "pool-max-size-within-cap" in res.stdout
    res = run("--policies", str(head), "--base-dir", str(base), "--format", "json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["verdict"] == "fail"
    assert [v["policy"] for v in data["violations"] if v["level"] == "mandatory"] == [
        "pool-max-size-within-cap"
    ]


def test_policy_config_can_disable_a_rule(tmp_path):
    head = write_policies(tmp_path / "head", [pool(AWS_POOL, max_nodes=40)])
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"pool-max-size-within-cap": "disabled"}))
    args = ("--policies", str(head), "--base-dir", str(tmp_path / "none"))
    res = run(*args, "--policy-config", str(cfg))
    assert res.exit_code == 2 and "no such file or directory" in res.stderr
    (tmp_path / "none").mkdir()
    res = run(*args, "--policy-config", str(cfg))
    assert res.exit_code == 0, res.output


def test_not_a_git_tree_compares_with_nothing(tmp_path):
    head = write_policies(tmp_path / "head", [AWS_POOL])
    res = run("--policies", str(head), "--format", "json", "--expected-use", "0.5")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["base"].startswith("nothing")
    aws = data["pools"][0]
    assert aws["status"] == "added" and aws["cost"]["head"]["expected_use"] == "0.5"
    # 0.5 x 730 h x 4 nodes x 7.246 spot
    assert aws["cost"]["head"]["expected_usd_month"] == "10579.16"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "pools:\n  - name: x1\n    cloud: azure\n    regions: [r]\n    gpu_model: A100\n",
            "pools.yaml: pools[0].cloud:",
        ),
        (
            "pools:\n  - name: aws-a100\n    cloud: aws\n    regions: [us-east-1]\n"
            "    gpu_model: A100\n    max_nodse: 3\n",
            "pools.yaml: pools[0].max_nodse:",
        ),
        ("pools: [", "pools.yaml: line"),
    ],
)
def test_bad_policy_file_exits_2_naming_file_and_field(tmp_path, content, expected):
    head = write_policies(tmp_path / "head", [AWS_POOL])
    (head / "pools.yaml").write_text(content)
    res = run("--policies", str(head), "--base-dir", str(tmp_path / "head"))
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and expected in res.stderr
    assert "Traceback" not in res.output


def test_bad_inputs_exit_2(tmp_path, repo):
    head = repo / "policies"
    res = run("--policies", str(head), "--base", "no-such-ref")
    assert res.exit_code == 2 and "not a commit" in res.stderr
    res = run("--policies", str(head), "--base", "main", "--base-dir", str(head))
    assert res.exit_code == 2 and "not both" in res.stderr
    res = run("--policies", str(head), "--expected-use", "1.5")
    assert res.exit_code == 2 and "--expected-use" in res.stderr
    bad = tmp_path / "cfg.json"
    bad.write_text(json.dumps({"no-such-policy": "mandatory"}))
    res = run("--policies", str(head), "--policy-config", str(bad))
    assert res.exit_code == 2 and "no-such-policy" in res.stderr
    bad.write_text(json.dumps({"no-public-ip": "sometimes"}))
    res = run("--policies", str(head), "--policy-config", str(bad))
    assert res.exit_code == 2 and "no-public-ip.enforcementLevel" in res.stderr
    res = run("--policies", str(tmp_path / "missing"))
    assert res.exit_code == 2


def test_base_without_policies_dir(tmp_path):
    root = init_repo(tmp_path / "repo")
    write_policies(root / "policies", [GCP_POOL])
    res = run("--policies", str(root / "policies"), "--base", "HEAD", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["summary"]["pools"]["added"] == 1
    assert any("no policy files" in n for n in data["notes"])


def test_a_review_with_the_store_names_groups_as_that_installation_makes_them(tmp_path):
    """Policies that name no controller are run under the identity the store holds; the
    review must show the groups and tags that installation makes (not the old default)."""
    from provisioner.store import Store

    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    store = Store(url)
    assert store.claim_controller_id("burst-5e1f0a2b") == "burst-5e1f0a2b"
    store.close()
    head = write_policies(tmp_path / "head", [AWS_POOL], controller=None)
    base = write_policies(tmp_path / "base", [], controller=None)
    args = ("--policies", str(head), "--base-dir", str(base), "--format", "json")
    plain = run(*args)
    assert plain.exit_code == 0, plain.output
    assert "burst-5e1f0a2b" not in plain.stdout
    res = run(*args, "--store", url)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    (p,) = data["pools"]
    assert "burst-5e1f0a2b" in json.dumps(p)
    assert "burst-ctl-" not in json.dumps(p)
