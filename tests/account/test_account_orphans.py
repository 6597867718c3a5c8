"""Money outside the books (issue 10, item 4): an orphan's running time and an instance's time
before it joined Slurm reach the ledger under their own kinds, the FOCUS export and the team's
budget. Expected values are price x seconds by hand."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from account_helpers import POLICY, T0, terminate

from provisioner.account.budgets import budget_status
from provisioner.account.focus import iter_focus_csv
from provisioner.account.ledger import Accountant
from provisioner.account.reports import cost_report
from provisioner.domain.instances import CloudInstance, InstanceOrigin, InstanceState, Transition
from provisioner.domain.offers import CapacityType, OfferKey

S = InstanceState
P4D_SPOT = OfferKey("aws", "us-east-1", "p4d.24xlarge", CapacityType.SPOT)


def orphan(iid: str, launched: float) -> CloudInstance:
    why = "orphan: found in the cloud by its tags with no record"
    return CloudInstance(
        iid, "aws-a100", P4D_SPOT, "A100", 8, Decimal("9.83"), S.ALLOCATED, launched,
        decision_id="d-lost", history=(Transition(None, S.ALLOCATED, launched, why),),
        origin=InstanceOrigin.ORPHAN,
    )  # fmt: skip


def test_an_orphan_is_billed_from_the_clouds_launch_time_as_kind_orphan(store):
    # found 2 h after the cloud launched it, terminated 1 h later: 3 h at $9.83/h = $29.49
    store.add_instance(orphan("i-o", T0 - 7200), team="vision")
    assert store.instance("i-o").instance.origin is InstanceOrigin.ORPHAN  # stored and read back
    store.transition("i-o", S.TERMINATING, T0 + 3600, "sweep: orphan")
    terminate(store, "i-o", T0 + 3600)
    Accountant(store, POLICY).run(T0 + 7200)
    rows = store.ledger_entries(instance_id="i-o")
    assert {e.kind for e in rows} == {"orphan"}
    assert sum(e.cost for e in rows) == Decimal("29.490000")
    assert min(e.start_ts for e in rows) == T0 - 7200 and max(e.end_ts for e in rows) == T0 + 3600
    report = cost_report(store, ("kind",), T0 - 86_400, T0 + 86_400)
    assert {r.key[0]: r.cost for r in report.rows}["orphan"] == Decimal("29.490000")
    focus = list(csv.DictReader(io.StringIO("".join(iter_focus_csv(store)))))
    assert sum(Decimal(r["BilledCost"]) for r in focus if r["x_CostKind"] == "orphan") == Decimal(
        "29.49"
    )
    # the team's budget counts it: T0 starts a month, so this month's part is the last hour
    team = {t.team: t for t in budget_status(store, T0 + 7200).teams}
    assert team["vision"].spent_usd == Decimal("9.830000")


def test_time_before_an_instance_joined_slurm_is_kind_unbound(store):
    # allocated at T0, joining at T0+300 (bound to a node), ready at T0+400, ended at T0+1000:
    # 300 s unbound and 700 s idle at $36/h = $3.00 and $7.00
    inst = CloudInstance("i-u", "aws-a100", P4D_SPOT, "A100", 8, Decimal("36"), S.ALLOCATED, T0,
                         decision_id="d-u")  # fmt: skip
    store.add_instance(inst, team="vision")
    store.set_node_name("i-u", "cloud-aws-1")
    store.transition("i-u", S.JOINING, T0 + 300, "slurm powering up cloud-aws-1")
    store.transition("i-u", S.READY, T0 + 400, "joined")
    terminate(store, "i-u", T0 + 1000)
    Accountant(store, POLICY).run(T0 + 2000)
    by_kind: dict[str, Decimal] = {}
    for e in store.ledger_entries(instance_id="i-u"):
        by_kind[e.kind] = by_kind.get(e.kind, Decimal(0)) + e.cost
    assert by_kind == {"unbound": Decimal("3.000000"), "idle": Decimal("7.000000")}
