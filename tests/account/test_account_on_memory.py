"""account/ computes on records through the store's narrow Protocols: the cost report and the
FOCUS export run on the in-memory Ledger as they do on the SQL store, with the same answers."""

from __future__ import annotations

from decimal import Decimal

from provisioner.account.focus import iter_focus_csv
from provisioner.account.reports import cost_report
from provisioner.domain.records import LedgerEntry, LedgerKind
from provisioner.store import Store
from provisioner.store.memory import MemoryLedger

DAY = 86_400.0
T0 = 1_800_000_000.0 - (1_800_000_000.0 % DAY)  # a UTC midnight


def entries() -> list[LedgerEntry]:
    def e(start: float, kind: LedgerKind, cost: str, team: str, cloud: str = "aws") -> LedgerEntry:
        return LedgerEntry(
            start_ts=start,
            end_ts=start + 1800,
            kind=kind,
            cost=Decimal(cost),
            cloud=cloud,
            region="us-east-1" if cloud else "",
            team=team,
            pool="aws-a100" if cloud else "onprem",
            node_name="cloud-aws-1" if cloud else "onprem-1",
        )

    return [
        e(T0 + 3600, LedgerKind.JOB, "12.50", "vision"),
        e(T0 + 7200, LedgerKind.IDLE, "2.25", "vision"),
        e(T0 + DAY + 60, LedgerKind.JOB, "7.125", "nlp"),
        e(T0 + DAY + 3600, LedgerKind.ONPREM, "1.00", "nlp", cloud=""),
    ]


def test_the_cost_report_is_the_same_on_memory_and_sql(tmp_path) -> None:
    mem = MemoryLedger()
    mem.add_ledger(entries())
    sql = Store(f"sqlite:///{tmp_path / 's.sqlite'}")
    try:
        sql.add_ledger(entries())
        # Two whole days plus a partial third: rollups and edge rows on the SQL side.
        window = (T0, T0 + 2.5 * DAY)
        got = cost_report(mem, ["team"], *window)
        assert got == cost_report(sql, ["team"], *window)
        # By hand: vision 12.50 + 2.25; nlp 7.125 + 1.00.
        totals = {r.key: (r.cost, r.rows) for r in got.rows}
        assert totals == {("nlp",): (Decimal("8.125"), 2), ("vision",): (Decimal("14.75"), 2)}
        cloud_only = cost_report(mem, ["team"], *window, kinds=["job", "idle"])
        assert {r.key: r.cost for r in cloud_only.rows} == {
            ("nlp",): Decimal("7.125"),
            ("vision",): Decimal("14.75"),
        }
        assert "".join(iter_focus_csv(mem)) == "".join(iter_focus_csv(sql))
    finally:
        sql.close()
