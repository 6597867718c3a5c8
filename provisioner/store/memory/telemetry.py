"""`TelemetryRepo` in memory: the latest sample per GPU, the latest payload per node and the
energy watermarks, over dicts; energy ledger rows go to a `MemoryLedger`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import EnergyMark, LedgerEntry, NodeTelemetry, StoredPayload
from provisioner.ports.store import ConcurrentUpdate, TelemetryRepo
from provisioner.store.memory.common import json_copy
from provisioner.store.memory.ledger import MemoryLedger

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Kept(Generic[V]):
    """A GPU's sample, a node's payload or a GPU's energy mark, with when it was last written
    (received, or for a mark `commit_energy`'s `now_ts`): what `prune_telemetry` judges."""

    value: V
    at_ts: float


class MemoryTelemetryRepo(TelemetryRepo):
    """`TelemetryRepo` over dicts. `commit_energy` writes its ledger rows to the `MemoryLedger`
    given (or a private one, `self.ledger`), as the SQL store writes them to its ledger in the
    same transaction as the marks.

    Differences from SQL: no fence (`commit_energy` is never `FencedOut`). A payload that is not
    JSON is refused with `StoreError` (the SQL store raises the driver's error). Lengths are not
    checked (PostgreSQL refuses a node name over 128 characters)."""

    def __init__(self, ledger: MemoryLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self._gpus: dict[tuple[str, int], _Kept[GpuSample]] = {}
        self._payloads: dict[str, _Kept[StoredPayload]] = {}
        self._marks: dict[tuple[str, str], _Kept[EnergyMark]] = {}

    # ------------------------------------------------------------------ telemetry

    def upsert_telemetry(self, node: str, samples: Iterable[GpuSample], received_ts: float) -> int:
        given = list(samples)
        staged: dict[tuple[str, int], _Kept[GpuSample]] = {}
        n = 0
        if given:
            newest = max(g.sampled_ts for g in given)
            indexes = {int(g.index) for g in given}
            for key in [
                k
                for k, kept in self._gpus.items()
                if k[0] == node and k[1] not in indexes and kept.value.sampled_ts <= newest
            ]:
                del self._gpus[key]
        for g in given:
            key = (node, int(g.index))
            old = staged.get(key) or self._gpus.get(key)
            if old is not None and old.value.sampled_ts > g.sampled_ts:
                continue  # an older sample never overwrites
            staged[key] = _Kept(_sample(g), float(received_ts))
            n += 1
        self._gpus.update(staged)
        return n

    def prune_telemetry(self, before_ts: float) -> int:
        return (
            _forget(self._gpus, before_ts)
            + _forget(self._payloads, before_ts)
            + _forget(self._marks, before_ts)
        )

    def telemetry(self, node: str | None = None) -> list[NodeTelemetry]:
        per_node: dict[str, list[_Kept[GpuSample]]] = {}
        for key in sorted(self._gpus):
            if node is None or key[0] == node:
                per_node.setdefault(key[0], []).append(self._gpus[key])
        return [
            NodeTelemetry(
                node=name,
                received_ts=max(k.at_ts for k in kept),
                gpus=tuple(k.value for k in kept),
            )
            for name, kept in per_node.items()
        ]

    def put_telemetry_payload(
        self,
        node: str,
        sampled_ts: float,
        received_ts: float,
        payload: Mapping[str, Any],
        idle_since: Mapping[int, float],
    ) -> bool:
        old = self._payloads.get(node)
        if old is not None and old.value.sampled_ts > sampled_ts:
            return False
        stored = StoredPayload(
            node,
            float(sampled_ts),
            float(received_ts),
            json_copy(payload),
            {int(k): float(v) for k, v in idle_since.items()},
        )
        self._payloads[node] = _Kept(stored, float(received_ts))
        return True

    def telemetry_payloads(self, node: str | None = None) -> list[StoredPayload]:
        return [
            _payload_copy(self._payloads[name].value)
            for name in sorted(self._payloads)
            if node is None or name == node
        ]

    # ------------------------------------------------------------------ energy

    def energy_marks(self, node: str | None = None) -> dict[tuple[str, str], EnergyMark]:
        return {
            key: kept.value for key, kept in self._marks.items() if node is None or key[0] == node
        }

    def commit_energy(
        self,
        entries: Sequence[LedgerEntry],
        marks: Sequence[tuple[EnergyMark | None, EnergyMark]],
        now_ts: float,
    ) -> int:
        # Staged on a copy, in the SQL store's order (marks, then rows): a mark that moved or an
        # entry the ledger refuses leaves everything as it was.
        staged = dict(self._marks)
        for expected, new in marks:
            key = (new.node, new.gpu_key)
            old = staged.get(key)
            seen = old.value.sampled_ts if old is not None else None
            if seen != (expected.sampled_ts if expected is not None else None):
                raise ConcurrentUpdate(f"energy mark {new.node}/{new.gpu_key} moved")
            mark = EnergyMark(
                new.node, new.gpu_key, float(new.sampled_ts), new.energy_mj, new.power_w
            )
            staged[key] = _Kept(mark, float(now_ts))
        n = self.ledger.add_ledger(entries)  # checks every entry before it keeps one
        self._marks = staged
        return n


def _forget(kept: dict[K, _Kept[V]], before_ts: float) -> int:
    """Drop what was last written before `before_ts`; returns how many."""
    old = [key for key, k in kept.items() if k.at_ts < before_ts]
    for key in old:
        del kept[key]
    return len(old)


def _sample(g: GpuSample) -> GpuSample:
    """The sample as the SQL store reads it back (numbers as floats)."""
    return replace(
        g,
        index=int(g.index),
        util_pct=float(g.util_pct),
        mem_used_mib=float(g.mem_used_mib),
        mem_total_mib=float(g.mem_total_mib),
        power_w=_float(g.power_w),
        energy_mj=_float(g.energy_mj),
        temperature_c=_float(g.temperature_c),
        sampled_ts=float(g.sampled_ts),
    )


def _float(value: float | None) -> float | None:
    return float(value) if value is not None else None


def _payload_copy(p: StoredPayload) -> StoredPayload:
    """A copy whose payload and idle times (the mutable parts) the caller may change freely."""
    return replace(p, payload=json_copy(p.payload), idle_since=dict(p.idle_since))
