"""What policy and the operator set: pools (with their drain flag), the pause switch, budgets.
The behaviour each method promises is written on its port, `provisioner.ports.store.PolicyRepo`."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from provisioner.config.models import Budgets, PoolPolicy
from provisioner.domain.records import BudgetRecord, OperatorState, PoolInfo
from provisioner.ports.store import PolicyRepo, StoreError
from provisioner.store.engine import StoreBase
from provisioner.store.models import BudgetRow, OperatorStateRow, PoolRow, _table


class PolicyStore(StoreBase, PolicyRepo):
    # ------------------------------------------------------------------ pools and operator

    def sync_pools(self, pools: Iterable[PoolPolicy], now_ts: float) -> None:
        # One upsert: a new row starts undrained; an existing one takes only the policy's
        # columns, so the drain flag and its fields stay.
        rows = [
            {
                "name": p.name,
                "cloud": p.cloud,
                "regions": list(p.regions),
                "partition": p.partition,
                "team": p.team,
                "gpu_model": p.gpu_model or "",
                "capacity": p.capacity,
                "max_nodes": p.max_nodes,
                "updated_ts": now_ts,
                "drained": False,
                "drained_by": "",
            }
            for p in pools
        ]
        with self.transaction() as s:
            self._upsert(s, PoolRow, rows, update=_POOL_POLICY_COLUMNS)

    def pools(self) -> list[PoolInfo]:
        with self.reading() as s:
            return [_pool(r) for r in s.scalars(select(PoolRow).order_by(PoolRow.name))]

    def pool(self, name: str) -> PoolInfo | None:
        with self.reading() as s:
            row = s.get(PoolRow, name)
            return _pool(row) if row else None

    def set_pool_drained(
        self, name: str, drained: bool, now_ts: float, by: str = ""
    ) -> PoolInfo | None:
        with self.transaction() as s:
            row = s.get(PoolRow, name)
            if row is None:
                return None
            row.drained = drained
            row.drained_ts = now_ts if drained else None
            row.drained_by = by if drained else ""
            row.updated_ts = now_ts
            return _pool(row)

    def operator_state(self) -> OperatorState:
        with self.reading() as s:
            row = s.get(OperatorStateRow, 1)
            # No ORDER BY: the port promises no order of the drained pools.
            drained = tuple(s.scalars(select(PoolRow.name).where(PoolRow.drained.is_(True))))
            if row is None:
                return OperatorState(drained_pools=drained)
            return OperatorState(
                row.paused,
                row.reason,
                row.updated_ts,
                row.updated_by,
                drained,
                sweep_hold_reason=row.sweep_hold_reason or "",
                sweep_hold_ts=row.sweep_hold_ts,
                sweep_approved_ts=row.sweep_approved_ts,
                sweep_approved_by=row.sweep_approved_by or "",
            )

    def claim_controller_id(self, proposed: str) -> str:
        if not proposed:
            raise StoreError("claim_controller_id: an empty controller identity")
        with self.transaction() as s:
            row = self._operator_row(s)  # locked: a second claimant waits, then reads ours
            if not row.controller_id:
                row.controller_id = proposed
            return row.controller_id

    def set_paused(self, paused: bool, now_ts: float, by: str = "", reason: str = "") -> None:
        with self.transaction() as s:
            row = self._operator_row(s)
            row.paused = paused
            row.reason = reason[:500]
            row.updated_ts = now_ts
            row.updated_by = by

    def set_sweep_hold(self, reason: str, now_ts: float) -> None:
        with self.fenced_transaction() as s:
            row = self._operator_row(s)
            if reason and not row.sweep_hold_reason:
                row.sweep_hold_ts = now_ts
            if not reason:
                row.sweep_hold_ts = None
            row.sweep_hold_reason = reason[:500]

    def approve_sweep(self, now_ts: float, by: str) -> None:
        with self.transaction() as s:
            row = self._operator_row(s)
            row.sweep_approved_ts = now_ts
            row.sweep_approved_by = by

    def _operator_row(self, s: Session) -> OperatorStateRow:
        """The one operator-state row (id=1), created on first write (an insert that two
        writers at once cannot both make), then read locked for this transaction."""
        self._upsert(s, OperatorStateRow, [_OPERATOR_DEFAULTS])
        row = s.get(OperatorStateRow, 1, with_for_update=True)
        assert row is not None  # just inserted, or already there
        return row

    # ------------------------------------------------------------------ budgets

    def sync_budgets(self, budgets: Budgets, now_ts: float) -> None:
        # Upsert the declared ones, then delete the rest: a delete-all-then-insert collides
        # with a second controller doing the same at startup.
        rows: list[dict[str, object]] = []
        if budgets.global_usd_per_hour is not None:
            rows.append(
                {
                    "scope": "global",
                    "name": "*",
                    "monthly_usd": None,
                    "usd_per_hour": budgets.global_usd_per_hour,
                    "updated_ts": now_ts,
                }
            )
        for team, tb in budgets.teams.items():
            rows.append(
                {
                    "scope": "team",
                    "name": team,
                    "monthly_usd": tb.monthly_usd,
                    "usd_per_hour": None,
                    "updated_ts": now_ts,
                }
            )
        table = _table(BudgetRow)
        keys = [(str(r["scope"]), str(r["name"])) for r in rows]
        with self.transaction() as s:
            self._upsert(s, BudgetRow, rows, update=("monthly_usd", "usd_per_hour", "updated_ts"))
            stale = table.delete()
            if keys:
                stale = stale.where(tuple_(table.c.scope, table.c.name).not_in(keys))
            s.execute(stale)

    def budgets(self) -> list[BudgetRecord]:
        with self.reading() as s:
            q = select(BudgetRow).order_by(BudgetRow.scope, BudgetRow.name)
            return [
                BudgetRecord(r.scope, r.name, r.monthly_usd, r.usd_per_hour) for r in s.scalars(q)
            ]


# --------------------------------------------------------------------------- row <-> record


def _pool(r: PoolRow) -> PoolInfo:
    return PoolInfo(
        name=r.name,
        cloud=r.cloud,
        regions=tuple(r.regions or ()),
        partition=r.partition,
        team=r.team,
        gpu_model=r.gpu_model,
        capacity=r.capacity,
        max_nodes=r.max_nodes,
        drained=bool(r.drained),
        drained_ts=r.drained_ts,
        drained_by=r.drained_by,
    )


# The policy's columns of a pool row; the drain flag and its fields are the operator's.
_POOL_POLICY_COLUMNS = (
    "cloud",
    "regions",
    "partition",
    "team",
    "gpu_model",
    "capacity",
    "max_nodes",
    "updated_ts",
)
_OPERATOR_DEFAULTS = {
    "id": 1,
    "paused": False,
    "reason": "",
    "updated_ts": 0.0,
    "updated_by": "",
    "sweep_hold_reason": "",
    "sweep_approved_by": "",
    "controller_id": "",
}
