"""The controller's store: SQLAlchemy 2 over SQLite (WAL, the default) or PostgreSQL (by URL).

The store is a cache of the world plus what only the controller knows: its intents, decisions,
the ledger and the operator's switches. Every method that writes more than one row does so in one
transaction, so a crash leaves either all of it or none of it.

Intent first: `record_intent` before a cloud call (with the idempotency token the call carries),
`confirm` or `fail_intent` after. After a restart `pending_intents()` lists what may or may not
have happened; the loop finds out from the cloud (by tag/token) and confirms or fails each one.

The contract of every method is written on its port (`provisioner.ports.store`): each concern
below subclasses its Protocol, and `Store` is a `ControllerStore`. `provisioner.store.memory`
holds in-memory versions of the same ports.
"""

from provisioner.ports.store import (
    ConcurrentUpdate,
    ControllerStore,
    FencedOut,
    NotFound,
    StoreError,
)
from provisioner.store.clocks import ClockStore
from provisioner.store.decisions import DecisionStore
from provisioner.store.engine import DEFAULT_URL, StoreBase, make_engine
from provisioner.store.gpu_usage import GpuUsageStore
from provisioner.store.instances import InstanceStore
from provisioner.store.jobs import JobStore
from provisioner.store.lease import LeaseStore
from provisioner.store.ledger import LedgerStore
from provisioner.store.policy import PolicyStore
from provisioner.store.runtime import RuntimeHistoryStore
from provisioner.store.telemetry import TelemetryStore
from provisioner.store.tokens import TokenStore

__all__ = [
    "DEFAULT_URL",
    "ConcurrentUpdate",
    "FencedOut",
    "NotFound",
    "Store",
    "StoreBase",
    "StoreError",
    "make_engine",
]


class Store(
    PolicyStore,
    DecisionStore,
    InstanceStore,
    TelemetryStore,
    LedgerStore,
    TokenStore,
    LeaseStore,
    RuntimeHistoryStore,
    ClockStore,
    JobStore,
    GpuUsageStore,
    ControllerStore,
):
    """All reads and writes of the controller's database: one class per concern (policy,
    decisions, intents and instances, telemetry, usage and ledger, tokens, the leader lease,
    learned runtimes, clock marks and cloud skews, the jobs table, hourly GPU usage), all on
    one engine."""
