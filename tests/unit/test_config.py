"""Policy files: strict validation, errors that name the file and the field, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.config import load_policy
from provisioner.config.models import WaitPolicy
from provisioner.domain.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_policies_load() -> None:
    pol = load_policy(REPO / "policies")
    # no controller named: each installation claims its own in its store (bootstrap)
    assert "controller" not in pol.model_fields_set
    assert {p.name for p in pol.pools} >= {"aws-a100", "gcp-a100"}
    assert pol.waiting.for_job("inference", "").urgent
    assert pol.waiting.for_job("onprem", "debug").cap_s == 1800


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "pools: [{name: a-b, cloud: azure, regions: [x], gpu_model: A100}]",
            "pools[0].cloud",
            "aws",
        ),
        ("budgets: {global_usd_per_hour: -1}", "budgets.global_usd_per_hour", "greater"),
        # money a site could not mean: refused, not turned into a 2 MB /v1/budgets answer
        ("budgets: {global_usd_per_hour: '1e999999'}", "budgets.global_usd_per_hour", "less"),
        ("budgets: {teams: {a: {monthly_usd: 1e12}}}", "budgets.teams.a.monthly_usd", "less"),
        ("budgets: {global_usd_per_hour: NaN}", "budgets.global_usd_per_hour", "finite"),
        ("onprem: {energy_usd_per_kwh: 1000}", "onprem.energy_usd_per_kwh", "less"),
        (
            "waiting: {default: {usd_per_wait_hour: 1e7}}",
            "waiting.default.usd_per_wait_hour",
            "less",
        ),
        (
            "waiting: {default: {runtime_factr: 1}}",
            "waiting.default.runtime_factr",
            "not permitted",
        ),
        ("waiting: {default: {floor_s: 10, cap_s: 5}}", "waiting.default", "must not exceed"),
        ("pools: [{name: a, cloud: aws, regions: [x]}]", "pools[0].name", "pattern"),
        ("colour: blue", "colour", "not permitted"),
        (
            "pools: [{name: g-a, cloud: gcp, regions: [x], gpu_model: A100, "
            "instance_profile: burst-node}]",
            "pools[0]",
            "instance_profile is AWS's",
        ),
        (
            "node: {node_address: dhcp}",
            "node.node_address",
            "instance",
        ),
        (
            "node: {agent_wheels: 'ftp://x/'}",
            "node.agent_wheels",
            "pattern",
        ),
    ],
)
def test_bad_policy_names_file_and_field(tmp_path: Path, text: str, field: str, words: str) -> None:
    f = tmp_path / "burst.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_policy(f)
    assert err.value.source == str(f)
    assert err.value.field == field
    assert words in err.value.message


@pytest.mark.parametrize(
    ("pool", "node", "identity", "words"),
    [
        ("{name: g-a, cloud: gcp", "{munge_key_secret: munge-key}",
         "service_account: n@p.iam.gserviceaccount.com", "pools[g-a].service_account"),
        ("{name: a-a, cloud: aws", "{munge_key_parameter: /k}",
         "instance_profile: burst-node", "pools[a-a].instance_profile"),
    ],
)  # fmt: skip
def test_a_pool_whose_vms_could_not_read_their_munge_key_is_refused(
    tmp_path: Path, pool: str, node: str, identity: str, words: str
) -> None:
    """Such a VM boots, cannot read the key with no identity, and never joins."""
    f = tmp_path / "burst.yaml"
    f.write_text(f"pools: [{pool}, regions: [x], gpu_model: A100}}]\nnode: {node}\n")
    with pytest.raises(ConfigError) as err:
        load_policy(f)
    assert err.value.source == str(f) and words in err.value.message
    # with the identity it reads with, the same policy loads
    f.write_text(f"pools: [{pool}, regions: [x], gpu_model: A100, {identity}}}]\nnode: {node}\n")
    assert load_policy(f).pools


def test_an_agent_with_no_api_to_push_to_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "burst.yaml"
    f.write_text("node: {agent_wheels: 'https://artifacts.example.org/w/'}\n")
    with pytest.raises(ConfigError) as err:
        load_policy(f)
    assert "node.controller_api" in err.value.message
    f.write_text(
        "node: {agent_wheels: 'https://artifacts.example.org/w/', "
        "controller_api: 'http://10.0.0.2:8000'}\n"
    )
    assert load_policy(f).node.agent_wheels.startswith("https://")


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "burst.yaml"
    f.write_text("controller: x\npools: [\n  - {name: \n")
    with pytest.raises(ConfigError) as err:
        load_policy(f)
    assert err.value.field.startswith("line ")


def test_directory_reports_the_file_that_holds_the_mistake(tmp_path: Path) -> None:
    (tmp_path / "burst.yaml").write_text("controller: ok-ctl\n")
    (tmp_path / "pools.yaml").write_text(
        "pools: [{name: p1, cloud: aws, regions: [us-east-1], gpu_model: A100, max_nodes: -2}]\n"
    )
    with pytest.raises(ConfigError) as err:
        load_policy(tmp_path)
    assert err.value.source == str(tmp_path / "pools.yaml")
    assert err.value.field == "pools[0].max_nodes"


def test_key_set_in_two_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "burst.yaml").write_text("pools: []\n")
    (tmp_path / "pools.yaml").write_text("pools: []\n")
    with pytest.raises(ConfigError, match="already set in"):
        load_policy(tmp_path)


def test_cli_bad_file_exit_2_one_line_no_traceback(tmp_path: Path) -> None:
    f = tmp_path / "burst.yaml"
    f.write_text("budgets: {teams: {ml: {monthly_usd: lots}}}\n")
    res = CliRunner().invoke(app, ["validate", "--policies", str(f)])
    assert res.exit_code == 2
    out = res.output.strip()
    assert "Traceback" not in out
    assert out.count("\n") == 0
    assert str(f) in out and "budgets.teams.ml.monthly_usd" in out


def test_validate_json_names_the_policies_without_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output is pasted into tickets: a path relative to where it ran, or the folder's name."""
    import json

    folder = tmp_path / "work" / "policies"
    folder.mkdir(parents=True)
    (folder / "burst.yaml").write_text("controller: ctl-a\n")
    monkeypatch.chdir(tmp_path / "work")
    res = CliRunner().invoke(app, ["validate", "--policies", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["policies"] == "policies" and got["ok"] is True and got["controller"] == "ctl-a"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # outside it and outside any work tree: its name
    res = CliRunner().invoke(app, ["validate", "--policies", str(folder)])
    assert res.exit_code == 0 and str(tmp_path) not in res.stdout
    assert res.stdout.startswith("policies: ok (controller ctl-a")


def test_wait_budget_rules() -> None:
    compute = WaitPolicy(runtime_factor=0.1, per_gpu_s=600, floor_s=60, cap_s=7200)
    assert compute.budget_s(2, 1000) == 200  # 0.1 * 2 * 1000
    assert compute.budget_s(1, 10) == 60  # floor
    assert compute.budget_s(8, 100_000) == 7200  # cap
    assert compute.budget_s(3, None) == 1800  # no runtime: per GPU
    cost = WaitPolicy(usd_per_wait_hour="20", per_gpu_s=600)  # type: ignore[arg-type]
    assert cost.budget_s(1, 3600, cloud_cost_usd=10.0) == 1800  # $10 saved = half an hour
    assert cost.budget_s(1, None, cloud_cost_usd=10.0) == 600  # unknown runtime: per GPU
    assert WaitPolicy(urgent=True).budget_s(8, 1e6, 1e6) == 0


def test_a_job_without_account_is_billed_to_a_named_team() -> None:
    # Issue 16 item 8: jobs with no account were billed to team "".
    from provisioner.config.models import NO_ACCOUNT_TEAM, Budgets

    b = Budgets(team_of_account={"acct-v": "vision"})
    assert b.team_for("") == NO_ACCOUNT_TEAM == "no-account"
    assert b.team_for("acct-v") == "vision" and b.team_for("lab") == "lab"
    assert Budgets(team_of_account={"": "ops"}).team_for("") == "ops"
