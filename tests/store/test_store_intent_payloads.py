"""Intent payloads are typed and round-trip through the store; kinds and statuses are kept as the
same strings as ever; the error category is a column of its own (migration 0007), NULL for rows
written before it, which still back offers off as they did."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text
from store_helpers import T0

from provisioner.act.backoff_feed import BackoffSettings
from provisioner.domain.failures import ErrorCategory
from provisioner.domain.intents import IntentKind, IntentStatus, ScaleUpPayload, TerminatePayload
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import NewIntent
from provisioner.reconcile.outcomes import rebuild_backoff
from provisioner.store import Store, make_engine, migrations

OFFER = "aws/us-east-1/p4d.24xlarge/spot"
SETTINGS = BackoffSettings(300, 3600)


def _raw(store: Store, token: str) -> dict:
    with store.engine.connect() as conn:
        row = conn.execute(
            text("SELECT kind, status, error_category FROM intents WHERE token = :t"), {"t": token}
        ).one()
    return dict(row._mapping)


@pytest.mark.parametrize(
    "payload",
    [
        ScaleUpPayload(target=3, group="burst-g", gpus=8, gpu_model="A100", jobs=("1", "2")),
        ScaleUpPayload(),
        TerminatePayload("idle", "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "burst-g"),
        TerminatePayload(),
    ],
)
def test_payloads_round_trip_through_json(payload):
    assert type(payload).from_json(payload.to_json()) == payload


def test_payload_dicts_written_by_older_versions_still_load():
    # a scale-up that failed before any call kept only its jobs
    assert ScaleUpPayload.from_json({"jobs": ["7"]}) == ScaleUpPayload(jobs=("7",))
    old = ScaleUpPayload.from_json({"target": "2", "gpus": None, "group": "g", "later": 1})
    assert old == ScaleUpPayload(target=2, group="g")
    assert TerminatePayload.from_json({"cloud": "gcp"}) == TerminatePayload(cloud="gcp")


def test_typed_payloads_round_trip_through_the_store(store):
    payload = ScaleUpPayload(target=2, group="burst-g", gpus=8, gpu_model="A100", jobs=("1",))
    store.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-s", T0, pool="burst", payload=payload))
    stop = TerminatePayload("idle", "aws", "us-east-1", "", "p4d.24xlarge", "burst-g")
    store.record_intent(
        NewIntent(IntentKind.TERMINATE, "tok-t", T0, instance_id="i-1", payload=stop)
    )
    s, t = store.intent("tok-s"), store.intent("tok-t")
    assert s is not None and t is not None
    assert s.scale_up_payload == payload and dict(s.payload) == payload.to_json()
    assert t.terminate_payload == stop
    assert s.kind is IntentKind.SCALE_UP and s.status is IntentStatus.PENDING
    # stored as the same strings as before the enums
    assert (
        _raw(store, "tok-s")["kind"] == "scale_up" and _raw(store, "tok-s")["status"] == "pending"
    )
    assert _raw(store, "tok-t")["kind"] == "terminate"


def test_plain_dict_payloads_are_still_accepted(store):
    store.record_intent(NewIntent("scale_up", "tok-d", T0, payload={"target": 1, "group": "g"}))
    it = store.intent("tok-d")
    assert it is not None and it.scale_up_payload == ScaleUpPayload(target=1, group="g")


def test_a_kind_this_version_does_not_know_is_kept_verbatim(store):
    store.record_intent(NewIntent("drain", "tok-x", T0))
    (it,) = store.pending_intents()
    assert isinstance(it.kind, IntentKind) and it.kind == "drain"
    assert it.kind not in (IntentKind.SCALE_UP, IntentKind.TERMINATE)


def test_the_error_category_is_a_column_set_when_the_intent_completes(store):
    for tok in ("tok-a", "tok-b", "tok-c", "tok-p"):
        store.record_intent(NewIntent(IntentKind.SCALE_UP, tok, T0, offer=OFFER))
    failed = store.fail_intent(
        "tok-a", T0 + 1, "capacity:InsufficientInstanceCapacity", category=ErrorCategory.CAPACITY
    )
    assert failed.error_category is ErrorCategory.CAPACITY
    assert _raw(store, "tok-a")["error_category"] == "capacity"
    confirmed = store.confirm("tok-b", T0 + 1)
    assert confirmed.error_category is ErrorCategory.NONE
    assert _raw(store, "tok-b")["error_category"] == ""
    short = store.confirm("tok-c", T0 + 1, result={"added": 1}, category=ErrorCategory.QUOTA)
    assert short.error_category is ErrorCategory.QUOTA
    pending = store.intent("tok-p")
    assert pending is not None and pending.error_category is None
    assert _raw(store, "tok-p")["error_category"] is None
    # a second settlement changes nothing
    again = store.fail_intent("tok-a", T0 + 2, "other", category=ErrorCategory.AUTH)
    assert again.error_category is ErrorCategory.CAPACITY


def test_the_back_off_after_a_restart_comes_from_the_column(db_url):
    s1 = Store(db_url)
    key = OfferKey.parse(OFFER)
    s1.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-1", T0, offer=OFFER))
    # the code's text would say throttling; the column says capacity, and the column wins
    s1.fail_intent("tok-1", T0 + 1, "throttling:odd", category=ErrorCategory.CAPACITY)
    other = "aws/us-east-1/p4d.24xlarge/on-demand"
    s1.record_intent(NewIntent(IntentKind.SCALE_UP, "tok-2", T0, offer=other))
    s1.fail_intent("tok-2", T0 + 1, "capacity:odd", category=ErrorCategory.THROTTLING)
    s1.close()

    s2 = Store(db_url)  # the restarted controller
    b = rebuild_backoff(s2.intents(kind=IntentKind.SCALE_UP), SETTINGS)
    assert b.blocked(key, T0 + 2) and not b.blocked(key, T0 + 302)
    assert not b.blocked(OfferKey.parse(other), T0 + 2)
    s2.close()


def test_0006_rows_without_a_category_upgrade_and_back_off_as_before(db_url):
    engine = make_engine(db_url)
    migrations.upgrade(engine, "0006_runtime_history")
    cols = "token, kind, status, pool, offer, nodes, instance_id, decision_id, team, payload"
    cols += ", created_ts, completed_ts, error_code, error, result"
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO intents ({cols}) VALUES "
                "('old-f', 'scale_up', 'failed', 'burst', :offer, 0, '', 'd-1', '', '{}', "
                ":t0, :t1, 'capacity:InsufficientInstanceCapacity', 'no room', '{}'),"
                "('old-s', 'scale_up', 'confirmed', 'burst', :od, 1, '', 'd-2', '', "
                """'{"target": 1}', :t0, :t1, '', '', '{"shortfall_code": "quota:VcpuLimit"}')"""
            ),
            {
                "offer": OFFER,
                "od": "aws/us-east-1/p4d.24xlarge/on-demand",
                "t0": T0,
                "t1": T0 + 1,
            },
        )
    migrations.upgrade(engine)
    assert "error_category" in {c["name"] for c in inspect(engine).get_columns("intents")}
    engine.dispose()

    store = Store(db_url)
    try:
        old = store.intents(kind=IntentKind.SCALE_UP)
        assert [i.error_category for i in old] == [None, None]
        assert old[1].scale_up_payload.target == 1
        b = rebuild_backoff(old, SETTINGS)
        assert b.blocked(OfferKey.parse(OFFER), T0 + 2)
        assert b.blocked(OfferKey.parse("aws/us-east-1/p4d.24xlarge/on-demand"), T0 + 2)
    finally:
        store.close()

    engine = make_engine(db_url)
    migrations.downgrade(engine, "0006_runtime_history")
    assert "error_category" not in {c["name"] for c in inspect(engine).get_columns("intents")}
    engine.dispose()
