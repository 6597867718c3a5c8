"""`RuntimeHistory` in memory: each name's learned runtimes over a dict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provisioner.ports.store import RuntimeHistory


class MemoryRuntimeHistory(RuntimeHistory):
    """`RuntimeHistory` over a dict.

    Differences from SQL: no fence (`save_runtime_history` is never `FencedOut`). A runtime
    that is not a number is refused on write with the `ValueError` or `TypeError` of `float()`,
    nothing written (the SQL store keeps it and fails when reading it back)."""

    def __init__(self) -> None:
        self._runtimes: dict[str, list[float]] = {}

    def runtime_history(self) -> dict[str, list[float]]:
        return {key: list(self._runtimes[key]) for key in sorted(self._runtimes)}

    def save_runtime_history(self, entries: Mapping[str, Sequence[float]], now_ts: float) -> None:
        staged = {key: [float(v) for v in values] for key, values in entries.items()}
        self._runtimes.update(staged)
