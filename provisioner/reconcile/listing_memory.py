"""What the controller remembers of the clouds' listings between passes, on its own clock:
when it first listed each instance (the orphan grace counts from there), when it last listed
each alive, when a complete listing first lacked a live record's instance, and the start
stamp (the cloud's own, untranslated) each instance was first listed with. A cloud that
forgets a deleted VM (GCE) gives no end stamp; these are what the controller itself saw. A
restart forgets them: the grace then starts again (never shorter), and an end falls back to
the first pass after the restart (never earlier than the truth)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from provisioner.act.ports import OwnedInstance


class ListingMemory:
    def __init__(self) -> None:
        self._first_seen: dict[str, float] = {}
        self._last_alive: dict[str, float] = {}
        self._gone_since: dict[str, float] = {}
        self._first_start: dict[str, float] = {}

    @property
    def first_seen(self) -> Mapping[str, float]:
        return self._first_seen

    @property
    def last_alive(self) -> Mapping[str, float]:
        return self._last_alive

    @property
    def gone_since(self) -> Mapping[str, float]:
        return self._gone_since

    @property
    def first_start(self) -> Mapping[str, float]:
        """Instance id -> the cloud's start stamp when the controller first listed it: a later
        start under the same id is another machine (or the same one booted again)."""
        return self._first_start

    def observe(
        self, owned: Iterable[OwnedInstance], complete: bool, live: Iterable[str], now: float
    ) -> None:
        """One pass's listing (`complete`: every cloud answered) and the ids of the records
        that are not closed."""
        listed: set[str] = set()
        for o in owned:
            listed.add(o.instance_id)
            self._first_seen.setdefault(o.instance_id, now)
            if o.launched_ts is not None:
                self._first_start.setdefault(o.instance_id, o.launched_ts)
            if o.state.alive:
                self._last_alive[o.instance_id] = now
        live_ids = set(live)
        for iid in [i for i in self._gone_since if i not in live_ids or i in listed]:
            del self._gone_since[iid]
        if not complete:
            return
        for iid in live_ids - listed:
            self._gone_since.setdefault(iid, now)
        for seen in (self._first_seen, self._last_alive, self._first_start):
            for iid in [i for i in seen if i not in listed and i not in live_ids]:
                del seen[iid]
