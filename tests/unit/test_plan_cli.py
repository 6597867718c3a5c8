"""`provisioner plan --snapshot`: table and JSON, and clear errors for bad snapshots."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from provisioner.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "snapshot.json"


def test_plan_json_has_actions_and_decisions() -> None:
    res = CliRunner().invoke(app, ["plan", "--snapshot", str(EXAMPLE), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    kinds = {a["action"] for a in out["actions"]}
    assert "scale_up" in kinds
    ups = [a for a in out["actions"] if a["action"] == "scale_up"]
    by_id = {d["decision_id"]: d for d in out["decisions"]}
    for up in ups:
        d = by_id[up["decision_id"]]
        assert d["reason"].startswith("burst_")
        assert d["alternatives"][0]["chosen"] is True
        assert d["global_headroom_usd_hr"] is not None


def test_plan_table_renders(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plan", "--snapshot", str(EXAMPLE)])
    assert res.exit_code == 0
    assert "Actions" in res.output and "Decisions" in res.output


def test_bad_snapshot_names_file_and_field(tmp_path: Path) -> None:
    snap = json.loads(EXAMPLE.read_text())
    snap["jobs"][0]["gpus"] = "many"
    f = tmp_path / "s.json"
    f.write_text(json.dumps(snap))
    res = CliRunner().invoke(app, ["plan", "--snapshot", str(f)])
    assert res.exit_code == 2
    assert f"{f}: jobs.0.gpus" in res.output and "Traceback" not in res.output
    f.write_text("{not json")
    res = CliRunner().invoke(app, ["plan", "--snapshot", str(f)])
    assert res.exit_code == 2 and "line 1" in res.output
