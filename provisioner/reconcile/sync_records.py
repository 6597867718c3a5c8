"""Records and times sync derives from the listing: an orphan's record rebuilt from its tags,
the stand-in a terminate call needs for an unlisted instance, and when an instance was asked
for or stopped running (the ends of what it is billed for)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from provisioner.act.ports import TAG_CAPACITY, TAG_DECISION, CloudState, OwnedInstance
from provisioner.domain.instances import CloudInstance, InstanceOrigin, Transition
from provisioner.domain.offers import CapacityType, Offer, OfferKey
from provisioner.reconcile.cloud_stamps import CloudStamps
from provisioner.reconcile.sync_model import S, SyncInput


def owned_from_record(inst: CloudInstance) -> OwnedInstance:
    """What a terminate call needs when the listing does not show the instance."""
    return OwnedInstance(
        instance_id=inst.instance_id,
        cloud=inst.offer.cloud,
        region=inst.offer.region,
        zone="",
        instance_type=inst.offer.instance_type,
        state=CloudState.RUNNING,
        launched_ts=inst.launched_ts,
    )


def terminated_at(
    o: OwnedInstance | None, inst: CloudInstance, inp: SyncInput, stamps: CloudStamps
) -> float:
    """When an instance this controller terminated stopped running: the cloud's end stamp
    where it gave one (EC2 lists terminated instances for a while), no earlier than the
    terminate call; else (GCE forgets a deleted VM) the call itself, or the last pass that
    still listed it alive after it. Never when the controller noticed it missing: a pass that
    could not list (a kill, a throttled listing) would bill time the cloud did not."""
    called = inst.entered_state_ts
    if o is not None and o.ended_ts is not None:
        return stamps(o, o.ended_ts, called, inp.now_ts, "termination").ts
    return min(inp.now_ts, max(called, inp.last_alive.get(inst.instance_id, called)))


def asked_at(o: OwnedInstance, inp: SyncInput, stamps: CloudStamps) -> float:
    """The earliest an orphan may be billed from: when it was asked for, as far as the store
    knows (its decision's intent where in view, else the store's first intent, else a day
    back), or earlier on a measured cloud's stamp (`CloudStamps.floor_for`)."""
    day_back = inp.now_ts - inp.closed_window_s
    tag = o.tags.get(TAG_DECISION, "")
    mine = [it.created_ts for it in inp.intents if tag and it.decision_id == tag]
    if mine:
        requested = min(mine)
    elif inp.first_request_ts is not None:
        requested = inp.first_request_ts
    else:
        requested = day_back
    return stamps.floor_for(o, requested, day_back)


def orphan_record(
    o: OwnedInstance,
    offers: Mapping[tuple[str, str, str], Offer],
    now_ts: float,
    stamps: CloudStamps | None = None,
    asked_ts: float | None = None,
) -> CloudInstance:
    """The record of a tagged instance the store does not know, rebuilt from its tags and the
    catalog: found now, billed from the cloud's own launch stamp (translated, and no earlier
    than `asked_ts`, the earliest it can have been asked for) to its termination stamp."""
    stamps = stamps or CloudStamps({})
    lo = now_ts if asked_ts is None else min(asked_ts, now_ts)
    launch = stamps(o, o.launched_ts, lo, now_ts, "launch")
    capacity = CapacityType.SPOT if o.tags.get(TAG_CAPACITY) == "spot" else CapacityType.ON_DEMAND
    offer = offers.get((o.cloud, o.region, o.instance_type))
    price = offer.price(capacity) if offer is not None else None
    if price is None and offer is not None:
        price = offer.ondemand_usd_hr  # no spot price listed: bill the upper bound
    why = f"orphan: found in the cloud by its tags with no record (at {now_ts:.0f})"
    history = [Transition(None, S.ALLOCATED, now_ts, why, launch.ts)]
    if o.state is CloudState.TERMINATED and o.ended_ts is not None:
        end = stamps(o, o.ended_ts, launch.ts, now_ts, "termination")
        history.append(
            Transition(S.ALLOCATED, S.TERMINATED, now_ts, "terminated in the cloud", end.ts)
        )
    return CloudInstance(
        instance_id=o.instance_id,
        pool=o.pool,
        offer=OfferKey(o.cloud, o.region, o.instance_type, capacity),
        gpu_model=offer.gpu_model if offer is not None else "",
        gpus=offer.whole_gpus if offer is not None else 0,
        price_usd_hr=price if price is not None else Decimal(0),
        state=history[-1].to_state,
        launched_ts=launch.ts,
        decision_id=o.tags.get(TAG_DECISION, ""),
        history=tuple(history),
        origin=InstanceOrigin.ORPHAN,
    )
