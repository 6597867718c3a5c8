"""The learned runtime history (plan/history.py), kept so a restart does not forget it.

One row per user, group or partition: its last few completed runtimes, oldest first. The table
is small (one row per name) and written only for names that learned something in a pass. The
behaviour each method promises is written on its port, `provisioner.ports.store.RuntimeHistory`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Float, String, select
from sqlalchemy.orm import Mapped, mapped_column

from provisioner.ports.store import RuntimeHistory
from provisioner.store.engine import StoreBase
from provisioner.store.models import Base


class RuntimeHistoryRow(Base):
    __tablename__ = "runtime_history"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)  # "user:ann", "group:cv"
    runtimes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    updated_ts: Mapped[float] = mapped_column(Float)


class RuntimeHistoryStore(StoreBase, RuntimeHistory):
    def runtime_history(self) -> dict[str, list[float]]:
        with self.reading() as s:
            rows = s.scalars(select(RuntimeHistoryRow).order_by(RuntimeHistoryRow.key))
            return {r.key: [float(v) for v in r.runtimes] for r in rows}

    def save_runtime_history(self, entries: Mapping[str, Sequence[float]], now_ts: float) -> None:
        if not entries:
            return
        with self.fenced_transaction() as s:  # a lapsed leader's learning is refused too
            for key, values in sorted(entries.items()):
                row = s.get(RuntimeHistoryRow, key)
                if row is None:
                    s.add(RuntimeHistoryRow(key=key, runtimes=list(values), updated_ts=now_ts))
                else:
                    row.runtimes = list(values)
                    row.updated_ts = now_ts
