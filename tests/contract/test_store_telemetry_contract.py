"""The `TelemetryRepo` contract (`provisioner.ports.store.TelemetryRepo`): the latest sample of
each GPU (an older one never overwrites), the latest whole payload of each node (by node, JSON
read back as JSON), pruning, and the energy watermarks that `commit_energy` moves together with
its ledger rows, all or nothing, refusing a mark that moved (`ConcurrentUpdate`). On the
in-memory class (`MemoryTelemetryRepo`, its rows going to its `MemoryLedger`), SQLite and
PostgreSQL alike (see test_store_contract.py for how the engines are chosen). Every expected
value is written out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from test_store_contract import DAY, IMPLEMENTATIONS, T0, failing_after

from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import (
    EnergyMark,
    LedgerEntry,
    LedgerKind,
    NodeTelemetry,
    StoredPayload,
)
from provisioner.ports.store import Ledger, TelemetryRepo
from provisioner.store import ConcurrentUpdate, Store, StoreError
from provisioner.store.memory import MemoryTelemetryRepo


@dataclass
class Impl:
    """The telemetry repository and the ledger its energy rows go to."""

    telemetry: TelemetryRepo
    ledger: Ledger


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def impl(db_backend: str, request: pytest.FixtureRequest) -> Iterator[Impl]:
    if db_backend == "memory":
        mem = MemoryTelemetryRepo()
        yield Impl(mem, mem.ledger)
        return
    store = Store(request.getfixturevalue("db_url"))
    try:
        yield Impl(store, store)
    finally:
        store.close()


@pytest.fixture
def tel(impl: Impl) -> TelemetryRepo:
    return impl.telemetry


def gpu(index: int, sampled_ts: float, util: float = 50.0, **kw: Any) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index}", util_pct=util, sampled_ts=sampled_ts, **kw)


# ----------------------------------------------------------------------------- samples


def test_a_sample_reads_back_with_every_field(tel: TelemetryRepo) -> None:
    full = GpuSample(
        index=3,
        uuid="GPU-3f2a",
        util_pct=87.5,
        mem_used_mib=40_000.0,
        mem_total_mib=81_920.0,
        power_w=312.25,
        energy_mj=1_234_567.0,
        temperature_c=66.0,
        sampled_ts=T0 + 1.5,
    )
    assert tel.upsert_telemetry("gpu-1", [full], T0 + 2) == 1
    assert tel.telemetry() == [NodeTelemetry("gpu-1", T0 + 2, (full,))]


def test_an_older_sample_never_overwrites(tel: TelemetryRepo) -> None:
    assert tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 10, 10), gpu(1, T0 + 10, 11)], T0 + 11) == 2
    # GPU 0's sample is older than the one kept; GPU 1's newer.
    assert tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 5, 99), gpu(1, T0 + 20, 7)], T0 + 21) == 1
    assert tel.telemetry() == [
        NodeTelemetry("gpu-1", T0 + 21, (gpu(0, T0 + 10, 10), gpu(1, T0 + 20, 7)))
    ]
    # One as old as the one kept replaces it.
    assert tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 10, 12)], T0 + 30) == 1
    assert tel.telemetry() == [
        NodeTelemetry("gpu-1", T0 + 30, (gpu(0, T0 + 10, 12), gpu(1, T0 + 20, 7)))
    ]


def test_a_node_holds_the_gpus_of_its_latest_sample_only(tel: TelemetryRepo) -> None:
    # Issue 30: 64 phantom GPUs pushed once must not stay listed (and billed) for a week.
    tel.upsert_telemetry("gpu-1", [gpu(i, T0) for i in range(8, 72)], T0)
    tel.upsert_telemetry("gpu-2", [gpu(0, T0)], T0)
    assert tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 15), gpu(1, T0 + 15)], T0 + 16) == 2
    assert tel.telemetry("gpu-1") == [
        NodeTelemetry("gpu-1", T0 + 16, (gpu(0, T0 + 15), gpu(1, T0 + 15)))
    ]
    # An older sample lacking GPU 1 forgets nothing newer than itself.
    assert tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 5)], T0 + 20) == 0
    assert [g.index for t in tel.telemetry("gpu-1") for g in t.gpus] == [0, 1]
    # Another node's GPUs are untouched.
    assert tel.telemetry("gpu-2") == [NodeTelemetry("gpu-2", T0, (gpu(0, T0),))]


def test_telemetry_by_node_then_gpu_index(tel: TelemetryRepo) -> None:
    tel.upsert_telemetry("gpu-2", [gpu(1, T0), gpu(0, T0)], T0 + 1)
    tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 5)], T0 + 6)
    a = NodeTelemetry("gpu-1", T0 + 6, (gpu(0, T0 + 5),))
    b = NodeTelemetry("gpu-2", T0 + 1, (gpu(0, T0), gpu(1, T0)))
    assert tel.telemetry() == [a, b]
    assert tel.telemetry("gpu-2") == [b]
    assert tel.telemetry("gpu-9") == []


def test_a_batch_of_samples_that_breaks_half_way_keeps_none(tel: TelemetryRepo) -> None:
    tel.upsert_telemetry("gpu-1", [gpu(0, T0, 10)], T0)
    with pytest.raises(RuntimeError):
        tel.upsert_telemetry(
            "gpu-1", failing_after([gpu(0, T0 + 5, 20), gpu(1, T0 + 5)], RuntimeError()), T0 + 5
        )
    assert tel.telemetry() == [NodeTelemetry("gpu-1", T0, (gpu(0, T0, 10),))]


# ----------------------------------------------------------------------------- payloads


def test_a_payload_reads_back_as_json_with_its_idle_times(tel: TelemetryRepo) -> None:
    body = {"node": "gpu-1", "gpus": ({"index": 0, "uuid": "GPU-0"},), "xid": [79]}
    assert tel.put_telemetry_payload("gpu-1", T0, T0 + 1, body, {0: T0 - 300, 3: T0 - 60.5})
    # JSON: the tuple reads back as a list; GPU indexes stay integers.
    assert tel.telemetry_payloads() == [
        StoredPayload(
            "gpu-1",
            T0,
            T0 + 1,
            {"node": "gpu-1", "gpus": [{"index": 0, "uuid": "GPU-0"}], "xid": [79]},
            {0: T0 - 300, 3: T0 - 60.5},
        )
    ]


def test_an_older_payload_never_overwrites(tel: TelemetryRepo) -> None:
    assert tel.put_telemetry_payload("gpu-1", T0 + 10, T0 + 11, {"v": 1}, {})
    assert not tel.put_telemetry_payload("gpu-1", T0 + 5, T0 + 12, {"v": 0}, {0: T0})
    assert tel.telemetry_payloads() == [StoredPayload("gpu-1", T0 + 10, T0 + 11, {"v": 1}, {})]
    # One as old replaces it.
    assert tel.put_telemetry_payload("gpu-1", T0 + 10, T0 + 13, {"v": 2}, {1: T0})
    assert tel.telemetry_payloads() == [StoredPayload("gpu-1", T0 + 10, T0 + 13, {"v": 2}, {1: T0})]


def test_payloads_by_node(tel: TelemetryRepo) -> None:
    tel.put_telemetry_payload("gpu-c", T0, T0, {"n": "c"}, {})
    tel.put_telemetry_payload("gpu-a", T0, T0, {"n": "a"}, {})
    tel.put_telemetry_payload("gpu-b", T0, T0, {"n": "b"}, {})
    assert [p.node for p in tel.telemetry_payloads()] == ["gpu-a", "gpu-b", "gpu-c"]
    assert tel.telemetry_payloads("gpu-b") == [StoredPayload("gpu-b", T0, T0, {"n": "b"}, {})]
    assert tel.telemetry_payloads("gpu-z") == []


def test_changing_a_payload_read_back_changes_nothing_stored(tel: TelemetryRepo) -> None:
    tel.put_telemetry_payload("gpu-1", T0, T0, {"gpus": [{"index": 0}]}, {0: T0})
    (got,) = tel.telemetry_payloads()
    got.payload["gpus"].append({"index": 1})
    got.idle_since[5] = T0  # type: ignore[index]
    assert tel.telemetry_payloads() == [
        StoredPayload("gpu-1", T0, T0, {"gpus": [{"index": 0}]}, {0: T0})
    ]


# ----------------------------------------------------------------------------- energy marks


def mark(node: str, key: str, sampled_ts: float, energy_mj: float = 1000.0) -> EnergyMark:
    return EnergyMark(node, key, sampled_ts, energy_mj, 300.0)


def energy(start: float, cost: str, node: str = "gpu-1") -> LedgerEntry:
    return LedgerEntry(
        start,
        start + 60,
        LedgerKind.ENERGY,
        Decimal(cost),
        node_name=node,
        quantity=0.005,
        unit="kWh",
        unit_price=Decimal("0.2"),
    )


def test_energy_marks_by_node_and_gpu(tel: TelemetryRepo) -> None:
    assert tel.energy_marks() == {}
    a, b = mark("gpu-1", "GPU-a", T0), mark("gpu-2", "GPU-b", T0 + 1, energy_mj=5.5)
    assert tel.commit_energy([], [(None, a), (None, b)], T0 + 2) == 0
    assert tel.energy_marks() == {("gpu-1", "GPU-a"): a, ("gpu-2", "GPU-b"): b}
    assert tel.energy_marks("gpu-2") == {("gpu-2", "GPU-b"): b}
    assert tel.energy_marks("gpu-9") == {}


def test_commit_energy_writes_the_rows_and_moves_the_marks(impl: Impl) -> None:
    tel = impl.telemetry
    first = mark("gpu-1", "GPU-a", T0)
    tel.commit_energy([], [(None, first)], T0)
    moved = mark("gpu-1", "GPU-a", T0 + 60, energy_mj=19_000.0)
    rows = [energy(T0, "0.001"), energy(T0, "0.002", node="gpu-2")]
    assert tel.commit_energy(rows, [(first, moved)], T0 + 61) == 2
    assert tel.energy_marks() == {("gpu-1", "GPU-a"): moved}
    assert impl.ledger.ledger_entries() == rows
    assert impl.ledger.ledger_total() == Decimal("0.003")


def test_a_mark_that_moved_since_it_was_read_aborts_the_whole_write(impl: Impl) -> None:
    tel = impl.telemetry
    a, b = mark("gpu-1", "GPU-a", T0), mark("gpu-1", "GPU-b", T0)
    tel.commit_energy([], [(None, a), (None, b)], T0)
    a2, b2 = mark("gpu-1", "GPU-a", T0 + 60), mark("gpu-1", "GPU-b", T0 + 60)
    # b was read before it was first written: it moved since. a, which is right, does not
    # move either, and the row is not written.
    with pytest.raises(ConcurrentUpdate):
        tel.commit_energy([energy(T0, "0.5")], [(a, a2), (None, b2)], T0 + 61)
    # A mark read at another time than the one kept.
    with pytest.raises(ConcurrentUpdate):
        tel.commit_energy([energy(T0, "0.5")], [(mark("gpu-1", "GPU-a", T0 + 1), a2)], T0 + 61)
    # A mark read that is not there any more (or never was).
    c, c2 = mark("gpu-1", "GPU-c", T0), mark("gpu-1", "GPU-c", T0 + 60)
    with pytest.raises(ConcurrentUpdate):
        tel.commit_energy([], [(c, c2)], T0 + 61)
    assert tel.energy_marks() == {("gpu-1", "GPU-a"): a, ("gpu-1", "GPU-b"): b}
    assert impl.ledger.ledger_entries() == []


def test_an_entry_the_ledger_refuses_moves_no_mark(impl: Impl) -> None:
    tel = impl.telemetry
    a = mark("gpu-1", "GPU-a", T0)
    tel.commit_energy([], [(None, a)], T0)
    straddling = LedgerEntry(T0 + DAY - 30, T0 + DAY + 30, LedgerKind.ENERGY, Decimal("1"))
    with pytest.raises(StoreError):
        tel.commit_energy(
            [energy(T0, "0.5"), straddling], [(a, mark("gpu-1", "GPU-a", T0 + 60))], T0 + 61
        )
    assert tel.energy_marks() == {("gpu-1", "GPU-a"): a}
    assert impl.ledger.ledger_entries() == []


# ----------------------------------------------------------------------------- pruning


def test_prune_forgets_what_was_last_heard_of_before_the_cut(tel: TelemetryRepo) -> None:
    tel.upsert_telemetry("gpu-old", [gpu(0, T0), gpu(1, T0)], T0)
    tel.upsert_telemetry("gpu-new", [gpu(0, T0 + 100)], T0 + 100)
    tel.put_telemetry_payload("gpu-old", T0, T0, {"v": 1}, {})
    tel.put_telemetry_payload("gpu-new", T0 + 100, T0 + 100, {"v": 2}, {})
    old, new = mark("gpu-old", "GPU-o", T0), mark("gpu-new", "GPU-n", T0 + 100)
    tel.commit_energy([], [(None, old)], T0)  # marks are judged by when they were moved
    tel.commit_energy([], [(None, new)], T0 + 100)
    # Two GPUs, one payload, one mark.
    assert tel.prune_telemetry(T0 + 50) == 4
    assert tel.telemetry() == [NodeTelemetry("gpu-new", T0 + 100, (gpu(0, T0 + 100),))]
    assert tel.telemetry_payloads() == [StoredPayload("gpu-new", T0 + 100, T0 + 100, {"v": 2}, {})]
    assert tel.energy_marks() == {("gpu-new", "GPU-n"): new}
    # The cut is exclusive: what was heard of at it stays.
    assert tel.prune_telemetry(T0 + 100) == 0
    # A node that comes back starts from a fresh energy baseline: no mark to compare with.
    assert tel.commit_energy([], [(None, mark("gpu-old", "GPU-o", T0 + 200))], T0 + 200) == 0


def test_a_sample_kept_fresh_by_a_newer_arrival_is_not_pruned(tel: TelemetryRepo) -> None:
    # A GPU's received time is its last accepted sample's: an older sample arriving later does
    # not refresh it.
    tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 10)], T0 + 10)
    tel.upsert_telemetry("gpu-1", [gpu(0, T0 + 5)], T0 + 90)
    assert tel.prune_telemetry(T0 + 50) == 1
    assert tel.telemetry() == []
