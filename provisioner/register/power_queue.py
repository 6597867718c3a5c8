"""The Slurm-driven handoff: ResumeProgram/SuspendProgram/ResumeFailProgram requests, queued
durably for the controller.

Slurm calls its hooks with a hostlist, may call twice for the same node, runs them with no PATH
and blocked signals, and wants them to return at once. So the hook only records the request; the
controller picks it up on its next pass. `PowerRequestQueue` is the port; `SqlitePowerRequestQueue`
keeps requests in one SQLite file under the state dir (stdlib only, safe across processes: each
write is one transaction, `fsync`ed). A request is per node; a second identical request while the
first is still pending is a no-op (idempotent).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

QUEUE_FILE = "power-requests.sqlite"


class PowerAction(StrEnum):
    RESUME = "resume"
    SUSPEND = "suspend"
    RESUME_FAIL = "resume-fail"


@dataclass(frozen=True, slots=True)
class PowerRequest:
    request_id: int
    action: PowerAction
    node: str
    requested_ts: float
    hostlist: str = ""


class PowerRequestQueue(Protocol):
    def submit(
        self, action: PowerAction, nodes: Sequence[str], requested_ts: float, hostlist: str = ""
    ) -> int:
        """Queue one request per node; returns how many were new (not already pending)."""
        ...

    def pending(self) -> tuple[PowerRequest, ...]:
        """Unacknowledged requests, oldest first."""
        ...

    def ack(self, request_ids: Iterable[int], done_ts: float) -> None:
        """Mark requests handled."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS power_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    action       TEXT NOT NULL,
    node         TEXT NOT NULL,
    hostlist     TEXT NOT NULL DEFAULT '',
    requested_ts REAL NOT NULL,
    done_ts      REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS power_requests_one_pending
    ON power_requests(action, node) WHERE done_ts IS NULL;
"""


class SqlitePowerRequestQueue:
    def __init__(self, state_dir: Path | str, *, busy_timeout_s: float = 30.0) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / QUEUE_FILE
        self._timeout = busy_timeout_s

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def submit(
        self, action: PowerAction, nodes: Sequence[str], requested_ts: float, hostlist: str = ""
    ) -> int:
        act = PowerAction(action)
        with self._db() as db:
            new = 0
            for node in dict.fromkeys(nodes):
                cur = db.execute(
                    "INSERT OR IGNORE INTO power_requests(action, node, hostlist, requested_ts)"
                    " VALUES (?, ?, ?, ?)",
                    (act.value, node, hostlist, requested_ts),
                )
                new += cur.rowcount
            return new

    def pending(self) -> tuple[PowerRequest, ...]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, action, node, requested_ts, hostlist FROM power_requests"
                " WHERE done_ts IS NULL ORDER BY id"
            ).fetchall()
        return tuple(
            PowerRequest(int(r[0]), PowerAction(r[1]), str(r[2]), float(r[3]), str(r[4]))
            for r in rows
        )

    def ack(self, request_ids: Iterable[int], done_ts: float) -> None:
        ids = [int(i) for i in request_ids]
        if not ids:
            return
        with self._db() as db:
            db.executemany(
                "UPDATE power_requests SET done_ts = ? WHERE id = ? AND done_ts IS NULL",
                [(done_ts, i) for i in ids],
            )
