"""Hook bridge of the Slurm 24.11 test cluster (started by scripts/slurm-up.sh).

slurmctld 24.11 runs in a Debian 13 root, where the project's Python is not. Its power-saving
hooks (DIR/bin/resume.sh ...) therefore send one line, `<verb> <hostlist>`, over loopback TCP
(bash's /dev/tcp) to this listener on the host, which runs the project's real
`provisioner slurm <verb> --state-dir DIR <hostlist>` and answers `ok` or `error <rc>: <text>`.
Only the three hook verbs and a hostlist of plain node-name characters are accepted.

Usage: python slurm_hook_bridge.py --port P --provisioner EXE --state-dir DIR --pid-file FILE
"""

from __future__ import annotations

import argparse
import os
import re
import socketserver
import subprocess
import sys
from datetime import UTC, datetime

VERBS = frozenset({"resume", "suspend", "resume-fail"})
HOSTLIST = re.compile(r"^[A-Za-z0-9_.,\[\]-]{1,4096}$")
HOOK_TIMEOUT_S = 25.0  # the hook waits 30 s for the answer


def log(msg: str) -> None:
    print(f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} {msg}", flush=True)


def handle_line(line: str, provisioner: str, state_dir: str) -> str:
    parts = line.strip().split(" ")
    if len(parts) != 2 or parts[0] not in VERBS or not HOSTLIST.match(parts[1]):
        want = "<resume|suspend|resume-fail> HOSTLIST"
        return f"error 2: bad request {line.strip()[:80]!r} (want '{want}')"
    verb, hostlist = parts
    argv = [provisioner, "slurm", verb, "--state-dir", state_dir, hostlist]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=HOOK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error 1: {exc}"
    out = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    text = out[-1] if out else ""
    return f"ok {text}" if proc.returncode == 0 else f"error {proc.returncode}: {text}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--provisioner", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--pid-file", required=True)
    args = ap.parse_args(argv)

    class Handler(socketserver.StreamRequestHandler):
        timeout = 10  # a client that never sends its line is dropped

        def handle(self) -> None:
            raw = self.rfile.readline(8192).decode("utf-8", "replace")
            answer = handle_line(raw, args.provisioner, args.state_dir)
            log(f"{raw.strip()!r} -> {answer}")
            self.wfile.write((answer + "\n").encode())

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", args.port), Handler) as srv:
        with open(args.pid_file, "w") as f:  # written once listening: slurm-up waits for it
            f.write(f"{os.getpid()}\n")
        log(f"listening on 127.0.0.1:{args.port}")
        srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
