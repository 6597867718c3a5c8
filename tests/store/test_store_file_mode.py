"""The SQLite store is readable by its owner alone: it holds token hashes and every dollar.
Made so when created; tightened when found open to others; the folder it sits in, the user's,
is left as it was."""

from __future__ import annotations

import stat
from pathlib import Path

from provisioner.store import Store
from provisioner.store.engine import private_folder


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_store_and_its_wal_are_owner_only_and_the_folder_is_untouched(tmp_path: Path):
    tmp_path.chmod(0o755)
    db = tmp_path / "controller.sqlite"
    store = Store(f"sqlite:///{db}")
    store.record_decisions([], 0.0)  # a write: the WAL and its index exist now
    assert mode(db) == 0o600
    for side in (tmp_path / "controller.sqlite-wal", tmp_path / "controller.sqlite-shm"):
        if side.exists():
            assert mode(side) & 0o077 == 0, side
    assert mode(tmp_path) == 0o755
    store.close()


def test_a_store_left_open_to_others_is_tightened(tmp_path: Path):
    db = tmp_path / "old.sqlite"
    Store(f"sqlite:///{db}").close()
    db.chmod(0o644)  # as an earlier release left it
    Store(f"sqlite:///{db}").close()
    assert mode(db) == 0o600


def test_a_folder_made_for_the_store_is_owner_only_and_a_users_own_is_left_alone(tmp_path: Path):
    made = tmp_path / "work" / ".demo"
    private_folder(made)
    assert mode(made) == 0o700
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    private_folder(mine)
    assert mode(mine) == 0o755
