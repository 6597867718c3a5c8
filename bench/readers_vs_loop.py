"""Issue 30 item 4: heavy readers must not slow the reconcile loop.

A controller in this process (the demo's fake on-prem Slurm, 4 nodes of 8 A100s, an injected
clock) with its API served over HTTP on 127.0.0.1 from a thread, as `provisioner run` serves
it, on a SQLite store holding a month of ledger rows (written by bench/report_api.py's
generator, through the store's own write path). Passes run back to back and are timed:

1. idle: no reader;
2. `in-thread` (the peer: how every export ran before issue 30): 8 readers, each with its own
   token, pull `/v1/focus.csv` over and over; the export runs in the API's thread, no limits;
3. `process` (as shipped): the same 8 readers; each export runs in a niced child process with
   its own connection, at most 2 at once, 6 a minute per token. A reader told 429 waits the
   Retry-After it was given, as a well-behaved client does.

The bar: the median pass with readers stays within 1.5x of idle, and readers still get their
exports (throughput reported beside it: a limit that starves readers does not count).

    .venv/bin/python bench/readers_vs_loop.py [--rows 100000] [--seconds 40]

Prints the figures; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
from report_api import populate  # noqa: E402

from provisioner.api.app import create_app  # noqa: E402
from provisioner.api.auth import Role, create_token  # noqa: E402
from provisioner.api.heavy_reads import HeavyReads  # noqa: E402
from provisioner.api.rate_limits import ApiRateLimiter, RateLimits  # noqa: E402
from provisioner.bootstrap import ApiServer, SlurmParts, build_controller, load_settings  # noqa: E402
from provisioner.clock import ManualClock  # noqa: E402
from provisioner.config.loader import policy_from_mapping  # noqa: E402
from provisioner.demo.fake_slurm import FakeSlurm  # noqa: E402
from provisioner.store import Store  # noqa: E402
from provisioner.store.read_only import open_read_only  # noqa: E402

T0 = 1_769_904_000.0  # 2026-02-01T00:00:00Z, after the ledger's month
TICK = 15.0
READERS = 8


class Readers:
    """8 threads pulling the export until stopped; each honours Retry-After."""

    def __init__(self, base: str, tokens: list[str]) -> None:
        self.base, self.tokens = base, tokens
        self.stop = threading.Event()
        self.exports = 0
        self.refused = 0
        self.bytes = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(t,)) for t in tokens]

    def run(self, token: str) -> None:
        with httpx.Client(base_url=self.base, timeout=600) as c:
            while not self.stop.is_set():
                with c.stream(
                    "GET", "/v1/focus.csv", headers={"Authorization": f"Bearer {token}"}
                ) as r:
                    if r.status_code == 429:
                        with self.lock:
                            self.refused += 1
                        self.stop.wait(float(r.headers.get("retry-after", "1")))
                        continue
                    assert r.status_code == 200, r.status_code
                    n = sum(len(b) for b in r.iter_bytes())
                with self.lock:
                    self.exports += 1
                    self.bytes += n

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def passes_for(ctl: Any, clock: ManualClock, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        clock.advance(TICK)
        t0 = time.perf_counter()
        ctl.reconciler.run_pass()
        out.append(time.perf_counter() - t0)
    return out


def serve(ctl: Any, heavy: HeavyReads, limiter: ApiRateLimiter) -> tuple[ApiServer, str]:
    deps = replace(ctl.app.state.deps, heavy_reads=heavy, rate_limiter=limiter)
    api = ApiServer(create_app(deps), "127.0.0.1", 0)
    port = api.start(timeout_s=60)
    return api, f"http://127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=40.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="readers-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ctl.sqlite'}"
        store = Store(url)
        print(f"writing {args.rows:,} ledger rows ...", flush=True)
        populate(store, args.rows)
        clock = ManualClock(datetime.fromtimestamp(T0, UTC))
        fake = FakeSlurm(clock, onprem_nodes=4, gpus_per_node=8)
        for i in range(40):
            fake.submit(1 + i % 4, 4 * 3600.0, account=f"team{i % 4}")
        ctl = build_controller(
            load_settings(store_url=url, slurm_mode="none", api_port=0, tick_s=TICK),
            clock=clock,
            store=store,
            policy=policy_from_mapping({"controller": "burst-readers"}, "bench"),
            slurm=SlurmParts(observer=fake, node_control=fake, job_control=fake),
            clouds={},
        )
        tokens = [create_token(store, Role.VIEWER, f"reader-{i}", T0) for i in range(READERS)]
        passes_for(ctl, clock, 3.0)  # warm up
        idle = passes_for(ctl, clock, args.seconds / 2)
        unlimited = ApiRateLimiter(RateLimits(10**6, 10**6))
        modes = {
            "in-thread": (HeavyReads(), unlimited),
            "process": (HeavyReads(read_url=url, open_store=open_read_only), ApiRateLimiter()),
        }
        out: dict[str, Any] = {"rows": args.rows, "idle_pass_s": round(statistics.median(idle), 4)}
        for name, (heavy, limiter) in modes.items():
            api, base = serve(ctl, heavy, limiter)
            try:
                with Readers(base, tokens) as readers:
                    t0 = time.monotonic()
                    busy = passes_for(ctl, clock, args.seconds)
                    took = time.monotonic() - t0
            finally:
                api.stop()
            med = statistics.median(busy)
            out[name] = {
                "pass_s": round(med, 4),
                "pass_ratio": round(med / out["idle_pass_s"], 2),
                "passes": len(busy),
                "exports_per_min": round(readers.exports * 60 / took, 1),
                "mb_per_s": round(readers.bytes / took / 1e6, 2),
                "refused_429": readers.refused,
            }
            r = out[name]
            print(
                f"{name:10s} pass {r['pass_s']} s ({r['pass_ratio']}x idle), readers "
                f"{r['exports_per_min']} exports/min ({r['mb_per_s']} MB/s), "
                f"{r['refused_429']} told to wait",
                flush=True,
            )
        ctl_ratio = out["process"]["pass_ratio"]
        out["target"] = {"max_ratio": 1.5, "met": ctl_ratio <= 1.5}
        store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
