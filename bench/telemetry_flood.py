"""Issue 30 item 3: telemetry for made-up nodes and phantom GPUs must cost nothing.

Two controllers side by side, each in this process with its API served over HTTP on 127.0.0.1
(uvicorn in a thread, as `provisioner run` serves it), the demo's fake on-prem Slurm (4 nodes of
8 A100s), a SQLite store and an injected clock; a genuine agent pushes for each on-prem node
before every pass:

- `guarded`: the API as shipped, holding samples to the hardware Slurm knows;
- `unguarded` (the peer): the same API built without a Slurm view (`ApiDeps.snapshot` None),
  which checks only the policy's bounds, as every API did before issue 30.

For each: the median of one pass, `GET /metrics` and the console's GPUs page on a clean store;
then the probe's flood (400 operator posts for made-up nodes with long names, 64 GPUs each, and
16 agent posts of 64 phantom GPUs for one real node); then the same medians again. The bar:
after the flood, the guarded controller stays within 2x of its clean figures.

    .venv/bin/python bench/telemetry_flood.py [--repeat 15]

Prints the figures; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from provisioner.api.app import create_app  # noqa: E402
from provisioner.api.auth import Role, create_token  # noqa: E402
from provisioner.bootstrap import ApiServer, SlurmParts, build_controller, load_settings  # noqa: E402
from provisioner.clock import ManualClock  # noqa: E402
from provisioner.config.loader import policy_from_mapping  # noqa: E402
from provisioner.demo.fake_slurm import FakeSlurm  # noqa: E402
from provisioner.store import Store  # noqa: E402

T0 = 1_768_046_400.0  # 2026-01-10T12:00:00Z
TICK = 15.0
NODES = 4


class World:
    def __init__(self, folder: Path, guarded: bool) -> None:
        url = f"sqlite:///{folder / ('guarded' if guarded else 'unguarded')}.sqlite"
        self.clock = ManualClock(datetime.fromtimestamp(T0, UTC))
        fake = FakeSlurm(self.clock, onprem_nodes=NODES, gpus_per_node=8)
        policy = policy_from_mapping(
            {"controller": "burst-flood", "onprem": {"energy_usd_per_kwh": "0.20"}}, "bench"
        )
        self.store = Store(url)
        self.ctl = build_controller(
            load_settings(store_url=url, slurm_mode="none", api_port=0, tick_s=TICK),
            clock=self.clock,
            store=self.store,
            policy=policy,
            slurm=SlurmParts(observer=fake, node_control=fake, job_control=fake),
            clouds={},
        )
        app = (
            self.ctl.app if guarded else create_app(replace(self.ctl.app.state.deps, snapshot=None))
        )
        self.tokens = {
            "viewer": create_token(self.store, Role.VIEWER, "viewer", T0),
            "operator": create_token(self.store, Role.OPERATOR, "probe", T0),
            "agent": create_token(self.store, Role.AGENT, "nvml@onprem-1", T0, node="onprem-1"),
        }
        self.api = ApiServer(app, "127.0.0.1", 0)
        port = self.api.start(timeout_s=60)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        self.console = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        r = self.console.post("/login", data={"token": self.tokens["viewer"]})
        assert r.status_code in (200, 303), r.status_code
        self.counter = 0
        self.ctl.reconciler.run_pass()

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def genuine(self) -> None:
        ts = self.clock.now().timestamp()
        self.counter += int(300 * 1000 * TICK)
        for n in range(1, NODES + 1):
            body = {
                "node": f"onprem-{n}",
                "sampled_ts": ts,
                "gpus": [
                    {
                        "index": i,
                        "uuid": f"GPU-{n}-{i}",
                        "util_pct": 40.0,
                        "power_w": 300.0,
                        "energy_mj": self.counter,
                    }
                    for i in range(8)
                ],
            }
            r = self.http.post("/v1/telemetry", json=body, headers=self.h("operator"))
            assert r.status_code == 202, r.text

    def one_pass(self) -> float:
        self.clock.advance(TICK)
        self.genuine()
        t0 = time.perf_counter()
        self.ctl.reconciler.run_pass()
        return time.perf_counter() - t0

    def timed_get(self, client: httpx.Client, path: str, **kw: Any) -> float:
        t0 = time.perf_counter()
        r = client.get(path, **kw)
        took = time.perf_counter() - t0
        assert r.status_code == 200, (path, r.status_code)
        return took

    def measure(self, repeat: int) -> dict[str, float]:
        passes = [self.one_pass() for _ in range(repeat)]
        metrics = [self.timed_get(self.http, "/metrics", headers=self.h("viewer"))
                   for _ in range(repeat)]  # fmt: skip
        page = [self.timed_get(self.console, "/gpus") for _ in range(repeat)]
        return {
            "pass_s": round(statistics.median(passes), 4),
            "metrics_s": round(statistics.median(metrics), 4),
            "gpus_page_s": round(statistics.median(page), 4),
        }

    def flood(self) -> dict[str, Any]:
        ts = self.clock.now().timestamp()
        accepted = 0
        t0 = time.perf_counter()
        for i in range(400):
            body = {
                "node": f"made-up-{i:03d}-" + "n" * 100,
                "hostname": "h" * 255,
                "sampled_ts": ts,
                "gpus": [{"index": g, "uuid": "u" * 128, "name": "x" * 128} for g in range(64)],
            }
            r = self.http.post("/v1/telemetry", json=body, headers=self.h("operator"))
            accepted += r.status_code == 202
        for k in range(16):
            gpus = [{"index": i, "uuid": f"GPU-ph-{i}", "util_pct": 0.0, "power_w": 4999.0}
                    for i in range(8 + 63 * k, min(8 + 63 * (k + 1) + 1, 1024))]  # fmt: skip
            body = {"node": "onprem-1", "sampled_ts": ts, "gpus": gpus}
            r = self.http.post("/v1/telemetry", json=body, headers=self.h("agent"))
            accepted += r.status_code == 202
        return {"posts": 416, "accepted": accepted, "send_s": round(time.perf_counter() - t0, 2)}

    def close(self) -> None:
        self.http.close()
        self.console.close()
        self.api.stop()
        self.store.close()


def run(guarded: bool, repeat: int, folder: Path) -> dict[str, Any]:
    w = World(folder, guarded)
    try:
        for _ in range(3):
            w.one_pass()  # warm up: energy baselines set, first windows billed
        clean = w.measure(repeat)
        flood = w.flood()
        after = w.measure(repeat)
        nodes = len(w.store.telemetry())
    finally:
        w.close()
    ratios = {k: round(after[k] / clean[k], 2) for k in clean}
    return {"clean": clean, "flood": flood, "after": after, "ratio": ratios,
            "nodes_stored": nodes}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="telemetry-flood-") as tmp:
        out = {
            "guarded": run(True, args.repeat, Path(tmp)),
            "unguarded": run(False, args.repeat, Path(tmp)),
        }
    for name, r in out.items():
        ratio, flood = r["ratio"], r["flood"]
        print(
            f"{name:10s} accepted {flood['accepted']}/{flood['posts']} flood posts, "
            f"{r['nodes_stored']} nodes stored; after/clean: pass {ratio['pass_s']}x, "
            f"/metrics {ratio['metrics_s']}x, GPUs page {ratio['gpus_page_s']}x"
        )
    worst = max(out["guarded"]["ratio"].values())
    out["target"] = {"max_ratio": 2.0, "guarded_worst_ratio": worst, "met": worst <= 2.0}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
