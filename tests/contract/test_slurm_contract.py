"""The Slurm ports over both releases' recordings (tests/fixtures/slurm: 22.05.8 and 24.11.5).

`SlurmObserver`: every implementation (the CLI reading JSON nodes, the CLI reading `scontrol -o
-d show node` text, slurmrestd, and the fallback from a failing slurmrestd to the CLI), on each
release, must turn what Slurm printed into the same facts: each job's state, GPUs and nodes, each
node's kind, pool, state and GPUs; stamp the snapshot with the clock; and answer a failed,
garbled or unreachable jobs source with a `SnapshotError` that names the source, which
`observe_or_stale` turns into the previous snapshot marked stale. The expected facts are written
out by hand from the recordings (README.md there says what was submitted), per recording, since
22.05's files were taken at different moments.

`SlurmControl`: on each release's recorded jobs and nodes (see recorded_slurm.SlurmModel), it
must report the jobs Slurm shows on a node, read job states even when one id is forgotten, take
a node away with its jobs requeued, power nodes up and down by name, and raise
`SlurmControlError` for a command Slurm refuses or one that times out.

Only recordings run here. There is no live variant yet: tests/slurm's cluster fixtures are
visible only under tests/slurm, and a second copy of its session-scoped, release-parametrised
`slurm_cluster` here would run next to that one in a full run, both rewriting os.environ.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from recorded_slurm import Replay, RestStandIn, SlurmModel, recorded

from provisioner.clock import ManualClock
from provisioner.command_runner import CommandResult, CommandTimeout
from provisioner.domain.errors import SnapshotError
from provisioner.domain.jobs import JobState
from provisioner.domain.nodes import NodeKind, NodeState
from provisioner.observe.slurm.observer import (
    CliSlurmObserver,
    FallbackSlurmObserver,
    RestSlurmObserver,
    RestToken,
    observe_or_stale,
)
from provisioner.register.slurm_control import SlurmControl, SlurmControlError

TOKEN = "eyJhbGciOiJIUzI1NiJ9.contract-token.sig"  # a stand-in JWT


@dataclass(frozen=True)
class Release:
    version: str  # what `sinfo --version` prints
    squeue: str  # the observer's jobs command on this release
    squeue_doc: str
    nodes_cmd: str  # the observer's JSON nodes command on this release
    nodes_doc: str
    text_doc: str  # `scontrol -o [-d] show node`
    api: str
    rest_jobs: str
    rest_nodes: str
    rest_ping: str | None  # recorded /ping (24.11: the observer probes the data_parser)
    token: str | None  # slurmrestd's JWT (24.11: rest_auth/jwt; 22.05: local auth)


RELEASES = {
    "22.05": Release(
        "slurm-wlm 22.05.8\n",  # not recorded; what Debian 12's sinfo prints (README.md)
        "squeue --json",
        "squeue.json",
        "sinfo --json",
        "sinfo.json",
        "scontrol-o-show-nodes.txt",  # recorded without -d, so no GresUsed
        "v0.0.38",
        "rest-jobs.json",
        "rest-nodes.json",
        None,
        None,
    ),
    "24.11": Release(
        recorded("24.11/sinfo--version.txt"),
        "squeue --json --states=all",
        "24.11/squeue--json--states=all.json",
        "scontrol show nodes --json",
        "24.11/scontrol-show-nodes--json.json",
        "24.11/scontrol-o-d-show-node.txt",
        "v0.0.42",
        "24.11/rest-v0.0.42-jobs.json",
        "24.11/rest-v0.0.42-nodes.json",
        "24.11/rest-v0.0.42-ping.json",
        TOKEN,
    ),
}

R, PD, CD, CA = JobState.RUNNING, JobState.PENDING, JobState.COMPLETED, JobState.CANCELLED
# recording -> {job id: state}, and {job id: (gpus, nodes)} of the running and pending ones
STATES_24 = {str(i): CA for i in (1, 2, 3, 6, 7, 11, 12, 13, 14, 18, 19, 20, 21)}
STATES_24 |= {str(i): CD for i in (5, 8, 9, 10, 15, 16, 17, 22)}
STATES_24 |= {"23": R, "24": R, "25": PD, "26": R}
JOB_STATES: dict[str, dict[str, JobState]] = {
    "squeue.json": {"1": R, "2": R, "3": R, "4": R, "5": PD, "6": PD},
    "rest-jobs.json": {"14": CD, "15": CD, "16": CA, "17": R, "18": R, "19": R, "20": R,
                       "21": PD, "22": R},  # 22 is CONFIGURING: it holds its burst node
    "24.11/squeue--json--states=all.json": STATES_24,
    "24.11/rest-v0.0.42-jobs.json": STATES_24,
}  # fmt: skip
LIVE_24 = {"23": (4, ("onprem-2",)), "24": (2, ("onprem-1",)), "25": (4, ()),
           "26": (2, ("cloud-aws-1",))}  # fmt: skip
LIVE_JOBS: dict[str, dict[str, tuple[int, tuple[str, ...]]]] = {
    "squeue.json": {"1": (2, ("onprem-1",)), "2": (2, ("onprem-1",)), "3": (2, ("onprem-2",)),
                    "4": (2, ("onprem-2",)), "5": (2, ()), "6": (2, ())},
    "rest-jobs.json": {"17": (2, ("onprem-1",)), "18": (2, ("onprem-1",)),
                       "19": (2, ("onprem-2",)), "20": (2, ("onprem-2",)), "21": (2, ()),
                       "22": (8, ("cloud-aws-1",))},
    "24.11/squeue--json--states=all.json": LIVE_24,
    "24.11/rest-v0.0.42-jobs.json": LIVE_24,
}  # fmt: skip

BURST, ONPREM = NodeKind.BURST, NodeKind.ONPREM
DOWNED = {f"cloud-aws-{i}": (BURST, "cloud-aws", NodeState.POWERED_DOWN, 8, 0) for i in (2, 3, 4)}
CLOUD_22 = DOWNED | {"cloud-aws-1": DOWNED["cloud-aws-2"]}


def onprem(state: NodeState, alloc: int) -> dict[str, tuple[NodeKind, str, NodeState, int, int]]:
    return {n: (ONPREM, "", state, 4, alloc) for n in ("onprem-1", "onprem-2")}


NODES_24 = DOWNED | {
    "cloud-aws-1": (BURST, "cloud-aws", NodeState.POWERING_UP, 8, 2),  # job 26
    "onprem-1": (ONPREM, "", NodeState.MIXED, 4, 2),  # job 24
    "onprem-2": (ONPREM, "", NodeState.MIXED, 4, 4),  # job 23
}
# recording -> {node: (kind, pool, state, gpus, gpus allocated)}
NODES: dict[str, dict[str, tuple[NodeKind, str, NodeState, int, int]]] = {
    "sinfo.json": CLOUD_22 | onprem(NodeState.ALLOCATED, 4),
    "scontrol-o-show-nodes.txt": CLOUD_22 | onprem(NodeState.IDLE, 0),
    "rest-nodes.json": DOWNED
    | {"cloud-aws-1": (BURST, "cloud-aws", NodeState.MIXED, 8, 8)}
    | onprem(NodeState.ALLOCATED, 4),
    "24.11/scontrol-show-nodes--json.json": NODES_24,
    "24.11/scontrol-o-d-show-node.txt": NODES_24,
    "24.11/rest-v0.0.42-nodes.json": NODES_24,
}

IMPLS = ("cli", "cli-scontrol", "rest", "fallback")
CASES = [(rel, impl) for rel in RELEASES for impl in IMPLS]


@dataclass
class ObserverCase:
    release: Release
    impl: str
    clock: ManualClock
    observer: Any
    runner: Replay
    rest: RestStandIn
    jobs_doc: str
    nodes_doc: str
    sources: tuple[str, ...]  # what an error about the jobs source must name

    def break_jobs(self, kind: str) -> None:
        argv = self.release.squeue.split()
        path = f"/slurm/{self.release.api}/jobs"
        good = recorded(self.release.rest_jobs)
        if kind == "failed":
            err = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
            self.runner.override[self.release.squeue] = CommandResult(tuple(argv), 1, "", err)
            self.rest.override[path] = (500, json.dumps({"errors": [{"error": err}]}))
        elif kind == "garbled":
            text = recorded(self.release.squeue_doc)
            self.runner.override[self.release.squeue] = CommandResult(
                tuple(argv), 0, text[: len(text) // 2], ""
            )
            self.rest.override[path] = (200, good[: len(good) // 2])
        else:  # unreachable: the command hangs past its timeout, slurmrestd is gone
            self.runner.override[self.release.squeue] = CommandTimeout(argv, 15)
            self.rest.close()


@pytest.fixture(params=CASES, ids=[f"{r}-{i}" for r, i in CASES])
def slurm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObserverCase]:
    rel_name, impl = request.param
    rel = RELEASES[rel_name]
    clock = ManualClock()
    runner = Replay(
        {
            "sinfo --version": rel.version,
            rel.squeue: recorded(rel.squeue_doc),
            rel.nodes_cmd: recorded(rel.nodes_doc),
            "scontrol -o -d show node": recorded(rel.text_doc),
        }
    )
    routes = {
        f"/slurm/{rel.api}/jobs": recorded(rel.rest_jobs),
        f"/slurm/{rel.api}/nodes": recorded(rel.rest_nodes),
    }
    if rel.rest_ping:
        routes[f"/slurm/{rel.api}/ping"] = recorded(rel.rest_ping)
    rest, down = RestStandIn(routes, rel.token), RestStandIn({})  # `down`: 404 to every path
    token = None
    if rel.token:
        (tmp_path / "jwt").write_text(f"SLURM_JWT={rel.token}\n")
        token = RestToken(file=tmp_path / "jwt")
    api = None if rel.rest_ping else rel.api
    cli_src = (rel.squeue,)
    if impl == "cli":
        case = (CliSlurmObserver(runner, clock), rel.squeue_doc, rel.nodes_doc, cli_src)
    elif impl == "cli-scontrol":
        obs = CliSlurmObserver(runner, clock, nodes_source="scontrol")
        case = (obs, rel.squeue_doc, rel.text_doc, cli_src)
    elif impl == "rest":
        obs = RestSlurmObserver(None, clock, base_url=rest.url, token=token, api_version=api)
        case = (obs, rel.rest_jobs, rel.rest_nodes, ("/jobs",))
    else:
        primary = RestSlurmObserver(None, clock, base_url=down.url, api_version=rel.api)
        obs = FallbackSlurmObserver(primary, CliSlurmObserver(runner, clock))
        case = (obs, rel.squeue_doc, rel.nodes_doc, (*cli_src, "fallback:"))
    try:
        yield ObserverCase(rel, impl, clock, case[0], runner, rest, *case[1:])
    finally:
        rest.close()
        down.close()


# --------------------------------------------------------------------------- observers


def test_jobs_are_what_slurm_recorded(slurm: ObserverCase) -> None:
    snap = slurm.observer.observe()
    assert {j.job_id: j.state for j in snap.jobs} == JOB_STATES[slurm.jobs_doc]
    live = {j.job_id: (j.gpus, j.nodes) for j in snap.jobs if j.state in (R, PD)}
    assert live == LIVE_JOBS[slurm.jobs_doc]


def test_nodes_are_what_slurm_recorded(slurm: ObserverCase) -> None:
    snap = slurm.observer.observe()
    got = {n.name: (n.kind, n.pool, n.state, n.gpus, n.gpus_alloc) for n in snap.nodes}
    assert got == NODES[slurm.nodes_doc]


def test_a_snapshot_is_fresh_and_stamped_by_the_clock(slurm: ObserverCase) -> None:
    first = slurm.observer.observe()
    assert not first.stale and first.stale_reasons == ()
    assert first.taken_ts == slurm.clock.now().timestamp()
    slurm.clock.advance(60)
    second = slurm.observer.observe()
    assert second.taken_ts == first.taken_ts + 60
    assert (second.jobs, second.nodes) == (first.jobs, first.nodes)


@pytest.mark.parametrize("kind", ["failed", "garbled", "unreachable"])
def test_a_broken_jobs_source_is_a_snapshot_error_and_a_stale_snapshot(
    slurm: ObserverCase, kind: str
) -> None:
    good = slurm.observer.observe()
    slurm.break_jobs(kind)
    with pytest.raises(SnapshotError) as info:
        slurm.observer.observe()
    for source in slurm.sources:
        assert source in str(info.value)
    slurm.clock.advance(30)
    now = slurm.clock.now().timestamp()
    stale = observe_or_stale(slurm.observer, previous=good, now_ts=now)
    assert stale.stale and (stale.jobs, stale.nodes) == (good.jobs, good.nodes)
    assert len(stale.stale_reasons) == 1 and stale.stale_reasons[0].startswith("slurm: ")


# --------------------------------------------------------------------------- control

# release -> the recording the model holds, and what that recording shows
CONTROL = {
    "22.05": {
        "docs": ("rest-jobs.json", "rest-nodes.json"),
        "on": {"cloud-aws-1": {"22"}, "onprem-1": {"17", "18"}, "onprem-2": {"19", "20"}},
        "states": {"22": "CONFIGURING", "21": "PENDING", "14": "COMPLETED"},
    },
    "24.11": {
        "docs": ("24.11/squeue--json--states=all.json", "24.11/rest-v0.0.42-nodes.json"),
        "on": {"cloud-aws-1": {"26"}, "onprem-1": {"24"}, "onprem-2": {"23"}},
        "states": {"26": "RUNNING", "25": "PENDING", "22": "COMPLETED"},
    },
}
IDLE_BURST = ["cloud-aws-2", "cloud-aws-3", "cloud-aws-4"]  # powered down in every recording


@pytest.fixture(params=sorted(CONTROL))
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def model(release: str) -> SlurmModel:
    return SlurmModel.from_recording(*CONTROL[release]["docs"])


def test_jobs_on_a_node_are_the_ones_slurm_shows_there(release: str) -> None:
    control = SlurmControl(model(release))
    expected: dict[str, set[str]] = CONTROL[release]["on"]
    for node, ids in {**expected, **{n: set() for n in IDLE_BURST}}.items():
        assert set(control.jobs_on(node)) == ids, node
    assert set(control.jobs_on(["onprem-1", "onprem-2"])) == (
        expected["onprem-1"] | expected["onprem-2"]
    )


def test_job_states_are_read_even_when_slurm_forgot_one(release: str) -> None:
    states: dict[str, str] = CONTROL[release]["states"]
    control = SlurmControl(model(release))
    assert control.job_states(states) == states
    assert control.job_states([*states, "999999"]) == states  # squeue -j refuses a forgotten id
    assert control.job_states([]) == {}


TAKE_AWAY = [("mark_failed", "down"), ("handle_interruption", "power_down_force")]


@pytest.mark.parametrize(("method", "final"), TAKE_AWAY)
def test_taking_a_node_away_requeues_its_jobs_and_reports_them(
    release: str, method: str, final: str
) -> None:
    m = model(release)
    (job,) = CONTROL[release]["on"]["cloud-aws-1"]
    others = {j.job_id: j.state for j in m.jobs.values() if j.job_id != job}
    reported = getattr(SlurmControl(m), method)("cloud-aws-1", "did not  join")
    assert reported == (job,)
    assert (m.jobs[job].state, m.jobs[job].requeued) == ("PENDING", 1)
    assert (m.nodes["cloud-aws-1"], m.reasons["cloud-aws-1"]) == (final, "did not join")
    assert {j.job_id: j.state for j in m.jobs.values() if j.job_id != job} == others


def test_drain_and_power_down_leaves_running_work_alone(release: str) -> None:
    m = model(release)
    (job,) = CONTROL[release]["on"]["cloud-aws-1"]
    before = m.jobs[job].state
    SlurmControl(m).drain_and_power_down("cloud-aws-1", "idle for 600 s")
    assert m.nodes["cloud-aws-1"] == "power_down_asap"
    assert (m.jobs[job].state, m.jobs[job].requeued) == (before, 0)


def test_power_up_and_resume_reach_every_named_node(release: str) -> None:
    m = model(release)
    control = SlurmControl(m)
    control.power_up(IDLE_BURST)
    assert {n: m.nodes[n] for n in IDLE_BURST} == dict.fromkeys(IDLE_BURST, "power_up")
    assert m.nodes["cloud-aws-1"] == ""  # nothing else was touched
    control.resume(["cloud-aws-2", "cloud-aws-4"])
    assert [m.nodes[n] for n in IDLE_BURST] == ["resume", "power_up", "resume"]


def test_a_command_slurm_refuses_or_that_hangs_is_a_typed_error(release: str) -> None:
    m = model(release)
    control = SlurmControl(m, timeout_s=3)
    with pytest.raises(SlurmControlError, match="Invalid node name") as info:
        control.power_up("cloud-aws-9")
    assert info.value.returncode == 1
    assert set(m.nodes.values()) == {""}
    m.timeout = True
    with pytest.raises(SlurmControlError, match="timed out after 3 s"):
        control.jobs_on("cloud-aws-1")
