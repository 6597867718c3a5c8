"""The live tests on a busy machine: the `slurm`, `e2e` and `aws` markers, run N times in a row
(default 10) while another process keeps one core busy, as on a developer's machine that CI
runs on. The bar (issue 25): every run passes.

Needs what `make test` starts: both Slurm clusters (make slurm-up) and the private PostgreSQL
(make pg-up); run it from the repository root after them:

    .venv/bin/python bench/live_under_load.py [--runs 10] [--markers "slurm or e2e or aws"]

Prints one line per run, then one JSON object of the figures (the last line): runs passed,
per run its counts, seconds and failed tests, and the CPU share the load process really took.
Stopped early (Ctrl-C or SIGTERM), it still prints the figures of the runs it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_BUSY = "while True:\n    pass\n"
_COUNTS = re.compile(r"(\d+) (passed|failed|error|errors|skipped|deselected)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    fields = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]).split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(markers: str, env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
           "-m", markers, *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    summary = next(
        (ln for ln in reversed(out.splitlines()) if _COUNTS.search(ln) and " in " in ln), ""
    )
    counts = {k.rstrip("s"): int(n) for n, k in _COUNTS.findall(summary)}
    failures = [ln.split(" ", 1)[1].split(" - ")[0] for ln in out.splitlines()
                if ln.startswith(("FAILED ", "ERROR "))]  # fmt: skip
    return {
        "rc": proc.returncode,
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0),
        "skipped": counts.get("skipped", 0),
        "seconds": round(time.monotonic() - t0, 1),
        "failures": failures,
        "tail": out.splitlines()[-40:] if proc.returncode else [],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--markers", default="slurm or e2e or aws")
    ap.add_argument("--no-load", action="store_true", help="the same runs on a quiet machine")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. a path)")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    pg = ROOT / ".pg" / "url"
    if pg.exists():
        env.setdefault("PROVISIONER_TEST_DATABASE_URL", pg.read_text().strip())
    env.setdefault("REQUIRE_FOCUS_VALIDATOR", "1")
    env.setdefault("REQUIRE_POSTGRES", "1")
    load = None
    if not args.no_load:
        load = subprocess.Popen([sys.executable, "-c", _BUSY])
    runs: list[dict[str, Any]] = []
    interrupted = False
    # SIGTERM ends the series like Ctrl-C: the runs finished so far are still reported.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    t0 = time.monotonic()
    try:
        for i in range(1, args.runs + 1):
            r = one_run(args.markers, env, args.pytest_args)
            runs.append(r)
            print(f"run {i}: {r['passed']} passed, {r['failed']} failed in {r['seconds']} s "
                  f"{r['failures'] or ''}", flush=True)  # fmt: skip
            for line in r["tail"]:
                print(f"    {line}", flush=True)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        wall = time.monotonic() - t0
        load_share = None
        if load is not None:
            load_share = round(cpu_seconds(load.pid) / wall, 2) if wall > 0 else None
            load.kill()
            load.wait()
    result = {
        "markers": args.markers,
        "runs": len(runs),
        "runs_asked": args.runs,
        "interrupted": interrupted,
        "runs_passed": sum(1 for r in runs if r["rc"] == 0),
        "all_passed": all(r["rc"] == 0 for r in runs) and len(runs) == args.runs,
        "load": None if args.no_load else "one busy-looping process",
        "load_cpu_share": load_share,  # CPU seconds the load took per wall second (1.0: a core)
        "tests_per_run": [r["passed"] + r["failed"] for r in runs],
        "seconds_per_run": [r["seconds"] for r in runs],
        "failures": [f for r in runs for f in r["failures"]],
        "wall_s": round(wall, 1),
    }
    print(json.dumps(result))
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
