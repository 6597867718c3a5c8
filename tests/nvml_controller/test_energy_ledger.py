"""Energy of on-prem GPUs into the ledger: counter deltas, power x time, resets, idempotence,
and the rows in `/v1/costs`."""

from __future__ import annotations

from decimal import Decimal

import pytest
from nvml_ctl_helpers import T0, add_burst_instance, make_env, make_policy, usage
from sqlalchemy import inspect

from provisioner.account.energy import bill_energy
from provisioner.account.ledger import Accountant
from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import EnergyMark
from provisioner.store import ConcurrentUpdate, Store, make_engine, migrations

pytestmark = pytest.mark.nvml

H = 3600.0
MJ_PER_KWH = 3_600_000_000


def s(index: int, ts: float, energy_mj: float | None, power_w: float | None = 300.0) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        util_pct=50.0,
        power_w=power_w,
        energy_mj=energy_mj,
        sampled_ts=ts,
    )


def push(store: Store, node: str, *samples: GpuSample) -> None:
    store.upsert_telemetry(node, samples, max(x.sampled_ts for x in samples))


@pytest.fixture
def policy():
    return make_policy()  # $0.20/kWh


def energy_rows(store: Store):
    return [e for e in store.ledger_entries() if e.kind == "energy"]


def test_counter_delta_and_power_times_time_priced_and_split_by_job(store, policy):
    store.record_job_usage([usage("11", "gpu-01", 1, T0 - 10 * H, "acct-v", partition="onprem")])
    push(store, "gpu-01", s(0, T0, 10 * MJ_PER_KWH), s(1, T0, None, power_w=300.0))
    first = bill_energy(store, policy, T0)
    assert (first.baselines, first.rows, first.cost) == (2, 0, 0)

    # One hour later: GPU 0's counter moved by 1 kWh; GPU 1 has no counter, 300 W -> 0.3 kWh.
    push(store, "gpu-01", s(0, T0 + H, 11 * MJ_PER_KWH), s(1, T0 + H, None, power_w=300.0))
    second = bill_energy(store, policy, T0 + H)
    assert second.kwh == Decimal("1.3")
    assert second.cost == Decimal("0.260000")  # 1.3 kWh x $0.20
    rows = energy_rows(store)
    assert {(r.job_id, r.team, r.cost) for r in rows} == {
        ("11", "vision", Decimal("0.130000")),  # one of the node's two GPUs, the whole hour
        ("", "", Decimal("0.130000")),  # what no job used stays visible
    }
    assert all(
        (r.start_ts, r.end_ts, r.unit, r.pool) == (T0, T0 + H, "kWh", "onprem") for r in rows
    )
    assert sum(r.quantity for r in rows) == pytest.approx(1.3)

    # Same samples again: nothing new, however often the loop runs.
    again = bill_energy(store, policy, T0 + H + 30)
    assert (again.rows, again.cost) == (0, 0)
    assert len(energy_rows(store)) == 2


def test_counter_reset_falls_back_to_power_times_time(store, policy):
    push(store, "gpu-01", s(0, T0, 50 * MJ_PER_KWH, power_w=200.0))
    bill_energy(store, policy, T0)
    # The driver was reloaded: the counter restarted near zero.
    push(store, "gpu-01", s(0, T0 + H, 1000, power_w=400.0))
    r = bill_energy(store, policy, T0 + H)
    assert r.kwh == Decimal("0.3")  # mean of 200 W and 400 W for an hour
    assert r.cost == Decimal("0.060000")
    # And the counter is trusted again from the new baseline.
    push(store, "gpu-01", s(0, T0 + 2 * H, 1000 + MJ_PER_KWH // 2, power_w=None))
    assert bill_energy(store, policy, T0 + 2 * H).kwh == Decimal("0.5")


def test_unmeasurable_long_gap_is_skipped_and_tiny_windows_are_held(store, policy):
    push(store, "gpu-01", s(0, T0, None, power_w=300.0))
    bill_energy(store, policy, T0)
    push(store, "gpu-01", s(0, T0 + 5 * H, None, power_w=1.0))  # agent away 5 h, no counter
    r = bill_energy(store, policy, T0 + 5 * H)
    assert (r.skipped, r.rows) == (1, 0)
    push(store, "gpu-01", s(0, T0 + 5 * H + 1, None, power_w=1.0))  # 1 J: < $0.000001
    assert bill_energy(store, policy, T0 + 5 * H + 1).held == 1
    mark = store.energy_marks()[("gpu-01", "GPU-0")]
    assert mark.sampled_ts == T0 + 5 * H  # kept, so the next window includes this second
    push(store, "gpu-01", s(0, T0 + 6 * H, None, power_w=300.0))
    r = bill_energy(store, policy, T0 + 6 * H)
    assert r.rows == 1 and r.kwh == pytest.approx(Decimal("0.1505"))  # (1 W + 300 W) / 2, 1 h


def test_window_across_midnight_is_cut_at_midnight(store, policy):
    midnight = 1_768_089_600.0  # 2026-01-11T00:00:00Z
    push(store, "gpu-01", s(0, midnight - H, 0))
    bill_energy(store, policy, midnight - H)
    push(store, "gpu-01", s(0, midnight + H, 2 * MJ_PER_KWH))
    bill_energy(store, policy, midnight + H)
    rows = sorted(energy_rows(store), key=lambda r: r.start_ts)
    assert [(r.day, r.cost) for r in rows] == [
        ("2026-01-10", Decimal("0.200000")),
        ("2026-01-11", Decimal("0.200000")),
    ]


def test_burst_nodes_and_unlisted_nodes_are_not_billed(store, policy):
    add_burst_instance(store, node="cloud-1")
    for ts in (T0, T0 + H):
        push(store, "cloud-1", s(0, ts, (ts - T0) * 1e6))
        push(store, "gpu-02", s(0, ts, (ts - T0) * 1e6))
        bill_energy(store, policy, ts)
    assert {r.node_name for r in energy_rows(store)} == {"gpu-02"}
    push(store, "gpu-02", s(0, T0 + 2 * H, 2 * H * 1e6))
    assert bill_energy(store, policy, T0 + 2 * H, onprem_nodes={"gpu-03"}).rows == 0


def test_samples_from_the_future_wait(store, policy):
    push(store, "gpu-01", s(0, T0, 0))
    bill_energy(store, policy, T0)
    push(store, "gpu-01", s(0, T0 + H, MJ_PER_KWH))
    assert bill_energy(store, policy, T0 + 10).rows == 0
    assert bill_energy(store, policy, T0 + H).rows == 1


def test_watermark_is_compare_and_set(store, policy):
    push(store, "gpu-01", s(0, T0, 0))
    bill_energy(store, policy, T0)
    stale = EnergyMark("gpu-01", "GPU-0", T0 - 60)
    with pytest.raises(ConcurrentUpdate):
        store.commit_energy([], [(stale, EnergyMark("gpu-01", "GPU-0", T0 + 60))], T0 + 60)
    with pytest.raises(ConcurrentUpdate):  # someone created it first
        store.commit_energy([], [(None, EnergyMark("gpu-01", "GPU-0", T0 + 60))], T0 + 60)
    assert store.energy_marks()[("gpu-01", "GPU-0")].sampled_ts == T0


def test_energy_appears_in_cost_reports_next_to_onprem(store, policy):
    store.record_job_usage([usage("11", "gpu-01", 1, T0, "acct-v", partition="onprem")])
    push(store, "gpu-01", s(0, T0, 0), s(1, T0, 0))
    bill_energy(store, policy, T0)
    push(store, "gpu-01", s(0, T0 + H, MJ_PER_KWH), s(1, T0 + H, MJ_PER_KWH))
    bill_energy(store, policy, T0 + H)
    Accountant(store, policy).bill_onprem(T0 + H)
    env = make_env(store, policy)
    env.at(T0 + 2 * H)
    q = "/v1/costs?group_by=kind,team&from=2026-01-10&to=2026-01-11"
    body = env.client.get(q, headers=env.h("viewer")).json()
    rows = {(r["kind"], r["team"]): r["cost_usd"] for r in body["rows"]}
    assert rows == {
        ("energy", "vision"): "0.200000",  # job 11's GPU: 1 kWh
        ("energy", ""): "0.200000",  # the other GPU, no job
        ("onprem", "vision"): "1.200000",  # amortised: 1 GPU-hour x $1.20
    }
    only = env.client.get(q + "&kind=energy", headers=env.h("viewer")).json()
    assert only["total_usd"] == "0.400000"
    csv = env.client.get(q + "&kind=energy&format=csv", headers=env.h("viewer")).text
    assert "energy,vision,0.200000,1" in csv
    env.client.close()


def test_migration_0002_adds_and_removes_only_its_tables(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.sqlite'}")
    migrations.upgrade(engine)
    new = {"gpu_telemetry_payload", "gpu_energy_marks"}
    assert new <= set(inspect(engine).get_table_names())
    migrations.downgrade(engine, "0001")
    names = set(inspect(engine).get_table_names())
    assert not new & names and {"ledger", "gpu_telemetry"} <= names
    migrations.upgrade(engine)
    assert new <= set(inspect(engine).get_table_names())
    engine.dispose()
