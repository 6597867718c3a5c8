"""Adoption: a tagged instance the store does not know, matched to the scale-up intent that
launched it (sync's first rule, run before any record is compared with the listing)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from provisioner.act.ports import TAG_DECISION, TAG_GROUP, CloudState, OwnedInstance
from provisioner.domain.cloud_clock import Evidence
from provisioner.domain.instances import CloudInstance, Transition
from provisioner.domain.intents import IntentKind, IntentStatus
from provisioner.domain.offers import OfferKey
from provisioner.domain.records import Intent, StoredInstance
from provisioner.reconcile.cloud_stamps import CloudStamps
from provisioner.reconcile.sync_model import Adopt, S


def group_of(o: OwnedInstance) -> str:
    return o.group or o.tags.get(TAG_GROUP, "")


def intent_capacity(intent: Intent) -> int:
    """How many instances a scale-up intent launched (or may have: a pending one)."""
    if intent.status == "confirmed":
        return int(intent.result.get("added", intent.nodes) or 0)
    return int(intent.nodes or 0)


def plan_adoptions(
    owned: Sequence[OwnedInstance],
    records: Sequence[StoredInstance],
    intents: Sequence[Intent],
    *,
    controller: str,
    now_ts: float,
    stamps: CloudStamps | None = None,
    unknown_floor_ts: float | None = None,
) -> tuple[Adopt, ...]:
    """Match tagged instances the store does not know to the scale-up intents that launched
    them: same node group, the intent has room left, the decision tag preferred (moto lets the
    launch template's tag win over the group's, so the tag alone cannot be trusted)."""
    stamps = stamps or CloudStamps({})
    known = {r.instance.instance_id for r in records}
    used: dict[str, int] = {}
    for r in records:
        if r.intent_token:
            used[r.intent_token] = used.get(r.intent_token, 0) + 1
    by_group: dict[str, list[Intent]] = {}
    for it in intents:
        if it.kind != IntentKind.SCALE_UP or it.status == IntentStatus.FAILED:
            continue
        grp = it.scale_up_payload.group
        if grp:
            by_group.setdefault(grp, []).append(it)
    out: list[Adopt] = []
    fresh = sorted(
        (
            o
            for o in owned
            if o.controller == controller
            and o.instance_id not in known
            and o.state in (CloudState.PENDING, CloudState.RUNNING)
        ),
        key=lambda o: (o.launched_ts or 0.0, o.instance_id),
    )
    for o in fresh:
        cands = [
            it
            for it in by_group.get(group_of(o), [])
            if intent_capacity(it) - used.get(it.token, 0) > 0
        ]
        if not cands:
            continue
        tag = o.tags.get(TAG_DECISION, "")
        it = next((c for c in cands if c.decision_id == tag), cands[0])
        used[it.token] = used.get(it.token, 0) + 1
        # the group's replacement of an interrupted member, or a machine whose request a
        # restored store forgot, was asked for before the intent adopting it
        floor = unknown_floor_ts if unknown_floor_ts is not None else it.created_ts
        asked = stamps.floor_for(o, it.created_ts, floor)
        launch = stamps(o, o.launched_ts, asked, now_ts, "launch")
        out.append(Adopt(it.token, _adopted(o, it, now_ts, launch)))
    return tuple(out)


def _adopted(o: OwnedInstance, it: Intent, now_ts: float, launch: Evidence) -> CloudInstance:
    running = o.state is CloudState.RUNNING
    # Billing starts at the cloud's own launch stamp, translated and clamped: a crash between
    # the launch and this adoption must not lose the time in between (the soak found a tick
    # missing). That holds for a machine launched before the intent too: a group's replacement
    # of an interrupted one, adopted by a later intent, has run (and been billed) since its
    # launch. The step itself is dated now, when the controller saw it running.
    history = [Transition(None, S.REQUESTED, it.created_ts, f"scale-up intent {it.token[:8]}")]
    if running:
        history.append(
            Transition(
                S.REQUESTED,
                S.ALLOCATED,
                max(now_ts, it.created_ts),
                "cloud reports running",
                launch.ts,
            )
        )
    return CloudInstance(
        instance_id=o.instance_id,
        pool=it.pool,
        offer=OfferKey.parse(it.offer),
        gpu_model=it.scale_up_payload.gpu_model,
        gpus=it.scale_up_payload.gpus,
        price_usd_hr=it.price_usd_hr if it.price_usd_hr is not None else Decimal(0),
        state=S.ALLOCATED if running else S.REQUESTED,
        launched_ts=it.created_ts,
        decision_id=it.decision_id,
        history=tuple(history),
    )
