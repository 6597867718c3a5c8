"""The controller's side of the Slurm-driven handoff: take queued power requests and act on them.

`process_power_requests` hands each pending request, oldest first, to a `PowerRequestHandler`
and acknowledges it once the handler returned. A request whose handler raised stays queued and is
tried again on the next pass (handlers must therefore be idempotent, as Slurm's own calls are).
In the full controller the handler creates or terminates cloud instances; in tests and the
embedded default it is the same-host stand-in
(`provisioner.register.same_host_stand_in.SameHostCloudStandIn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from provisioner.register.power_queue import PowerAction, PowerRequest, PowerRequestQueue


class PowerRequestHandler(Protocol):
    def resume(self, nodes: Sequence[str]) -> None: ...

    def suspend(self, nodes: Sequence[str]) -> None: ...

    def resume_failed(self, nodes: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class HandoffResult:
    handled: tuple[PowerRequest, ...]
    failed: tuple[tuple[PowerRequest, str], ...]


def process_power_requests(
    queue: PowerRequestQueue, handler: PowerRequestHandler, now_ts: float
) -> HandoffResult:
    handled: list[PowerRequest] = []
    failed: list[tuple[PowerRequest, str]] = []
    for req in queue.pending():
        try:
            if req.action is PowerAction.RESUME:
                handler.resume([req.node])
            elif req.action is PowerAction.SUSPEND:
                handler.suspend([req.node])
            else:
                handler.resume_failed([req.node])
        except Exception as exc:  # the request stays queued for the next pass
            failed.append((req, f"{type(exc).__name__}: {exc}"))
            continue
        queue.ack([req.request_id], now_ts)
        handled.append(req)
    return HandoffResult(tuple(handled), tuple(failed))
