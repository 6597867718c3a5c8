"""The console's ledger page (the rows behind a figure) on a large ledger: the store filtering
and summing (`Ledger.ledger_page`) against reading the window's rows into Python and
filtering there (what the page did first), in one run on one SQLite file.

    .venv/bin/python bench/ledger_page.py [--rows 300000]

The last line is one JSON object: seconds of each way for one team's month, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from provisioner.domain.records import LedgerEntry, LedgerKind
from provisioner.ports.store import EXPORT_COLUMNS, LedgerFilter
from provisioner.store import Store

T0 = 1_798_761_600.0  # 2027-01-01 UTC
DAY = 86_400.0
TEAMS = ("vision", "nlp", "speech")


def fill(store: Store, n: int) -> None:
    rng = random.Random(7)
    batch: list[LedgerEntry] = []
    for i in range(n):
        start = T0 + (i / n) * 30 * DAY
        batch.append(
            LedgerEntry(
                start_ts=start,
                end_ts=min(start + 30.0, (start // DAY + 1) * DAY),
                kind=rng.choice((LedgerKind.JOB, LedgerKind.IDLE)),
                cost=Decimal(rng.randint(1, 9_999)).scaleb(-6),
                cloud="aws",
                region="us-east-1",
                pool="aws-a100",
                instance_id=f"i-{rng.randint(0, 999)}",
                node_name=f"n-{rng.randint(0, 99)}",
                team=rng.choice(TEAMS),
                unit="GPU-Hours",
                quantity=0.01,
            )
        )
        if len(batch) == 5000:
            store.add_ledger(batch)
            batch = []
    if batch:
        store.add_ledger(batch)


def python_scan(store: Store, team: str) -> tuple[int, int]:
    at_team, at_cost = EXPORT_COLUMNS.index("team"), EXPORT_COLUMNS.index("cost_micros")
    count = micros = 0
    for chunk in store.ledger_export(T0, T0 + 31 * DAY):
        for row in chunk:
            if row[at_team] == team:
                count += 1
                micros += int(row[at_cost])
    return count, micros


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'ledger.sqlite'}")
        fill(store, args.rows)
        t = time.perf_counter()
        want = python_scan(store, "vision")
        scan_s = time.perf_counter() - t
        t = time.perf_counter()
        page = store.ledger_page(LedgerFilter(T0, T0 + 31 * DAY, (("team", "vision"),)), 0, 51)
        page_s = time.perf_counter() - t
        assert (page.count, page.cost_micros) == want, "the two ways disagree"
        store.close()
    print(
        json.dumps(
            {
                "rows": args.rows,
                "matching_rows": want[0],
                "python_scan_s": round(scan_s, 3),
                "ledger_page_s": round(page_s, 3),
                "speedup": round(scan_s / page_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
