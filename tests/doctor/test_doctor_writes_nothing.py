"""Issue 25 item 4: `provisioner doctor` writes nothing. Run in an empty folder it used to leave
an empty `provisioner.sqlite` there (the store check opened, so created, the default store); now
it says the store does not exist yet and the folder stays empty. An existing store, in use or
not, is read without a byte changing and without SQLite's -wal/-shm files appearing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.doctor import store_check
from provisioner.store import Store

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies" / "demo"


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file below `folder`: its content's hash and its mtime."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def doctor(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`provisioner doctor` as a user runs it, in `cwd`; Slurm off, and no cloud credentials
    (the AWS check fails at once, offline, which is fine here)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PROVISIONER_", "AWS_", "SLURM_", "GOOGLE_"))
    }
    env.update(
        {
            "HOME": str(home),
            "PROVISIONER_SLURM_MODE": "none",
            "PROVISIONER_API_PORT": "0",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(home / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "provisioner.cli", "doctor", "--policies", str(POLICIES), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def folders(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    return work, home


def test_doctor_in_an_empty_folder_leaves_it_empty(folders):
    work, home = folders
    r = doctor(work, home)
    store_line = next(line for line in r.stdout.splitlines() if " store: " in line)
    assert store_line.startswith("OK")
    assert "sqlite:///provisioner.sqlite: does not exist yet" in store_line
    assert "provisioner run" in store_line
    assert list(work.iterdir()) == []


def test_doctor_json_says_what_its_lines_say(folders):
    work, home = folders
    lines = doctor(work, home)
    r = doctor(work, home, "--json")
    got = json.loads(r.stdout)
    assert r.returncode == lines.returncode
    assert [c["name"] for c in got["checks"]] == [
        ln.split(":", 1)[0].split(maxsplit=1)[1] for ln in lines.stdout.splitlines()
    ]
    assert got["failed"] == sum(c["verdict"] == "fail" for c in got["checks"])
    store = next(c for c in got["checks"] if c["name"] == "store")
    assert store["verdict"] == "ok" and "does not exist yet" in store["detail"]


def test_doctor_reads_an_existing_store_without_changing_the_folder(folders):
    work, home = folders
    store = Store(f"sqlite:///{work / 'ctl.sqlite'}")
    store.close()
    before = snapshot(work)
    assert list(before) == ["ctl.sqlite"]
    r = doctor(work, home, "--store", "sqlite:///ctl.sqlite")
    assert any(
        line.startswith("OK") and "ctl.sqlite: migrated" in line for line in r.stdout.splitlines()
    ), r.stdout
    assert snapshot(work) == before


def test_a_store_in_use_is_read_through_its_own_wal_and_left_as_it_was(tmp_path):
    url = f"sqlite:///{tmp_path / 'live.sqlite'}"
    store = Store(url)  # a controller has it open: -wal and -shm exist
    try:
        store.tokens()
        before = snapshot(tmp_path)
        assert {"live.sqlite-wal", "live.sqlite-shm"} <= set(before)
        c = store_check(url)
        assert c.verdict == "ok" and "migrated (" in c.detail
        assert snapshot(tmp_path) == before
    finally:
        store.close()


def test_a_store_folder_that_does_not_exist_fails_and_is_not_created(tmp_path):
    c = store_check(f"sqlite:///{tmp_path / 'nope' / 'x.sqlite'}")
    assert c.verdict == "fail" and "nope does not exist" in c.detail and "--store" in c.fix
    assert not (tmp_path / "nope").exists()
