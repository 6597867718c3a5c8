"""Replaying recorded Slurm (tests/fixtures/slurm) to the Slurm ports, for the contract suite.

* `Replay`: a `CommandRunner` that answers each command with the file recorded for it. A command
  with no recording fails the test (an observer asking something new must get a recording).
* `RestStandIn`: slurmrestd on 127.0.0.1 answering the recorded documents by path (401 without
  the expected JWT where one is set, 404 for a path with no recording).
* `SlurmModel`: what `SlurmControl` talks to. No text output of `squeue -h -o ...` or of
  `scontrol update` was recorded, so it holds the jobs and nodes of a recorded JSON document
  (read here with `json`, not the product parser) and answers those commands in Slurm's formats,
  with Slurm's documented effects: down and power_down_force requeue the node's running jobs,
  drain and power_down_asap leave them running; an unknown node or job id exits 1.

Overrides (`Replay.override`, `RestStandIn.override`) break one answer for error-path checks.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.command_runner import CommandResult, CommandTimeout

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def recorded(name: str) -> str:
    return (FIX / name).read_text()


class Replay:
    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers  # command line -> recorded stdout
        self.override: dict[str, CommandResult | Exception] = {}

    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        key = " ".join(argv)
        if key in self.override:
            ans = self.override[key]
            if isinstance(ans, Exception):
                raise ans
            return ans
        assert key in self.answers, f"no recording for `{key}`"
        return CommandResult(tuple(argv), 0, self.answers[key], "")


class RestStandIn:
    def __init__(self, routes: dict[str, str], token: str | None = None) -> None:
        self.override: dict[str, tuple[int, str]] = {}
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if token is not None and self.headers.get("X-SLURM-USER-TOKEN") != token:
                    code, body = 401, "Authentication failure"
                elif self.path in stand_in.override:
                    code, body = stand_in.override[self.path]
                else:
                    code, body = (200, routes[self.path]) if self.path in routes else (404, "")
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(
            target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self._closed = False

    def close(self) -> None:
        """Stop listening: a client then gets connection refused."""
        if not self._closed:
            self._closed = True
            self._srv.shutdown()
            self._srv.server_close()


def expand(hostlist: str) -> list[str]:
    """Slurm's hostlist expansion, enough for `name`, `a,b` and `pre[1-3,5]`."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", hostlist):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            out += [f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


_SHORT = {"R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "S": "SUSPENDED",
          "NF": "NODE_FAIL", "BF": "BOOT_FAIL", "PD": "PENDING"}  # fmt: skip
_KILLED_BY_DOWN = {"RUNNING", "CONFIGURING", "SUSPENDED"}


@dataclass
class ModelJob:
    job_id: str
    state: str
    nodes: list[str]
    requeued: int = 0


@dataclass
class SlurmModel:
    jobs: dict[str, ModelJob]
    nodes: dict[str, str]  # name -> the last state the controller set ("" until then)
    reasons: dict[str, str] = field(default_factory=dict)
    timeout: bool = False

    @classmethod
    def from_recording(cls, jobs_doc: str, nodes_doc: str) -> SlurmModel:
        jobs = {}
        for j in json.loads(recorded(jobs_doc))["jobs"]:
            state = j["job_state"] if isinstance(j["job_state"], str) else j["job_state"][0]
            nodes = expand(j.get("nodes") or "") if j.get("nodes") else []
            jobs[str(j["job_id"])] = ModelJob(str(j["job_id"]), state, nodes)
        names = [n["name"] for n in json.loads(recorded(nodes_doc))["nodes"]]
        return cls(jobs, dict.fromkeys(names, ""))

    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        if self.timeout:
            raise CommandTimeout(argv, timeout_s)
        a = list(argv)
        rc, out, err = self._answer(a)
        return CommandResult(tuple(a), rc, out, err)

    def _opt(self, a: list[str], flag: str) -> str | None:
        return a[a.index(flag) + 1] if flag in a else None

    def _answer(self, a: list[str]) -> tuple[int, str, str]:
        if a[0] == "squeue":
            fmt, states = self._opt(a, "-o"), self._opt(a, "-t")
            wanted = None if states in (None, "all") else {_SHORT[s] for s in states.split(",")}
            jobs = list(self.jobs.values())
            if (where := self._opt(a, "-w")) is not None:
                on = set(expand(where))
                jobs = [j for j in jobs if on & set(j.nodes)]
            if (ids := self._opt(a, "-j")) is not None:
                if any(i not in self.jobs for i in ids.split(",")):
                    return 1, "", "slurm_load_jobs error: Invalid job id specified"
                jobs = [self.jobs[i] for i in ids.split(",")]
            jobs = [j for j in jobs if wanted is None or j.state in wanted]
            line = {"%i": "{0.job_id}", "%i %T": "{0.job_id} {0.state}"}[str(fmt)]
            return 0, "".join(line.format(j) + "\n" for j in jobs), ""
        if a[:2] == ["scontrol", "update"]:
            settings = dict(s.split("=", 1) for s in a[2:])
            names = expand(settings["nodename"])
            if any(n not in self.nodes for n in names):
                return 1, "", "slurm_update error: Invalid node name specified"
            state = settings.get("state", "")
            for n in names:
                if state:
                    self.nodes[n] = state
                if "reason" in settings:
                    self.reasons[n] = settings["reason"]
            if state in ("down", "power_down_force"):
                for j in self.jobs.values():
                    if set(j.nodes) & set(names) and j.state in _KILLED_BY_DOWN:
                        j.state, j.nodes, j.requeued = "PENDING", [], j.requeued + 1
            return 0, "", ""
        if a[:2] == ["scontrol", "requeue"]:
            job = self.jobs.get(a[2])
            if job is None or job.state == "PENDING":
                return 1, "", "scontrol: error: Job is pending execution"
            job.state, job.nodes, job.requeued = "PENDING", [], job.requeued + 1
            return 0, "", ""
        raise AssertionError(f"the model has no answer for {a}")
