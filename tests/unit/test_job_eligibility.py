"""Jobs Slurm will not start yet (a begin time ahead, as Slurm sets on a requeued job) or at all
(held) are not a reason to buy capacity: read from squeue's JSON, and planned as waits."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from provisioner.domain.plan import ReasonCode
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.observe.slurm.parse import parse_job
from provisioner.plan.backoff import Backoff
from provisioner.plan.planner import plan
from tests.unit.helpers import T0, catalog, onprem_nodes, pending, policy, running

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
# T0 is 2027-01-15T08:00:00Z.
FULL = onprem_nodes(2, 4, alloc=4)
BUSY = (running("r1", 4, "onprem-1", ends_in=3600), running("r2", 4, "onprem-2", ends_in=7200))


def _pending_record() -> dict:
    doc = json.loads((FIX / "squeue.json").read_text())
    rec = next(j for j in doc["jobs"] if j["job_state"] == "PENDING")
    return copy.deepcopy(rec)


def test_a_begin_time_and_a_hold_are_read_from_squeue() -> None:
    rec = _pending_record()
    rec["eligible_time"] = 1_900_000_000
    rec["state_reason"] = "BeginTime"
    job = parse_job(rec)
    assert job.eligible_ts == 1_900_000_000.0 and not job.held
    assert not job.can_start(1_899_999_999.0) and job.can_start(1_900_000_000.0)
    for reason in ("JobHeldUser", "JobHeldAdmin", "launch failed requeued held"):
        rec["state_reason"] = reason
        held = parse_job(rec)
        assert held.held and not held.can_start(2_000_000_000.0), reason


def test_24_11_shapes_set_number_and_requeue_hold() -> None:
    rec = _pending_record()
    rec["eligible_time"] = {"set": True, "infinite": False, "number": 1_900_000_000}
    rec["job_state"] = ["PENDING", "REQUEUE_HOLD"]
    rec["state_reason"] = "None"
    job = parse_job(rec)
    assert job.eligible_ts == 1_900_000_000.0 and job.held


def test_an_unset_begin_time_does_not_block() -> None:
    rec = _pending_record()
    rec["eligible_time"] = 0
    rec["state_reason"] = "Resources"
    job = parse_job(rec)
    assert job.eligible_ts is None and not job.held and job.can_start(T0)


def snap(*jobs) -> ClusterSnapshot:
    return ClusterSnapshot(taken_ts=T0, jobs=(*BUSY, *jobs), nodes=FULL)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"eligible_ts": T0 + 120}, "before 2027-01-15T08:02:00Z (begin time)"),
        ({"held": True}, "held by Slurm until released"),
    ],
)
def test_a_job_that_cannot_start_yet_is_not_burst(kw, why) -> None:
    # Alone this job bursts: a 1000 s runtime gives a 500 s budget, on-prem frees at +3600 s.
    job = pending("b", 1, runtime=1000, **kw)
    p = plan(snap(job), policy(), catalog(), Backoff(), T0)
    assert p.scale_ups == ()
    (d,) = [d for d in p.decisions if d.job_ids == ("b",)]
    assert d.reason is ReasonCode.WAIT_NOT_ELIGIBLE and d.detail["why"].endswith(why)


def test_once_its_begin_time_passes_it_is_planned_like_any_job() -> None:
    job = pending("b", 1, runtime=1000, eligible_ts=T0)
    p = plan(snap(job), policy(), catalog(), Backoff(), T0)
    (up,) = p.scale_ups
    assert up.job_ids == ("b",)


def test_a_hold_after_a_failed_launch_is_read_as_such() -> None:
    """22.05's squeue --json, as measured: the reason says JobHeldUser, the description says
    why; scontrol spells it launch_failed_requeued_held."""
    rec = _pending_record()
    rec["state_reason"] = "JobHeldUser"
    rec["state_description"] = "launch failed requeued held"
    job = parse_job(rec)
    assert job.held and job.launch_failed
    rec["state_description"] = ""
    rec["state_reason"] = "launch_failed_requeued_held"
    assert parse_job(rec).launch_failed
    rec["state_reason"] = "JobHeldUser"
    plain = parse_job(rec)
    assert plain.held and not plain.launch_failed


def test_a_job_held_after_a_failed_launch_is_released_into_a_burst_partition() -> None:
    job = pending("b", 1, runtime=1000, held=True, launch_failed=True)
    p = plan(snap(job), policy(), catalog(), Backoff(), T0)
    assert p.scale_ups == ()  # nothing bought: Slurm's power-up for it is planned later
    (d,) = [d for d in p.decisions if d.job_ids == ("b",)]
    assert d.reason is ReasonCode.RELEASE_LAUNCH_FAILED and d.pool
    # The release is an action of the plan, carried out by the loop like any other.
    assert [(r.pool, r.job_ids, r.decision) for r in p.releases] == [(d.pool, ("b",), d)]
    # a plain hold stays a wait
    held = pending("c", 1, runtime=1000, held=True)
    p = plan(snap(held), policy(), catalog(), Backoff(), T0)
    (d,) = [d for d in p.decisions if d.job_ids == ("c",)]
    assert d.reason is ReasonCode.WAIT_NOT_ELIGIBLE
    assert p.actions == ()
