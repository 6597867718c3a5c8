"""Cost reports and the FOCUS export over 1,000,000 ledger rows in SQLite, through the API.

1. Writes 1,000,000 ledger rows (a month, 8 teams, 24 accounts, 120 users, 7 pools) with the
   store's own write path (`Store.add_ledger`, which maintains the rollups too), day by day
   in time order, as the accountant writes them.
2. Starts the API (uvicorn, its own process) on the file and times N cost-report requests over
   HTTP: whole-month and partial-day windows, grouped by team/day, account/user, cloud/region/
   pool, partition/kind, and JSON and CSV. Target: p95 < 150 ms.
3. Streams `/v1/focus.csv` of all rows through the API and reads the server's peak RSS
   (VmHWM) before and after: flat memory means the delta does not grow with the row count.
   In-process, tracemalloc's peak for exports of 50,000 and 250,000 rows says the same.

Prints the figures; the last line is one JSON object.

    python bench/report_api.py [--rows 1000000] [--requests 200] [--db PATH] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from decimal import Decimal
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from provisioner.account.focus import iter_focus_csv  # noqa: E402
from provisioner.api.auth import Role, create_token  # noqa: E402
from provisioner.domain.records import LedgerEntry  # noqa: E402
from provisioner.store import Store  # noqa: E402
from provisioner.store.models import LedgerRow, RollupRow  # noqa: E402

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86_400.0
DAYS = 31
TARGET_P95_MS = 150.0

TEAMS = [f"team-{i}" for i in range(8)]
ACCOUNTS = [(f"acct-{t[-1]}{j}", t) for t in TEAMS for j in range(3)]
USERS = [(f"user-{a}-{k}", a, t) for a, t in ACCOUNTS for k in range(5)]
POOLS = [
    ("aws", "us-east-1", "aws-a100-east", "p4d.24xlarge", "on-demand", Decimal("32.7726")),
    ("aws", "us-east-1", "aws-a100-spot", "p4d.24xlarge", "spot", Decimal("9.8318")),
    ("aws", "us-west-2", "aws-h100-west", "p5.48xlarge", "on-demand", Decimal("98.32")),
    ("gcp", "us-central1", "gcp-a100", "a2-highgpu-8g", "on-demand", Decimal("29.3876")),
    ("gcp", "europe-west4", "gcp-a100-eu", "a2-highgpu-8g", "spot", Decimal("8.816")),
    ("gcp", "us-east4", "gcp-h100", "a3-highgpu-8g", "on-demand", Decimal("88.25")),
    ("", "", "onprem", "", "", Decimal("1.20")),
]
PARTITIONS = ["cloud", "cloud-spot", "onprem", "inference"]


def make_rows(n: int, day: int, seed: int) -> list[LedgerEntry]:
    """`n` rows starting on day `day` of the month, in time order (as the accountant writes)."""
    rng = random.Random(seed)
    out: list[LedgerEntry] = []
    day0 = T0 + day * DAY
    starts = sorted(day0 + rng.random() * DAY for _ in range(n))
    for i, start in enumerate(starts):
        end = min(start + rng.uniform(30, 3600), day0 + DAY)
        cloud, region, pool, itype, cap, price = rng.choice(POOLS)
        user, account, team = rng.choice(USERS)
        if cloud:
            kind = "job" if rng.random() < 0.8 else "idle"
        else:
            kind = "onprem" if rng.random() < 0.9 else "energy"
        gpus = rng.choice((1, 2, 4, 8))
        secs = end - start
        unit_price = price / (8 if cloud else 1)
        cost = (unit_price * gpus * Decimal(repr(secs)) / 3600).quantize(Decimal("0.000001"))
        idle = kind == "idle"
        seq = seed * 1_000_000 + i
        out.append(
            LedgerEntry(
                start_ts=start,
                end_ts=end,
                kind=kind,
                cost=cost,
                cloud=cloud,
                region=region,
                pool=pool,
                instance_id=f"i-{pool}-{seq % 997}" if cloud else "",
                node_name=f"node-{seq % 211}",
                offer=f"{cloud}/{region}/{itype}/{cap}" if cloud else "",
                instance_type=itype,
                capacity=cap,
                job_id="" if idle else str(seq),
                team=team,
                account="" if idle else account,
                user="" if idle else user,
                partition="" if idle else rng.choice(PARTITIONS),
                decision_id=f"d-{seq % 5003:016x}" if cloud else "",
                gpus=gpus,
                quantity=gpus * secs / 3600,
                unit="GPU-Hours",
                unit_price=unit_price,
            )
        )
    return out


def populate(store: Store, n: int, batch: int = 20_000) -> float:
    """Write `n` rows spread over the month, day by day, in batches."""
    t = time.perf_counter()
    written = 0
    for day in range(DAYS):
        todo = n * (day + 1) // DAYS - written
        rows = make_rows(todo, day, seed=day + 1)
        for i in range(0, len(rows), batch):
            store.add_ledger(rows[i : i + batch])
        written += todo
        if day % 5 == 4:
            print(f"  {written:,} rows written", flush=True)
    return time.perf_counter() - t


def count_rows(store: Store, model: type) -> int:
    with store.reading() as s:
        return int(s.execute(select(func.count()).select_from(model)).scalar_one())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


SERVER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    import uvicorn
    sys.path.insert(0, {repo!r})
    from provisioner.api.app import ApiDeps, create_app
    from provisioner.clock import ManualClock
    from provisioner.store import Store
    store = Store({url!r})
    clock = ManualClock(datetime(2026, 2, 1, tzinfo=UTC))
    app = create_app(ApiDeps(store=store, clock=clock))
    uvicorn.run(app, host="127.0.0.1", port={port}, log_level="warning", access_log=False)
    """
)


def start_server(url: str, port: int) -> subprocess.Popen[bytes]:
    code = SERVER.format(repo=str(REPO), url=url, port=port)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the API server did not start")


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


QUERIES = [
    # (label, query string)
    ("month team,day", "group_by=team,day&from=2026-01-01&to=2026-02-01"),
    ("month account,user", "group_by=account,user&from=2026-01-01&to=2026-02-01"),
    ("month cloud,region,pool", "group_by=cloud,region,pool&from=2026-01-01&to=2026-02-01"),
    (
        "month partition,kind csv",
        "group_by=partition,kind&from=2026-01-01&to=2026-02-01&format=csv",
    ),
    ("month total", "from=2026-01-01&to=2026-02-01"),
    ("month user,pool (grain 0)", "group_by=user,pool&from=2026-01-01&to=2026-02-01"),
    ("week team,pool", "group_by=team,pool&from=2026-01-05&to=2026-01-12"),
    (
        "partial days team,day",
        "group_by=team,day&from=2026-01-03T06:00:00Z&to=2026-01-28T18:00:00Z",
    ),
    (
        "partial days user csv",
        "group_by=user&from=2026-01-10T13:30:00Z&to=2026-01-20T02:15:00Z&format=csv",
    ),
    ("six hours team,kind", "group_by=team,kind&from=2026-01-15T06:00:00Z&to=2026-01-15T12:00:00Z"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--db", type=Path, default=None, help="reuse/keep this SQLite file")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench-report-")
    db = args.db or Path(tmp) / "ledger.sqlite"
    url = f"sqlite:///{db}"
    store = Store(url)
    have_rows = count_rows(store, LedgerRow)
    if have_rows != args.rows:
        if have_rows:
            raise SystemExit(f"{db} holds {have_rows} rows, not {args.rows}; use another --db")
        print(f"writing {args.rows:,} ledger rows to {db} ...", flush=True)
        write_s = populate(store, args.rows)
        print(f"  done in {write_s:.1f} s ({args.rows / write_s:,.0f} rows/s)")
    else:
        write_s = 0.0
        print(f"reusing {db} ({have_rows:,} rows)")
    token = create_token(store, Role.VIEWER, "bench", T0)
    db_mb = db.stat().st_size / 2**20
    day_rows = count_rows(store, RollupRow)
    print(f"database: {db_mb:.0f} MiB, rollup rows (all grains): {day_rows:,}")

    # In-process: tracemalloc peak of the export generator at two sizes.
    tm: dict[str, float] = {}
    for n in (50_000, 250_000):
        tracemalloc.start()
        rows_seen = 0
        for chunk in islice(iter_focus_csv(store), 1 + n // 2000):
            rows_seen += chunk.count("\n")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        tm[str(n)] = round(peak / 2**20, 2)
        print(f"tracemalloc peak, export of {rows_seen - 1:,} rows: {peak / 2**20:.2f} MiB")
    store.close()

    port = free_port()
    server = start_server(url, port)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as c:
            for _, q in QUERIES:  # warm up: page cache, connection pool
                c.get(f"/v1/costs?{q}").raise_for_status()
            lat: dict[str, list[float]] = {label: [] for label, _ in QUERIES}
            all_ms: list[float] = []
            for i in range(args.requests):
                label, q = QUERIES[i % len(QUERIES)]
                t = time.perf_counter()
                r = c.get(f"/v1/costs?{q}")
                ms = (time.perf_counter() - t) * 1000
                r.raise_for_status()
                lat[label].append(ms)
                all_ms.append(ms)
            p50, p95, p99 = (pct(all_ms, p) for p in (50, 95, 99))
            print(f"cost reports over HTTP, {len(all_ms)} requests:")
            for label, v in lat.items():
                print(f"  {label:28s} median {statistics.median(v):7.1f} ms  max {max(v):7.1f} ms")
            print(
                f"  all: p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms "
                f"(target p95 < {TARGET_P95_MS:.0f} ms)"
            )

            hwm0 = vm_kib(server.pid, "VmHWM")
            rss0 = vm_kib(server.pid, "VmRSS")
            t = time.perf_counter()
            nbytes = 0
            nlines = 0
            with c.stream("GET", "/v1/focus.csv") as r:
                r.raise_for_status()
                for part in r.iter_bytes():
                    nbytes += len(part)
                    nlines += part.count(b"\n")
            export_s = time.perf_counter() - t
            hwm1 = vm_kib(server.pid, "VmHWM")
            rows_out = nlines - 1
            print(
                f"FOCUS export over HTTP: {rows_out:,} rows, {nbytes / 2**20:.0f} MiB in "
                f"{export_s:.1f} s ({rows_out / export_s:,.0f} rows/s)"
            )
            print(
                f"  server RSS before {rss0 / 1024:.0f} MiB; peak RSS before {hwm0 / 1024:.0f} "
                f"MiB, after {hwm1 / 1024:.0f} MiB: delta {(hwm1 - hwm0) / 1024:.1f} MiB"
            )
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        if not args.keep and args.db is None:
            for suffix in ("", "-wal", "-shm"):
                Path(str(db) + suffix).unlink(missing_ok=True)
            os.rmdir(tmp)

    ok = p95 < TARGET_P95_MS and rows_out == args.rows
    print(
        json.dumps(
            {
                "bench": "report_api",
                "ledger_rows": args.rows,
                "write_s": round(write_s, 1),
                "db_mib": round(db_mb),
                "rollup_rows": day_rows,
                "requests": len(all_ms),
                "report_p50_ms": round(p50, 1),
                "report_p95_ms": round(p95, 1),
                "report_p99_ms": round(p99, 1),
                "target_p95_ms": TARGET_P95_MS,
                "focus_rows": rows_out,
                "focus_mib": round(nbytes / 2**20),
                "focus_s": round(export_s, 1),
                "focus_server_peak_rss_delta_mib": round((hwm1 - hwm0) / 1024, 1),
                "focus_tracemalloc_peak_mib": tm,
                "ok": ok,
            }
        )
    )


if __name__ == "__main__":
    main()
