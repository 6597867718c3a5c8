"""Failover between two controllers on one PostgreSQL: kill -9 the leader mid scale-up (and
pause some leaders past their lease with SIGSTOP), and measure how long until the standby's
next acting pass, whether any intent got a second instance, and how many stale-token writes
the store refused.

    PROVISIONER_TEST_DATABASE_URL=... python bench/failover.py [--kills N] [--pauses M]
    make failover          # starts the private PostgreSQL cluster first

Each round: a fresh database and a reset moto server; controller A leads and dies (SIGKILL)
at a step of its scale-up, alternating between just after the intent and just after the
cloud call; B stands by, takes the lease, settles A's half-done intent and runs the burst to
its end. Failover is the lease's own record: B's acquired_ts (the database's clock) minus
the wall time A wrote just before it killed itself, on the same host's clock. A pause round
stops A at the intent, waits for B to take over, then lets A run again: what A then tries is
refused by fencing. Duplicates: instances moto ever ran beyond the one the job needs.

The bound to meet: failover_max_s <= lease TTL + one tick. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "reconcile"), str(REPO)]

from ha_world import TICK_S, TTL_S, World, cycle_done, leads, wait_for  # noqa: E402
from reconcile_world import CONTROLLER, ever_launched, start_clock  # noqa: E402

from provisioner.reconcile.loop import (  # noqa: E402
    STEP_SCALE_UP_AFTER_CLOUD,
    STEP_SCALE_UP_AFTER_INTENT,
)
from provisioner.store import Store  # noqa: E402
from provisioner.testing.moto_faults import FaultyMotoServer  # noqa: E402
from tests.databases import PG_URL, Databases  # noqa: E402


def one_round(dbs: Databases, moto: FaultyMotoServer, folder: Path, step: str, pause: bool) -> dict:
    moto.reset()
    url = dbs.new_url()
    store = Store(url)
    w = World(url, moto.endpoint, folder, start_clock().now().timestamp())
    moto.use_clock(w.clock().now)  # the stand-in cloud on the world's clock, as the children
    try:
        a = w.start("ctl-a", go=False, **({"pause_at": step} if pause else {"kill_at": step}))
        b = w.start("ctl-b", go=False)
        w.leader_and_standby(a, b, lambda: leads(store, "ctl-a"))
        if pause:
            wait_for("A to stop", a.stopped_by_signal)
            down_at = a.status()["paused_at"]
        else:
            wait_for("A to die", lambda: a.proc.poll() is not None)
            down_at = a.status()["killed_at"]
        taken = wait_for("B to take over", lambda: leads(store, "ctl-b"), 30)
        refused = 0
        if pause:
            wait_for("B's own instance", lambda: store.instances(), 30)
            before = store.lease(CONTROLLER).refused  # type: ignore[union-attr]
            a.proc.send_signal(signal.SIGCONT)
            wait_for("A to stand by", lambda: a.status().get("role") == "standby", 30)
            refused = store.lease(CONTROLLER).refused - before  # type: ignore[union-attr]
        wait_for("B to finish the burst", lambda: cycle_done(store), 120)
        launched = ever_launched(moto.endpoint)
        return {
            "step": step,
            "pause": pause,
            "failover_s": round(taken.acquired_ts - down_at, 3),
            "duplicates": max(0, len(launched) - 1),
            "refused": refused,
        }
    finally:
        w.stop_all()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10, help="leader kills (default 10)")
    ap.add_argument("--pauses", type=int, default=3, help="leaders paused (default 3)")
    args = ap.parse_args()
    if not PG_URL:
        sys.exit("bench/failover.py needs PROVISIONER_TEST_DATABASE_URL (make failover)")
    steps = (STEP_SCALE_UP_AFTER_INTENT, STEP_SCALE_UP_AFTER_CLOUD)
    t0 = time.monotonic()
    moto = FaultyMotoServer().start()
    dbs = Databases("postgresql", Path(tempfile.mkdtemp(prefix="failover-")))
    rounds: list[dict] = []
    try:
        plan = [(steps[i % 2], False) for i in range(args.kills)]
        plan += [(STEP_SCALE_UP_AFTER_INTENT, True)] * args.pauses
        for i, (step, pause) in enumerate(plan):
            with tempfile.TemporaryDirectory(prefix="failover-round-") as tmp:
                r = one_round(dbs, moto, Path(tmp), step, pause)
            rounds.append(r)
            what = "pause" if pause else "kill"
            print(
                f"round {i + 1:2d} {what:5s} at {step:24s} failover {r['failover_s']:.2f}s "
                f"duplicates {r['duplicates']} refused {r['refused']}",
                flush=True,
            )
    finally:
        dbs.close()
        moto.stop()
    kills = [r["failover_s"] for r in rounds if not r["pause"]]
    out = {
        "kills": len(kills),
        "pauses": args.pauses,
        "lease_ttl_s": TTL_S,
        "tick_s": TICK_S,
        "bound_s": TTL_S + TICK_S,
        "failover_p50_s": round(statistics.median(kills), 3) if kills else None,
        "failover_max_s": round(max(kills), 3) if kills else None,
        "paused_failover_max_s": max((r["failover_s"] for r in rounds if r["pause"]), default=None),
        "duplicates": sum(r["duplicates"] for r in rounds),
        "fenced_writes_refused": sum(r["refused"] for r in rounds),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
