"""The cloud actuator (act/) and the Slurm registrar (register/) on their own, with explicit
dependencies: a real SQLite store, fake cloud and Slurm ports that write down each call. Intent
first, the fence checked before every outside call, errors stored with their category."""

from __future__ import annotations

from decimal import Decimal

import pytest
from reconcile_world import POOL, policy

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.act.pool_specs import OfferSpecs
from provisioner.act.ports import CloudState, GroupStatus, OwnedInstance, PoolSpec
from provisioner.act.scale_up import ScaleUpStep
from provisioner.act.specs import NodeImages
from provisioner.act.terminate import TerminateStep
from provisioner.domain.errors import CapacityError, ProvisionerError, ThrottlingError
from provisioner.domain.failures import ErrorCategory
from provisioner.domain.instances import CloudInstance, InstanceState
from provisioner.domain.intents import IntentKind, IntentStatus, ScaleUpPayload, TerminatePayload
from provisioner.domain.jobs import Job
from provisioner.domain.offers import CapacityType, Offer, OfferKey
from provisioner.domain.plan import Decision, Drain, ReasonCode, ScaleUp
from provisioner.domain.records import NewIntent
from provisioner.plan.backoff import Backoff
from provisioner.plan.catalog import Catalog
from provisioner.reconcile.outcomes import rebuild_backoff
from provisioner.reconcile.sync import TERMINABLE
from provisioner.register.registrar import SlurmRegistrar
from provisioner.store import FencedOut, Store

NOW = 1_800_000_000.0
S = InstanceState
SPOT = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)
ON_DEMAND = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.ON_DEMAND)
OFFER = Offer(
    "aws", "us-east-1", "p4d.24xlarge", "A100", 8, 40, 96, 1152, Decimal("32.77"), Decimal("7.246")
)
SETTINGS = BackoffSettings(300, 3600)
WATCHED = {"record_intent", "confirm", "fail_intent", "check_fence", "transition"}


class Watched:
    """The store, with the calls that matter for ordering written down in `calls`."""

    def __init__(self, store: Store, calls: list[str], *, fenced: bool = False) -> None:
        self._store = store
        self._calls = calls
        self._fenced = fenced

    def check_fence(self) -> None:
        self._calls.append("check_fence")
        if self._fenced:
            raise FencedOut("another controller leads")

    def __getattr__(self, name: str):
        attr = getattr(self._store, name)
        if name not in WATCHED:
            return attr

        def call(*a, **k):
            self._calls.append(name)
            return attr(*a, **k)

        return call


class FakeCapacity:
    cloud = "aws"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.desired: dict[str, int] = {}
        self.fail: dict[CapacityType, Exception] = {}
        self.room: dict[CapacityType, int] = {}  # launches at most this many, reports why not
        self.fail_terminate: Exception | None = None

    def list_owned(self, controller: str) -> list[OwnedInstance]:
        return []

    def group_status(self, spec: PoolSpec) -> GroupStatus:
        d = self.desired.get(spec.group_name, 0)
        room = self.room.get(spec.capacity)
        if room is None or d <= room:
            return GroupStatus(True, d, d)
        return GroupStatus(True, d, room, CapacityError("no room", code="Insufficient"))

    def resize(self, spec: PoolSpec, target: int, token: str) -> None:
        self.calls.append(f"resize:{spec.capacity}:{target}")
        err = self.fail.get(spec.capacity)
        if err is not None and target > self.room.get(spec.capacity, 0):
            raise err
        self.desired[spec.group_name] = target

    def name_node(self, instance: OwnedInstance, node: str) -> None:
        self.calls.append(f"name:{instance.instance_id}:{node}")

    def terminate(self, instance: OwnedInstance, token: str) -> None:
        self.calls.append(f"terminate:{instance.instance_id}")
        if self.fail_terminate is not None:
            raise self.fail_terminate


class FakeDriver:
    def ensure(self, spec: PoolSpec) -> None:
        pass

    def delete(self, spec: PoolSpec) -> None:
        pass


class Ports:
    def __init__(self, capacity: FakeCapacity) -> None:
        self.driver = FakeDriver()
        self.capacity = capacity


@pytest.fixture
def world(db_url):
    store = Store(db_url)
    calls: list[str] = []
    cap = FakeCapacity(calls)
    yield store, calls, cap
    store.close()


def actuator(store, calls, cap, *, fenced: bool = False) -> ScaleUpStep:
    watched = Watched(store, calls, fenced=fenced)
    return ScaleUpStep(
        clouds={"aws": Ports(cap)},  # type: ignore[dict-item]
        intents=watched,  # type: ignore[arg-type]
        fence=watched,  # type: ignore[arg-type]
        specs=OfferSpecs(policy(), Catalog((OFFER,)), images=NodeImages({"aws": "ami-12c6146b"})),
        settings=SETTINGS,
        backoff=Backoff(),
        hook=lambda step: calls.append(f"hook:{step}"),
    )


def terminator(store, calls, cap) -> TerminateStep:
    watched = Watched(store, calls)
    return TerminateStep(
        clouds={"aws": Ports(cap)},  # type: ignore[dict-item]
        intents=watched,  # type: ignore[arg-type]
        records=watched,  # type: ignore[arg-type]
        fence=watched,  # type: ignore[arg-type]
        terminable=TERMINABLE,
        hook=lambda step: calls.append(f"hook:{step}"),
    )


def scale_up(nodes: int = 1) -> ScaleUp:
    return ScaleUp(
        pool=POOL,
        offer=SPOT,
        nodes=nodes,
        gpus_per_node=8,
        usd_per_hour_per_node=Decimal("7.246"),
        job_ids=("1002",),
        decision=Decision("d-1", ReasonCode.BURST_WAIT_EXCEEDS_BUDGET, ("1002",), team="vision"),
        fallbacks=(ON_DEMAND,),
    )


def instance(iid: str = "i-1", state: InstanceState = S.READY, node: str = "burst-1"):
    return CloudInstance(
        iid, POOL, SPOT, "A100", 8, Decimal("7.246"), state, NOW - 600, "d-0", node
    )


def owned(iid: str = "i-1") -> OwnedInstance:
    return OwnedInstance(
        iid, "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", CloudState.RUNNING, 0
    )


# ----------------------------------------------------------------------------- cloud actuator


def test_scale_up_writes_the_intent_then_checks_the_fence_then_resizes(world):
    store, calls, cap = world
    res = actuator(store, calls, cap).scale_up(scale_up(), NOW)
    assert res.placed_nodes == 1 and res.errors == ()
    assert calls == [
        "record_intent",
        "hook:scale_up.after_intent",
        "check_fence",
        "resize:spot:1",
        "hook:scale_up.after_cloud",
        "confirm",
    ]
    (it,) = store.intents(kind=IntentKind.SCALE_UP)
    assert it.status is IntentStatus.CONFIRMED and it.error_category is ErrorCategory.NONE
    assert it.decision_id == "d-1" and it.team == "vision" and it.nodes == 1
    assert it.scale_up_payload == ScaleUpPayload(
        target=1, group=res.outcome.placed[0].group, gpus=8, gpu_model="A100", jobs=("1002",)
    )
    assert it.result == {"added": 1, "target": 1, "group": res.outcome.placed[0].group}


def test_a_fenced_out_controller_makes_no_cloud_call(world):
    store, calls, cap = world
    with pytest.raises(FencedOut):
        actuator(store, calls, cap, fenced=True).scale_up(scale_up(), NOW)
    assert not any(c.startswith("resize") for c in calls)


def test_a_capacity_error_is_stored_with_its_category_and_the_next_offer_is_tried(db_url, world):
    store, calls, cap = world
    cap.fail[CapacityType.SPOT] = CapacityError("no spot", code="InsufficientInstanceCapacity")
    act = actuator(store, calls, cap)
    res = act.scale_up(scale_up(), NOW)
    assert res.placed_nodes == 1
    spot, od = store.intents(kind=IntentKind.SCALE_UP)
    assert (spot.offer, spot.status, spot.error_category) == (
        str(SPOT),
        IntentStatus.FAILED,
        ErrorCategory.CAPACITY,
    )
    assert spot.error_code == "capacity:InsufficientInstanceCapacity"
    assert (od.offer, od.status) == (str(ON_DEMAND), IntentStatus.CONFIRMED)
    assert act.backoff.blocked(SPOT, NOW + 1) and not act.backoff.blocked(ON_DEMAND, NOW + 1)

    restarted = Store(db_url)  # the back-off a restart rebuilds is the one the pass had
    rebuilt = rebuild_backoff(restarted.intents(kind=IntentKind.SCALE_UP), SETTINGS)
    assert set(rebuilt.entries) == set(act.backoff.entries) == {SPOT}
    restarted.close()


def test_a_partial_fill_is_confirmed_with_the_shortfalls_category(world):
    store, calls, cap = world
    cap.room[CapacityType.SPOT] = 1  # two asked, one launched, the group says why
    res = actuator(store, calls, cap).scale_up(scale_up(nodes=2), NOW)
    assert res.placed_nodes == 2  # one on spot, the rest on demand
    spot = next(i for i in store.intents(kind=IntentKind.SCALE_UP) if i.offer == str(SPOT))
    assert spot.status is IntentStatus.CONFIRMED and spot.error_category is ErrorCategory.CAPACITY
    assert spot.result["shortfall_code"] == "capacity:Insufficient"
    assert rebuild_backoff([spot], SETTINGS).blocked(SPOT, NOW + 1)


def test_a_scale_up_without_a_boot_image_fails_before_any_call(world):
    store, calls, cap = world
    act = actuator(store, calls, cap)
    act.specs = OfferSpecs(policy(), Catalog((OFFER,)))  # no image configured anywhere
    res = act.scale_up(scale_up(), NOW)
    assert res.outcome is None and res.errors[0].startswith(f"scale-up {POOL}: ")
    (it,) = store.intents(kind=IntentKind.SCALE_UP)
    assert (it.error_code, it.error_category) == ("config:no_image", ErrorCategory.CONFIG)
    assert it.scale_up_payload.jobs == ("1002",)
    assert not any(c.startswith("resize") for c in calls)


def test_terminate_writes_the_intent_then_checks_the_fence_then_terminates(world):
    store, calls, cap = world
    store.add_instance(instance())
    res = terminator(store, calls, cap).terminate("i-1", owned(), "idle", "d-9", NOW)
    assert res.terminated
    assert calls == [
        "record_intent",
        "hook:terminate.after_intent",
        "check_fence",
        "terminate:i-1",
        "hook:terminate.after_cloud",
        "confirm",
    ]
    (it,) = store.intents(kind=IntentKind.TERMINATE)
    assert it.terminate_payload == TerminatePayload(
        "idle", "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", ""
    )
    assert it.pool == POOL and store.instance("i-1").instance.state is S.TERMINATING


def test_a_failed_terminate_is_stored_with_its_category(world):
    store, calls, cap = world
    store.add_instance(instance())
    cap.fail_terminate = ThrottlingError("slow down", code="Throttling")
    res = terminator(store, calls, cap).terminate("i-1", owned(), "idle", "d-9", NOW)
    assert (res.terminated, res.error) == (False, "terminate i-1: throttling:Throttling")
    (it,) = store.intents(kind=IntentKind.TERMINATE)
    assert it.error_category is ErrorCategory.THROTTLING
    assert store.instance("i-1").instance.state is S.READY


# ----------------------------------------------------------------------------- Slurm registrar


class FakeSlurm:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.broken: set[str] = set()

    def _do(self, what: str) -> None:
        self.calls.append(what)
        if what.split(":")[0] in self.broken:
            raise ProvisionerError(f"{what} refused")

    def drain_and_power_down(self, nodes, reason: str) -> None:
        self._do(f"drain:{nodes}")

    def force_power_down(self, nodes, reason: str) -> None:
        self._do(f"force:{nodes}")

    def mark_failed(self, nodes, reason: str) -> tuple[str, ...]:
        self._do(f"fail:{nodes}")
        return (nodes,)

    def resume(self, nodes) -> None:
        self._do(f"resume:{nodes}")

    def set_address(self, node, address: str, hostname=None) -> None:
        self._do(f"nodeaddr:{node}={address}")

    def set_partitions(self, job_id: str, partitions) -> None:
        if job_id == "bad":
            raise ValueError("bad job id")
        self.calls.append(f"partition:{job_id}={','.join(partitions)}")

    def release(self, job_id: str) -> None:
        self.calls.append(f"release:{job_id}")


def registrar(store, calls, slurm, **kw) -> SlurmRegistrar:
    return SlurmRegistrar(
        records=Watched(store, calls),  # type: ignore[arg-type]
        node_control=kw.get("node_control", slurm),
        job_control=kw.get("job_control", slurm),
        controller="burst-test",
        hook=lambda step: calls.append(f"hook:{step}"),
    )


def job(jid: str, parts: tuple[str, ...] = ("onprem",)) -> Job:
    return Job(jid, 8, NOW - 60, partition=",".join(parts), account="acct-v")


def test_drain_checks_the_fence_then_drains_then_moves_the_record(world):
    store, calls, _ = world
    store.add_instance(instance())
    slurm = FakeSlurm(calls)
    d = Decision("d-2", ReasonCode.SCALE_DOWN_IDLE)
    out = registrar(store, calls, slurm).drain(Drain("burst-1", "i-1", POOL, d), NOW)
    assert out.drained == 1 and out.errors == ()
    assert calls == ["check_fence", "drain:burst-1", "hook:scale_down.during_drain", "transition"]
    assert store.instance("i-1").instance.state is S.DRAINING


def test_a_drain_slurm_refuses_leaves_the_record_ready(world):
    store, calls, _ = world
    store.add_instance(instance())
    slurm = FakeSlurm(calls)
    slurm.broken.add("drain")
    d = Decision("d-2", ReasonCode.SCALE_DOWN_IDLE)
    out = registrar(store, calls, slurm).drain(Drain("burst-1", "i-1", POOL, d), NOW)
    assert out.drained == 0 and out.errors == ("drain burst-1: drain:burst-1 refused",)
    assert store.instance("i-1").instance.state is S.READY


def test_jobs_get_the_pools_partition_once(world):
    store, calls, _ = world
    slurm = FakeSlurm(calls)
    jobs = {"1": job("1"), "2": job("2", ("onprem", "cloud")), "bad": job("bad")}
    out = registrar(store, calls, slurm).move_jobs(["1", "2", "bad", "gone"], "cloud", jobs)
    assert out.jobs_moved == 1 and out.errors == ("job bad: bad job id",)
    assert calls == ["check_fence", "partition:1=onprem,cloud"]


def test_a_job_held_after_a_failed_launch_goes_back_in_the_burst_partition_only(world):
    """The partition is set first (a release alone would put it back on-prem, where 22.05
    cannot launch it), then the hold is released; a job not held that way is left alone."""
    import dataclasses

    store, calls, _ = world
    slurm = FakeSlurm(calls)
    held = dataclasses.replace(job("1", ("onprem", "cloud")), held=True, launch_failed=True)
    jobs = {"1": held, "2": job("2")}
    out = registrar(store, calls, slurm).release_jobs(["1", "2", "gone"], "cloud", jobs)
    assert out.jobs_moved == 1 and out.errors == ()
    assert calls == ["check_fence", "partition:1=cloud", "release:1"]


def test_node_fixes_are_fenced_and_report_what_slurm_refused(world):
    store, calls, _ = world
    slurm = FakeSlurm(calls)
    slurm.broken.add("fail")
    reg = registrar(store, calls, slurm)
    assert reg.fix_node("burst-1", "resume", "back").errors == ()
    assert reg.fix_node("burst-2", "fail", "join timeout").errors == (
        "node burst-2 fail: fail:burst-2 refused",
    )
    assert calls == ["check_fence", "resume:burst-1", "check_fence", "fail:burst-2"]
    calls.clear()
    none = registrar(store, calls, slurm, node_control=None, job_control=None)
    assert none.fix_node("burst-1", "resume", "back").errors == ()
    assert none.move_jobs(["1"], "cloud", {"1": job("1")}).jobs_moved == 0
    assert calls == []  # nothing wired: no call, and no fence to check for one


def test_a_nodes_address_is_set_fenced_and_a_refusal_is_reported(world):
    store, calls, _ = world
    slurm = FakeSlurm(calls)
    reg = registrar(store, calls, slurm)
    assert reg.set_address("burst-1", "10.0.0.11").errors == ()
    slurm.broken.add("nodeaddr")
    assert reg.set_address("burst-2", "10.0.0.12").errors == (
        "node burst-2 nodeaddr=10.0.0.12: nodeaddr:burst-2=10.0.0.12 refused",
    )
    assert calls == [
        "check_fence",
        "nodeaddr:burst-1=10.0.0.11",
        "check_fence",
        "nodeaddr:burst-2=10.0.0.12",
    ]


# ----------------------------------------------------------------------------- recovery


def test_recovery_settles_old_payloads_and_unknown_kinds_with_the_recover_category(world):
    from datetime import UTC, datetime

    from provisioner.clock import ManualClock
    from provisioner.plan.catalog import Catalog
    from provisioner.reconcile.context import PassReport
    from provisioner.reconcile.loop import Reconciler, ReconcilerDeps
    from provisioner.reconcile.recovery import recover_intents

    store, _, _ = world
    clock = ManualClock(datetime.fromtimestamp(NOW, UTC))
    rec = Reconciler(ReconcilerDeps(store, clock, policy(), Catalog((OFFER,))))
    store.record_intent(NewIntent("drain", "tok-k", NOW - 30))  # a kind this version does not know
    # a terminate written by an older version, for a cloud this controller has no port for
    store.record_intent(
        NewIntent("terminate", "tok-t", NOW - 30, instance_id="i-9", payload={"cloud": "gcp"})
    )
    report = PassReport(now_ts=NOW)
    recover_intents(rec.ctx, rec.terminations, NOW, report)
    kind, term = store.intent("tok-k"), store.intent("tok-t")
    assert (kind.error_code, kind.error, kind.error_category) == (
        "unknown_kind",
        "drain",
        ErrorCategory.RECOVER,
    )
    assert (term.error_code, term.error) == ("recover:unknown_cloud", "gcp")
    assert term.error_category is ErrorCategory.RECOVER and report.errors == []
