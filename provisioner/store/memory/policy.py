"""`PolicyRepo` in memory: pools by name, the operator's switches and budgets by (scope, name)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from decimal import Decimal

from provisioner.config.models import Budgets, PoolPolicy
from provisioner.domain.records import BudgetRecord, OperatorState, PoolInfo
from provisioner.ports.store import PolicyRepo, StoreError

# The SQL store keeps an operator's reason to this many characters.
REASON_CHARS = 500


class MemoryPolicyRepo(PolicyRepo):
    """`PolicyRepo` over dicts.

    Differences from SQL: the drained pools of `operator_state` come by name (the SQL store
    leaves their order to the engine). No fence: `set_sweep_hold` is never `FencedOut`. Lengths
    are not checked (PostgreSQL refuses a value longer than its column) except the cut the SQL
    store makes itself (reasons to 500 characters)."""

    def __init__(self) -> None:
        self._pools: dict[str, PoolInfo] = {}
        self._operator = OperatorState()  # its drained_pools are read from the pools
        self._budgets: dict[tuple[str, str], BudgetRecord] = {}
        self._controller_id = ""

    # ------------------------------------------------------------------ pools and operator

    def sync_pools(self, pools: Iterable[PoolPolicy], now_ts: float) -> None:
        staged = dict(self._pools)
        for p in pools:
            old = staged.get(p.name)
            staged[p.name] = PoolInfo(
                name=p.name,
                cloud=p.cloud,
                regions=tuple(p.regions),
                partition=p.partition,
                team=p.team,
                gpu_model=p.gpu_model or "",
                capacity=p.capacity,
                max_nodes=p.max_nodes,
                # the operator's drain flag stays
                drained=old.drained if old is not None else False,
                drained_ts=old.drained_ts if old is not None else None,
                drained_by=old.drained_by if old is not None else "",
            )
        self._pools = staged

    def pools(self) -> list[PoolInfo]:
        return [self._pools[name] for name in sorted(self._pools)]

    def pool(self, name: str) -> PoolInfo | None:
        return self._pools.get(name)

    def set_pool_drained(
        self, name: str, drained: bool, now_ts: float, by: str = ""
    ) -> PoolInfo | None:
        old = self._pools.get(name)
        if old is None:
            return None
        new = self._pools[name] = replace(
            old,
            drained=drained,
            drained_ts=now_ts if drained else None,
            drained_by=by if drained else "",
        )
        return new

    def operator_state(self) -> OperatorState:
        drained = tuple(name for name in sorted(self._pools) if self._pools[name].drained)
        return replace(self._operator, drained_pools=drained)

    def claim_controller_id(self, proposed: str) -> str:
        if not proposed:
            raise StoreError("claim_controller_id: an empty controller identity")
        if not self._controller_id:
            self._controller_id = proposed
        return self._controller_id

    def set_paused(self, paused: bool, now_ts: float, by: str = "", reason: str = "") -> None:
        self._operator = replace(
            self._operator,
            paused=paused,
            reason=reason[:REASON_CHARS],
            updated_ts=now_ts,
            updated_by=by,
        )

    def set_sweep_hold(self, reason: str, now_ts: float) -> None:
        op = self._operator
        since = op.sweep_hold_ts
        if reason and not op.sweep_hold_reason:
            since = now_ts  # a hold starts
        if not reason:
            since = None  # released
        self._operator = replace(op, sweep_hold_reason=reason[:REASON_CHARS], sweep_hold_ts=since)

    def approve_sweep(self, now_ts: float, by: str) -> None:
        self._operator = replace(self._operator, sweep_approved_ts=now_ts, sweep_approved_by=by)

    # ------------------------------------------------------------------ budgets

    def sync_budgets(self, budgets: Budgets, now_ts: float) -> None:
        rows: dict[tuple[str, str], BudgetRecord] = {}
        if budgets.global_usd_per_hour is not None:
            rows["global", "*"] = BudgetRecord(
                "global", "*", None, Decimal(budgets.global_usd_per_hour)
            )
        for team, tb in budgets.teams.items():
            rows["team", team] = BudgetRecord("team", team, Decimal(tb.monthly_usd), None)
        self._budgets = rows

    def budgets(self) -> list[BudgetRecord]:
        return [self._budgets[key] for key in sorted(self._budgets)]
