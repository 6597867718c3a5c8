"""`provisioner token create --ttl/--node`, `token revoke`, `token list` (issue 10 item 5),
and `token create` naming the store it wrote to (issue 16 item 8)."""

from __future__ import annotations

import json
import time

from typer.testing import CliRunner

from provisioner.api.auth import Role, verify_token
from provisioner.cli import app
from provisioner.store import Store


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_agent_token_with_ttl_then_list_and_revoke(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    r = invoke(
        "token",
        "create",
        "--role",
        "agent",
        "--name",
        "nvml",
        "--node",
        "gpu-07",
        "--ttl",
        "12h",
        "--store",
        url,
    )
    assert r.exit_code == 0, r.output
    token = r.stdout.strip().splitlines()[0]
    assert token.startswith("pbt_")
    assert "t.sqlite" in r.stderr and "gpu-07" in r.stderr
    store = Store(url)
    try:
        (rec,) = store.tokens()
        assert rec.role == "agent" and rec.node == "gpu-07"
        assert rec.expires_ts is not None
        assert rec.expires_ts - rec.created_ts == 12 * 3600
        p = verify_token(store, token, rec.created_ts + 60)
        assert p is not None and p.role is Role.AGENT and p.node == "gpu-07"
        assert verify_token(store, token, rec.created_ts + 12 * 3600) is None
    finally:
        store.close()

    listed = invoke("token", "list", "--store", url)
    assert listed.exit_code == 0, listed.output
    row = listed.stdout.strip().splitlines()[1].split("\t")
    assert row[0] == rec.token_id and row[2:4] == ["agent", "gpu-07"]
    assert token.split("_")[2] not in listed.output

    gone = invoke("token", "revoke", rec.token_id, "--store", url)
    assert gone.exit_code == 0, gone.output
    store = Store(url)
    try:
        assert verify_token(store, token, time.time()) is None
    finally:
        store.close()
    assert invoke("token", "list", "--store", url).stdout.strip().endswith("revoked")


def test_bad_token_options_are_one_clear_error(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    r = invoke("token", "create", "--role", "agent", "--name", "x", "--store", url)
    assert r.exit_code == 2 and "--node" in r.stderr
    r = invoke(
        "token", "create", "--role", "viewer", "--name", "x", "--ttl", "soon", "--store", url
    )
    assert r.exit_code == 2 and "--ttl" in r.stderr
    r = invoke("token", "revoke", "000000000000", "--store", url)
    assert r.exit_code == 2 and "no such token" in r.stderr


def test_token_commands_speak_json_for_scripts(tmp_path):
    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    r = invoke("token", "create", "--role", "viewer", "--name", "ci", "--store", url, "--json")
    assert r.exit_code == 0, r.output
    made = json.loads(r.stdout)
    assert made["token"].startswith(f"pbt_{made['token_id']}_") and made["role"] == "viewer"
    listed = invoke("token", "list", "--store", url, "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert row["token_id"] == made["token_id"] and row["state"] == "active"
    assert made["token"].split("_")[2] not in listed.stdout  # never the secret
    gone = invoke("token", "revoke", made["token_id"], "--store", url, "--json")
    assert json.loads(gone.stdout) == {"token_id": made["token_id"], "revoked": True}
    (row,) = json.loads(invoke("token", "list", "--store", url, "--json").stdout)
    assert row["state"] == "revoked" and row["revoked"]
