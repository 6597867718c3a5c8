"""Intent first, then the cloud call, then confirm; a crash anywhere leaves consistent rows."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from decimal import Decimal

import pytest
from sqlalchemy import func, select
from store_helpers import T0, make_instance

from provisioner.domain.instances import InstanceState
from provisioner.domain.records import BillingMark, LedgerEntry, NewIntent
from provisioner.store import ConcurrentUpdate, NotFound, Store, StoreError
from provisioner.store.models import InstanceRow, InstanceTransitionRow, LedgerRow, RollupRow


def _run_child(code: str) -> int:
    """Run `code` in a fresh interpreter; it ends with os._exit, the way kill -9 would."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode


def _count(store: Store, model) -> int:
    with store.reading() as s:
        return int(s.execute(select(func.count()).select_from(model)).scalar_one())


def test_crash_after_intent_then_resume_confirms_once(db_url):
    rc = _run_child(
        f"""
        import os
        from provisioner.domain.records import NewIntent
        from provisioner.store import Store
        s = Store({db_url!r})
        s.record_intent(NewIntent("scale_up", "tok-1", {T0}, pool="aws-a100",
                        offer="aws/us-east-1/p4d.24xlarge/on-demand", nodes=1,
                        decision_id="d-1", team="vision"))
        os._exit(137)  # killed before the cloud call returned
        """
    )
    assert rc == 137

    store = Store(db_url)
    pending = store.pending_intents("scale_up")
    assert [i.token for i in pending] == ["tok-1"]
    assert pending[0].team == "vision"
    assert _count(store, InstanceRow) == 0

    # The restarted controller asks the cloud (by the token in the tags): one instance exists.
    inst = make_instance("i-1")
    store.confirm("tok-1", T0 + 30, instances=[inst])
    # It crashes again right after confirming and, on restart, confirms a second time.
    again = store.confirm("tok-1", T0 + 60, instances=[inst])
    assert again.status == "confirmed"
    assert again.completed_ts == T0 + 30
    assert again.result["instance_ids"] == ["i-1"]
    assert store.pending_intents() == []
    assert _count(store, InstanceRow) == 1
    si = store.instance("i-1")
    assert si is not None
    assert si.team == "vision" and si.intent_token == "tok-1"
    assert [t.to_state for t in si.instance.history] == [InstanceState.REQUESTED]
    store.close()


def test_recording_the_same_intent_twice_keeps_one(store):
    a = store.record_intent(NewIntent("scale_up", "tok-2", T0, nodes=2))
    b = store.record_intent(NewIntent("scale_up", "tok-2", T0 + 5, nodes=3))
    assert a == b and b.nodes == 2
    assert len(store.pending_intents()) == 1


def test_failed_intent_is_counted_by_reason(store):
    store.record_intent(NewIntent("scale_up", "tok-a", T0))
    store.record_intent(NewIntent("scale_up", "tok-b", T0))
    store.record_intent(NewIntent("terminate", "tok-c", T0, instance_id="i-9"))
    store.fail_intent("tok-a", T0 + 1, "capacity", "InsufficientInstanceCapacity")
    store.fail_intent("tok-b", T0 + 1, "quota")
    assert store.failed_intent_counts() == {"capacity": 1, "quota": 1}
    assert [i.token for i in store.pending_intents()] == ["tok-c"]
    # A failed intent cannot be failed again with another reason.
    assert store.fail_intent("tok-a", T0 + 2, "other").error_code == "capacity"


def test_confirm_unknown_intent_raises(store):
    with pytest.raises(NotFound):
        store.confirm("nope", T0)


def test_terminate_intent_confirms_with_its_transition(store):
    store.add_instance(make_instance("i-1", state=InstanceState.READY))
    store.record_intent(NewIntent("terminate", "tok-t", T0 + 100, instance_id="i-1"))
    store.confirm("tok-t", T0 + 110, transitions=[("i-1", InstanceState.TERMINATING, "idle 600 s")])
    si = store.instance("i-1")
    assert si is not None and si.instance.state is InstanceState.TERMINATING


def test_crash_inside_a_ledger_transaction_writes_nothing(db_url):
    Store(db_url).close()  # migrate first
    rc = _run_child(
        f"""
        import os
        from decimal import Decimal
        from provisioner.store import Store
        from provisioner.domain.records import LedgerEntry
        s = Store({db_url!r})
        rows = [LedgerEntry({T0} + i, {T0} + i + 1, "job", Decimal("0.01"), team="t")
                for i in range(100)]
        with s.transaction() as session:
            s._insert_ledger(session, rows)
            session.flush()
            os._exit(137)  # killed before commit
        """
    )
    assert rc == 137
    store = Store(db_url)
    assert _count(store, LedgerRow) == 0
    assert _count(store, RollupRow) == 0
    store.close()


def test_a_bad_entry_aborts_the_whole_batch(store):
    good = LedgerEntry(T0, T0 + 10, "job", Decimal("1"), team="t")
    straddling = LedgerEntry(T0 + 86_000, T0 + 87_000, "job", Decimal("1"))
    with pytest.raises(StoreError):
        store.add_ledger([good, straddling])
    assert _count(store, LedgerRow) == 0
    assert _count(store, RollupRow) == 0


def test_commit_billing_refuses_a_moved_watermark(store):
    store.add_instance(make_instance("i-1", state=InstanceState.READY))
    entry = LedgerEntry(T0, T0 + 60, "idle", Decimal("0.5"), instance_id="i-1")
    store.commit_billing([entry], instance_marks=[BillingMark("i-1", None, T0 + 60, 60)])
    with pytest.raises(ConcurrentUpdate):
        store.commit_billing([entry], instance_marks=[BillingMark("i-1", None, T0 + 60, 60)])
    assert _count(store, LedgerRow) == 1
    si = store.instance("i-1")
    assert si is not None and si.billed_until_ts == T0 + 60 and si.billed_seconds == 60


def test_transition_history_rows_follow_the_instance(store):
    store.add_instance(make_instance("i-1"))
    store.transition("i-1", InstanceState.ALLOCATED, T0 + 40, "cloud reports running")
    store.transition("i-1", InstanceState.READY, T0 + 200, "slurmd registered")
    assert _count(store, InstanceTransitionRow) == 3
