"""A small model of how Slurm treats jobs when the controller takes a node away, for checking
`SlurmControl` against every interleaving of a job's own life with its commands.

It answers the `squeue` and `scontrol` calls `SlurmControl` makes, as a `CommandRunner`, with the
semantics Slurm documents (scontrol(1), squeue(1)):

* `state=drain` stops new work on the node and leaves running jobs alone;
* `state=down` and `state=power_down_force` kill the node's running jobs and requeue the
  requeueable ones in the same step; the others end NODE_FAIL;
* `scontrol requeue` puts a running job, or a finished batch job, back to PENDING (so requeueing
  a job that has just completed runs it a second time); a pending job is refused.

Between any two commands the job may move on its own: complete, be requeued by Slurm itself (its
node stopped responding), end NODE_FAIL, or a pending job may start on a node not yet drained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from provisioner.command_runner import CommandResult

ON_NODE = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"}
KILLED_BY_DOWN = {"RUNNING", "CONFIGURING", "SUSPENDED"}
EVENTS = ("complete", "slurm_requeue", "node_fail", "start")


@dataclass
class ModelJob:
    job_id: str
    state: str
    node: str | None
    requeue: bool = True
    restarts: int = 0
    completions: int = 0
    requeued_after_completion: bool = False


@dataclass
class SlurmJobsModel:
    node: str
    jobs: dict[str, ModelJob]
    # (command index, job id, event): applied just before that command runs
    events: list[tuple[int, str, str]] = field(default_factory=list)
    node_state: str = "ALLOCATED"
    calls: int = 0
    # jobs on the node when the controller's first command reached Slurm
    on_node_at_start: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ the job's own life
    def _apply(self, job_id: str, event: str) -> None:
        j = self.jobs[job_id]
        if event == "complete" and j.state == "RUNNING":
            j.state, j.completions = "COMPLETED", j.completions + 1
        elif event == "slurm_requeue" and j.state == "RUNNING":
            j.state, j.node, j.restarts = "PENDING", None, j.restarts + 1
        elif event == "node_fail" and j.state == "RUNNING":
            j.state = "NODE_FAIL"
        elif event == "start" and j.state == "PENDING" and self.node_state == "ALLOCATED":
            j.state, j.node = "RUNNING", self.node

    # ------------------------------------------------------------------ CommandRunner
    def run(self, argv: Sequence[str], *, timeout_s: float) -> CommandResult:
        for at, job_id, event in self.events:
            if at == self.calls:
                self._apply(job_id, event)
        if self.calls == 0:
            self.on_node_at_start = {
                j.job_id for j in self.jobs.values() if j.node == self.node and j.state in ON_NODE
            }
        self.calls += 1
        args = list(argv)
        out, rc, err = self._answer(args)
        return CommandResult(tuple(args), rc, out, err)

    def _answer(self, a: list[str]) -> tuple[str, int, str]:
        if a[0] == "squeue" and "-w" in a:
            assert a[a.index("-w") + 1] == self.node
            want = {"R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "S": "SUSPENDED",
                    "NF": "NODE_FAIL", "BF": "BOOT_FAIL"}  # fmt: skip
            states = {want[s] for s in a[a.index("-t") + 1].split(",")}
            ids = [
                j.job_id for j in self.jobs.values() if j.node == self.node and j.state in states
            ]
            return "".join(f"{i}\n" for i in ids), 0, ""
        if a[0] == "squeue":
            ids = a[a.index("-j") + 1].split(",") if "-j" in a else list(self.jobs)
            return "".join(f"{i} {self.jobs[i].state}\n" for i in ids if i in self.jobs), 0, ""
        if a[:2] == ["scontrol", "update"]:
            assert a[2] == f"nodename={self.node}"
            state = a[3].removeprefix("state=")
            if state in ("down", "power_down_force"):
                for j in self.jobs.values():
                    if j.node == self.node and j.state in KILLED_BY_DOWN:
                        if j.requeue:
                            j.state, j.node, j.restarts = "PENDING", None, j.restarts + 1
                        else:
                            j.state = "NODE_FAIL"
            self.node_state = state.upper()
            return "", 0, ""
        if a[:2] == ["scontrol", "requeue"]:
            j = self.jobs[a[2]]
            if j.state == "PENDING":
                return "", 1, "scontrol: error: Job is pending execution"
            if j.state == "COMPLETED":
                j.requeued_after_completion = True
            j.state, j.node, j.restarts = "PENDING", None, j.restarts + 1
            return "", 0, ""
        raise AssertionError(f"unexpected command {a}")
