"""GPU telemetry (latest sample per GPU, latest whole payload per node) and the energy
watermarks, moved together with the energy ledger rows they price. The behaviour each method
promises is written on its port, `provisioner.ports.store.TelemetryRepo`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, select

from provisioner.domain.nodes import GpuSample
from provisioner.domain.records import EnergyMark, LedgerEntry, NodeTelemetry, StoredPayload
from provisioner.ports.store import ConcurrentUpdate, TelemetryRepo
from provisioner.store.ledger import LedgerStore
from provisioner.store.models import EnergyMarkRow, TelemetryPayloadRow, TelemetryRow


class TelemetryStore(LedgerStore, TelemetryRepo):
    """Telemetry and energy marks; a `LedgerStore` because energy rows go through its ledger
    insert, in the same transaction as the marks."""

    # ------------------------------------------------------------------ telemetry

    def upsert_telemetry(self, node: str, samples: Iterable[GpuSample], received_ts: float) -> int:
        given = list(samples)
        n = 0
        with self.transaction() as s:
            if given:
                s.execute(
                    delete(TelemetryRow).where(
                        TelemetryRow.node == node,
                        TelemetryRow.gpu_index.not_in([g.index for g in given]),
                        TelemetryRow.sampled_ts <= max(g.sampled_ts for g in given),
                    )
                )
            for g in given:
                row = s.get(TelemetryRow, (node, g.index))
                if row is None:
                    row = TelemetryRow(node=node, gpu_index=g.index)
                    s.add(row)
                elif row.sampled_ts > g.sampled_ts:
                    continue
                row.uuid = g.uuid
                row.util_pct = g.util_pct
                row.mem_used_mib = g.mem_used_mib
                row.mem_total_mib = g.mem_total_mib
                row.power_w = g.power_w
                row.energy_mj = g.energy_mj
                row.temperature_c = g.temperature_c
                row.sampled_ts = g.sampled_ts
                row.received_ts = received_ts
                n += 1
        return n

    def prune_telemetry(self, before_ts: float) -> int:
        with self.transaction() as s:
            n = 0
            for stmt in (
                delete(TelemetryRow).where(TelemetryRow.received_ts < before_ts),
                delete(TelemetryPayloadRow).where(TelemetryPayloadRow.received_ts < before_ts),
                delete(EnergyMarkRow).where(EnergyMarkRow.updated_ts < before_ts),
            ):
                n += int(getattr(s.execute(stmt), "rowcount", 0) or 0)
            return n

    def telemetry(self, node: str | None = None) -> list[NodeTelemetry]:
        q = select(TelemetryRow).order_by(TelemetryRow.node, TelemetryRow.gpu_index)
        if node is not None:
            q = q.where(TelemetryRow.node == node)
        out: dict[str, list[TelemetryRow]] = {}
        with self.reading() as s:
            for r in s.scalars(q):
                out.setdefault(r.node, []).append(r)
        return [
            NodeTelemetry(
                node=name,
                received_ts=max(r.received_ts for r in rows),
                gpus=tuple(
                    GpuSample(
                        index=r.gpu_index,
                        uuid=r.uuid,
                        util_pct=r.util_pct,
                        mem_used_mib=r.mem_used_mib,
                        mem_total_mib=r.mem_total_mib,
                        power_w=r.power_w,
                        energy_mj=r.energy_mj,
                        temperature_c=r.temperature_c,
                        sampled_ts=r.sampled_ts,
                    )
                    for r in rows
                ),
            )
            for name, rows in out.items()
        ]

    def put_telemetry_payload(
        self,
        node: str,
        sampled_ts: float,
        received_ts: float,
        payload: Mapping[str, Any],
        idle_since: Mapping[int, float],
    ) -> bool:
        with self.transaction() as s:
            row = s.get(TelemetryPayloadRow, node, with_for_update=True)
            if row is None:
                row = TelemetryPayloadRow(node=node)
                s.add(row)
            elif row.sampled_ts > sampled_ts:
                return False
            row.sampled_ts = sampled_ts
            row.received_ts = received_ts
            row.payload = dict(payload)
            row.idle_since = {str(k): float(v) for k, v in idle_since.items()}
            return True

    def telemetry_payloads(self, node: str | None = None) -> list[StoredPayload]:
        q = select(TelemetryPayloadRow).order_by(TelemetryPayloadRow.node)
        if node is not None:
            q = q.where(TelemetryPayloadRow.node == node)
        with self.reading() as s:
            return [
                StoredPayload(
                    r.node,
                    r.sampled_ts,
                    r.received_ts,
                    dict(r.payload or {}),
                    {int(k): float(v) for k, v in (r.idle_since or {}).items()},
                )
                for r in s.scalars(q)
            ]

    def energy_marks(self, node: str | None = None) -> dict[tuple[str, str], EnergyMark]:
        q = select(EnergyMarkRow)
        if node is not None:
            q = q.where(EnergyMarkRow.node == node)
        with self.reading() as s:
            return {
                (r.node, r.gpu_key): EnergyMark(
                    r.node, r.gpu_key, r.sampled_ts, r.energy_mj, r.power_w
                )
                for r in s.scalars(q)
            }

    def commit_energy(
        self,
        entries: Sequence[LedgerEntry],
        marks: Sequence[tuple[EnergyMark | None, EnergyMark]],
        now_ts: float,
    ) -> int:
        # One transaction: the marks, locked, then the ledger rows (and their rollups).
        with self.fenced_transaction() as s:
            for expected, new in marks:
                row = s.get(EnergyMarkRow, (new.node, new.gpu_key), with_for_update=True)
                seen = row.sampled_ts if row is not None else None
                if seen != (expected.sampled_ts if expected is not None else None):
                    raise ConcurrentUpdate(f"energy mark {new.node}/{new.gpu_key} moved")
                if row is None:
                    row = EnergyMarkRow(node=new.node, gpu_key=new.gpu_key)
                    s.add(row)
                row.sampled_ts = new.sampled_ts
                row.energy_mj = new.energy_mj
                row.power_w = new.power_w
                row.updated_ts = now_ts
            return self._insert_ledger(s, entries)
