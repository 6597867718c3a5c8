"""The orphan sweep never kills a job and never loses a dollar (issue 10, items 3 and 4).

Pure `plan_sync` over hand-built observations: the clouds' listing, the store's records, and
the Slurm snapshot. Expected values are hand computations from the listing's launch times and
the catalog's price."""

from __future__ import annotations

from decimal import Decimal

from provisioner.act.ports import CloudState, OwnedInstance
from provisioner.domain.instances import CloudInstance, InstanceOrigin, InstanceState, Transition
from provisioner.domain.jobs import Job, JobState
from provisioner.domain.nodes import Node, NodeKind, NodeState
from provisioner.domain.offers import CapacityType, Offer
from provisioner.domain.records import StoredInstance
from provisioner.domain.snapshot import ClusterSnapshot
from provisioner.reconcile.sync import SyncInput, SyncPlan, plan_sync

S = InstanceState
NOW = 1_767_225_600.0
CTL = "burst-ctl"
P4D = Offer(
    "aws", "us-east-1", "p4d.24xlarge", "A100", 8, 40, 96, 1152, Decimal("32.7726"), Decimal("9.83")
)
OFFERS = {("aws", "us-east-1", "p4d.24xlarge"): P4D}


def owned(iid: str, launched: float = NOW - 3600, pool: str = "burst") -> OwnedInstance:
    return OwnedInstance(
        iid,
        "aws",
        "us-east-1",
        "us-east-1a",
        "p4d.24xlarge",
        CloudState.RUNNING,
        launched,
        group="burst-ctl-burst-us-east-1-p4d-24xlarge-spot",
        tags={"controller": CTL, "decision": "d-7", "pool": pool, "capacity": "spot"},
    )


def burst(name: str, state: NodeState, alloc: int = 0) -> Node:
    return Node(name, NodeKind.BURST, 8, alloc, "a100", state, ("cloud",), ("cloud",), 100,
                pool="burst")  # fmt: skip


def job_on(node: str, job_id: str = "77") -> Job:
    return Job(job_id, 8, NOW - 900, state=JobState.RUNNING, start_ts=NOW - 600, nodes=(node,))


def draining_record(iid: str, node: str, since: float) -> StoredInstance:
    hist = (
        Transition(None, S.REQUESTED, since - 100, "intent"),
        Transition(S.REQUESTED, S.ALLOCATED, since - 90, "running"),
        Transition(S.ALLOCATED, S.JOINING, since - 80, "powering up"),
        Transition(S.JOINING, S.READY, since - 60, "joined"),
        Transition(S.READY, S.DRAINING, since, "draining"),
    )
    inst = CloudInstance(iid, "burst", P4D.key(CapacityType.SPOT), "A100", 8, Decimal("9.83"),
                         S.DRAINING, since - 100, "d-1", node, hist)  # fmt: skip
    return StoredInstance(inst, team="vision", intent_token="tok-1")


def sync(
    *,
    records: list[StoredInstance] | None = None,
    own: list[OwnedInstance],
    nodes: tuple[Node, ...] = (),
    jobs: tuple[Job, ...] = (),
    approved: bool = False,
    max_disagreements: int = 5,
) -> SyncPlan:
    return plan_sync(
        SyncInput(
            NOW,
            CTL,
            records or [],
            own,
            True,
            ClusterSnapshot(taken_ts=NOW, jobs=jobs, nodes=nodes),
            grace_s=120,
            offers=OFFERS,
            max_disagreements=max_disagreements,
            sweep_approved=approved,
            timeouts={S.DRAINING: 7 * 86_400.0},
            # the controller has listed each machine since its launch
            first_seen={o.instance_id: o.launched_ts or NOW for o in own},
        )
    )


def test_an_orphan_whose_pool_runs_jobs_on_unrecorded_nodes_is_kept_and_those_nodes_drained():
    """A controller started on an empty or older store: the tagged machine under a busy node
    has no record. It is recorded from its tags and the node drained; nothing is killed."""
    nodes = (burst("cloud-aws-1", NodeState.ALLOCATED, alloc=8),)
    p = sync(own=[owned("i-9")], nodes=nodes, jobs=(job_on("cloud-aws-1"),))
    assert p.kills == ()
    (rec,) = p.orphans
    assert rec.origin is InstanceOrigin.ORPHAN and rec.state is S.ALLOCATED
    assert (rec.pool, rec.gpus, rec.price_usd_hr) == ("burst", 8, Decimal("9.83"))
    assert rec.launched_ts == NOW - 3600 and rec.decision_id == "d-7"
    assert [(f.node, f.action) for f in p.nodes] == [("cloud-aws-1", "drain")]
    # next pass: its record is stored; the node still runs the job: still kept
    stored = StoredInstance(rec, team="")
    draining = (burst("cloud-aws-1", NodeState.DRAINING, alloc=8),)
    p = sync(records=[stored], own=[owned("i-9")], nodes=draining, jobs=(job_on("cloud-aws-1"),))
    assert p.kills == () and p.orphans == ()
    # the job finished and Slurm powered the node down: now the orphan goes
    idle = (burst("cloud-aws-1", NodeState.POWERING_DOWN),)
    p = sync(records=[stored], own=[owned("i-9")], nodes=idle)
    assert [k.instance_id for k in p.kills] == ["i-9"]


def test_an_orphan_with_no_busy_node_in_its_pool_is_recorded_then_terminated():
    p = sync(own=[owned("i-9")], nodes=(burst("cloud-aws-1", NodeState.POWERED_DOWN),))
    assert [o.instance_id for o in p.orphans] == ["i-9"]
    assert [k.instance_id for k in p.kills] == ["i-9"]
    assert p.nodes == ()


def test_lease_expiry_never_terminates_a_node_slurm_shows_running_a_job():
    """A DRAINING record past its 7-day lease whose node still runs a job is left alone."""
    old = draining_record("i-1", "cloud-aws-1", since=NOW - 8 * 86_400)
    busy = (burst("cloud-aws-1", NodeState.DRAINING, alloc=8),)
    p = sync(records=[old], own=[owned("i-1")], nodes=busy, jobs=(job_on("cloud-aws-1"),))
    assert p.kills == ()
    # once the job is gone, the expired lease applies
    done = (burst("cloud-aws-1", NodeState.DRAINING, alloc=0),)
    p = sync(records=[old], own=[owned("i-1")], nodes=done)
    assert [k.instance_id for k in p.kills] == ["i-1"]


def test_the_safety_valve_holds_when_store_and_cloud_disagree_about_too_many():
    """Six tagged machines with no record (a wrong store URL): nothing is terminated, the
    valve says why, and an operator's approval lets the sweep go ahead."""
    own = [owned(f"i-{n}") for n in range(6)]
    p = sync(own=own, max_disagreements=5)
    assert p.kills == () and p.orphans == ()
    assert "disagree about 6 instances" in p.sweep_hold and "approve" in p.sweep_hold
    p = sync(own=own, max_disagreements=6)  # within the limit
    assert len(p.kills) == 6 and p.sweep_hold == ""
    p = sync(own=own, max_disagreements=5, approved=True)
    assert len(p.kills) == 6 and len(p.orphans) == 6 and p.sweep_hold == ""


def gone(iid: str, launched: float, ended: float) -> OwnedInstance:
    o = owned(iid, launched=launched)
    return OwnedInstance(o.instance_id, o.cloud, o.region, o.zone, o.instance_type,
                         CloudState.TERMINATED, o.launched_ts, o.group, o.tags, ended)  # fmt: skip


def test_an_instance_the_cloud_terminated_fails_at_once_and_its_slot_is_released():
    rec = draining_record("i-1", "cloud-aws-1", since=NOW - 600)
    nodes = (burst("cloud-aws-1", NodeState.DRAINING, alloc=8),)
    p = sync(records=[rec], own=[gone("i-1", NOW - 700, NOW - 30)], nodes=nodes)
    assert [(m.instance_id, m.to) for m in p.moves] == [("i-1", S.FAILED)]
    assert [(k.instance_id, k.transition) for k in p.kills] == [("i-1", False)]
    assert [(f.node, f.action) for f in p.nodes] == [("cloud-aws-1", "fail")]


def test_a_terminated_instance_the_store_never_recorded_is_still_billed():
    """A store restored from an older copy forgot an instance that has since ended: a closed
    record is rebuilt from the cloud's own launch and end times."""
    p = sync(own=[gone("i-7", NOW - 5400, NOW - 1800)])
    (rec,) = p.orphans
    assert rec.state is S.TERMINATED and rec.origin is InstanceOrigin.ORPHAN
    # billed from the cloud's launch to its end; the steps are dated when the controller saw
    assert [t.cloud_ts for t in rec.history] == [NOW - 5400, NOW - 1800]
    assert rec.launched_ts == NOW - 5400 and rec.entered_state_ts == NOW
    assert p.kills == ()


def test_an_orphan_serves_a_node_slurm_is_powering_up_for_jobs_the_store_forgot():
    """A store restored from an older copy forgot which node an instance was to serve, while
    Slurm powers that node up for a job. The node runs on no machine yet, so the orphan cannot
    be under another busy node: it is bound to the node and joins (measured in the live soak:
    left unbound, Slurm failed the node at its ResumeTimeout and requeued the job)."""
    booting = (burst("cloud-aws-1", NodeState.POWERING_UP, alloc=8),)
    job = Job("77", 8, NOW - 60, state=JobState.RUNNING, start_ts=NOW - 30, nodes=("cloud-aws-1",))
    p = sync(own=[owned("i-9")], nodes=booting, jobs=(job,))
    (rec,) = p.orphans  # first pass: recorded from its tags, the node left alone
    assert p.kills == () and p.nodes == ()
    p = sync(records=[StoredInstance(rec, team="")], own=[owned("i-9")], nodes=booting, jobs=(job,))
    assert [(b.instance_id, b.node) for b in p.bind] == [("i-9", "cloud-aws-1")]
    assert [(m.instance_id, m.to) for m in p.moves] == [("i-9", S.JOINING)]
    assert p.kills == ()


def test_an_orphan_stays_unbound_while_its_pool_has_an_unrecorded_node_running_jobs():
    """It may be the machine under that node: it is neither bound elsewhere nor killed."""
    nodes = (
        burst("cloud-aws-1", NodeState.ALLOCATED, alloc=8),
        burst("cloud-aws-2", NodeState.POWERING_UP, alloc=8),
    )
    jobs = (job_on("cloud-aws-1"), job_on("cloud-aws-2", job_id="78"))
    first = sync(own=[owned("i-9")], nodes=nodes, jobs=jobs)
    assert first.kills == () and [(f.node, f.action) for f in first.nodes] == [
        ("cloud-aws-1", "drain")  # the busy one; the one powering up runs on no machine yet
    ]
    rec = first.orphans[0]
    p = sync(records=[StoredInstance(rec, team="")], own=[owned("i-9")], nodes=nodes, jobs=jobs)
    assert p.bind == () and p.kills == ()
