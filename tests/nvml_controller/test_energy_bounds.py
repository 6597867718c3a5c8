"""Issue 16 items 1-2: forged or broken telemetry cannot bill unbounded, back-dated or
never-ending energy, nor overflow the ledger. Expected values are hand-computed."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from nvml_ctl_helpers import T0, make_env, make_policy

from provisioner.account.billing import day_windows, month_start
from provisioner.account.energy import bill_energy
from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import LedgerEntry
from provisioner.store import Store, StoreError

pytestmark = pytest.mark.nvml

H = 3600.0
MJ_PER_KWH = 3_600_000_000


def s(ts: float, energy_mj: float | None = None, power_w: float | None = 300.0) -> GpuSample:
    return GpuSample(
        index=0, uuid="GPU-h-0", util_pct=50.0, power_w=power_w, energy_mj=energy_mj, sampled_ts=ts
    )


def push(store: Store, node: str, g: GpuSample) -> None:
    store.upsert_telemetry(node, [g], g.sampled_ts)


def energy_total(store: Store) -> Decimal:
    return sum((e.cost for e in store.ledger_entries() if e.kind == "energy"), Decimal(0))


def test_day_windows_refuse_times_a_float_cannot_cut_instead_of_looping():
    done: list[object] = []

    def run() -> None:
        try:
            list(day_windows(-1e22, T0))
        except ValueError as exc:
            done.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "day_windows(-1e22, ...) never returned"
    assert done and "1970" in str(done[0])
    with pytest.raises(ValueError):
        list(day_windows(T0, float("inf")))
    assert list(day_windows(T0, T0 + 10)) == [(T0, T0 + 10)]


def test_a_sample_dated_minus_1e22_already_stored_bills_nothing_and_returns(store):
    policy = make_policy()
    push(store, "onprem-1", s(-1e22, energy_mj=0))
    bill_energy(store, policy, T0)
    push(store, "onprem-1", s(T0, energy_mj=1_000_000_000))
    r = bill_energy(store, policy, T0 + 1)
    assert (r.rows, r.skipped) == (0, 1)
    assert energy_total(store) == 0


def test_power_above_the_policy_bound_is_not_believed(store):
    policy = make_policy()
    push(store, "onprem-1", s(T0, power_w=1e12))
    bill_energy(store, policy, T0)
    push(store, "onprem-1", s(T0 + 3000, power_w=1e12))
    r = bill_energy(store, policy, T0 + 3000)
    assert r.rows == 0 and energy_total(store) == 0


def test_a_counter_delta_over_the_power_bound_falls_back_to_plausible_power(store):
    policy = make_policy()  # $0.20/kWh, max 5 kW
    push(store, "onprem-1", s(T0, energy_mj=0, power_w=400.0))
    bill_energy(store, policy, T0)
    # 6e16 mJ in an hour is 16.7 GW: not a GPU. Power says 400 W -> 0.4 kWh -> $0.08.
    push(store, "onprem-1", s(T0 + H, energy_mj=6e16, power_w=400.0))
    bill_energy(store, policy, T0 + H)
    assert energy_total(store) == Decimal("0.080000")


def test_energy_is_never_above_the_models_board_power_times_the_time(store):
    # Issue 30: a counter claiming 4,999 W for an hour on an A100 (400 W board) is not
    # believed; power (390 W, read at both ends) is: 0.39 kWh x $0.20 = $0.078.
    policy = make_policy()
    bounds = {"onprem-1": 400.0}
    push(store, "onprem-1", s(T0, energy_mj=0, power_w=390.0))
    bill_energy(store, policy, T0, power_bound_w=bounds)
    push(store, "onprem-1", s(T0 + H, energy_mj=4999 * 1000 * H, power_w=390.0))
    bill_energy(store, policy, T0 + H, power_bound_w=bounds)
    assert energy_total(store) == Decimal("0.078000")
    # The same counter within the board power (399 W for the next hour) is billed as counted.
    push(store, "onprem-1", s(T0 + 2 * H, energy_mj=(4999 + 399) * 1000 * H, power_w=390.0))
    bill_energy(store, policy, T0 + 2 * H, power_bound_w=bounds)
    assert energy_total(store) == Decimal("0.078000") + Decimal("0.079800")


def test_gaps_longer_than_the_maximum_are_not_billed(store):
    policy = make_policy()  # max_energy_gap_s: 4 h
    push(store, "onprem-1", s(T0, energy_mj=0))
    bill_energy(store, policy, T0)
    push(store, "onprem-1", s(T0 + 3 * 86_400, energy_mj=3 * 24 * MJ_PER_KWH))  # 1 kW, 3 days
    r = bill_energy(store, policy, T0 + 3 * 86_400)
    assert (r.rows, r.skipped) == (0, 1)
    assert energy_total(store) == 0


def test_energy_is_never_billed_into_a_closed_month(store):
    policy = make_policy()
    feb = month_start(T0 + 40 * 86_400)  # 2026-02-01T00:00Z
    assert feb == 1_769_904_000.0
    # A baseline in January, the next sample 1 h later, both seen only on Feb 3rd.
    push(store, "onprem-1", s(feb - 2 * H, energy_mj=0))
    bill_energy(store, policy, feb - 2 * H)
    push(store, "onprem-1", s(feb - H, energy_mj=MJ_PER_KWH))
    r = bill_energy(store, policy, feb + 2 * 86_400)
    assert (r.rows, r.skipped) == (0, 1)
    # Within the grace day of the new month, January is still open: $0.20 for 1 kWh.
    push(store, "onprem-2", s(feb - 2 * H, energy_mj=0))
    bill_energy(store, policy, feb - 2 * H)
    push(store, "onprem-2", s(feb - H, energy_mj=MJ_PER_KWH))
    assert bill_energy(store, policy, feb + H).cost == Decimal("0.200000")


def test_a_ledger_row_over_the_bound_is_refused_and_reports_still_answer(store):
    huge = LedgerEntry(
        start_ts=T0,
        end_ts=T0 + 60,
        kind="energy",
        cost=Decimal("92233720368547.758"),
        node_name="onprem-1",
    )
    with pytest.raises(StoreError, match="over the"):
        store.add_ledger([huge])
    fine = LedgerEntry(start_ts=T0, end_ts=T0 + 60, kind="energy", cost=Decimal("1.5"))
    store.add_ledger([fine] * 3)
    env = make_env(store, make_policy())
    env.at(T0 + H)
    for q in ("", "?group_by=day,team", "?from=1970-01-01&to=2200-01-01&group_by=kind"):
        r = env.client.get(f"/v1/costs{q}", headers=env.h("viewer"))
        assert r.status_code == 200, (q, r.text)
    body = env.client.get("/v1/costs", headers=env.h("viewer")).json()
    assert body["total_usd"] == "4.500000"


def test_telemetry_older_than_the_retention_is_pruned(store):
    from provisioner.account.ledger import Accountant
    from provisioner.domain.snapshot import ClusterSnapshot
    from provisioner.reconcile.accounting_step import AccountingStep
    from provisioner.reconcile.context import PassReport

    policy = make_policy()  # retention 7 days
    push(store, "gone-1", s(T0, energy_mj=0))
    bill_energy(store, policy, T0)
    push(store, "alive-1", s(T0 + 6 * 86_400, energy_mj=0))
    step = AccountingStep(store, policy, Accountant(store, policy))
    now = T0 + 7 * 86_400 + 1
    step.run(ClusterSnapshot(taken_ts=now), now, PassReport(now_ts=now))
    assert [t.node for t in store.telemetry()] == ["alive-1"]
    assert ("gone-1", "GPU-h-0") not in store.energy_marks()
