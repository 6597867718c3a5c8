"""In-memory implementations of the store's ports (`provisioner.ports.store`): plain dicts and
lists, for tests and tools that want a store without a database. One module per port, each
class subclassing its Protocol explicitly, so mypy checks its signatures against the port:

- `MemoryInstances` (`IntentLog` and `InstanceRepo`, one class: they share state),
- `MemoryDecisionLog`, `MemoryLedger`, `MemoryTokenRepo`,
- `MemoryPolicyRepo` (pools, the operator's switches, budgets),
- `MemoryTelemetryRepo` (GPU telemetry and energy marks; its energy rows go to a `MemoryLedger`),
- `MemoryLeaderLease` (the leader lease and `check_fence`, on an injected clock),
- `MemoryRuntimeHistory`, `MemoryClockMarks`, `MemoryJobHistory`, `MemoryGpuUsageLog`.

They keep what callers of the SQL store can observe: the same ordering, filters, defaults,
normalisation (amounts to the micro-dollar, decision details as text, JSON read back as JSON)
and errors, and all-or-nothing writes (a batch is checked and staged before anything is kept).
One contract suite per port (`tests/contract/test_store_*contract.py`) runs the same tests
against these, SQLite and PostgreSQL. What they do not have: a fence on their writes (only
`MemoryLeaderLease.check_fence` refuses; no other write is ever `FencedOut`), durability, and
safety across threads or processes; each class's docstring names its other differences.
"""

from provisioner.store.memory.clocks import MemoryClockMarks
from provisioner.store.memory.decisions import MemoryDecisionLog
from provisioner.store.memory.gpu_usage import MemoryGpuUsageLog
from provisioner.store.memory.instances import MemoryInstances
from provisioner.store.memory.jobs import MemoryJobHistory
from provisioner.store.memory.lease import MemoryLeaderLease
from provisioner.store.memory.ledger import GROUP_KEYS, MemoryLedger
from provisioner.store.memory.policy import MemoryPolicyRepo
from provisioner.store.memory.runtime import MemoryRuntimeHistory
from provisioner.store.memory.telemetry import MemoryTelemetryRepo
from provisioner.store.memory.tokens import MemoryTokenRepo

__all__ = [
    "GROUP_KEYS",
    "MemoryClockMarks",
    "MemoryDecisionLog",
    "MemoryGpuUsageLog",
    "MemoryInstances",
    "MemoryJobHistory",
    "MemoryLeaderLease",
    "MemoryLedger",
    "MemoryPolicyRepo",
    "MemoryRuntimeHistory",
    "MemoryTelemetryRepo",
    "MemoryTokenRepo",
]
