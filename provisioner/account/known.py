"""What a report may be asked about: teams the site knows, and windows the ledger covers.

An unknown team, or a window wholly outside the ledger, would otherwise answer an empty report
that reads like "nothing was spent": the API answers 404 with the reason, and the console
says it on the page (docs/api.md, "Errors").

- A team is known when the budgets name it, the jobs table holds a job of it, or the ledger
  holds a row of it. Callers check only when their filter matched nothing (a match proves
  the team), so a page that lists something costs no extra query.
- A window is outside the ledger when it starts after now, or ends at or before the ledger's
  first row. An empty ledger (a new site) has no outside: its reports are honestly empty.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from provisioner.domain.errors import NotKnown
from provisioner.ports.store import JobHistory, Ledger, PolicyRepo

DAY_S = 86_400.0
MAX_NAME = 64


class UnknownTeam(NotKnown):
    """A team asked for by name that no budget, job or ledger row names."""


class WindowOutsideLedger(NotKnown):
    """A report window with no ledger row possible in it (after now, or before the first)."""


class KnownReads(Ledger, JobHistory, PolicyRepo, Protocol):
    """The budgets, the jobs table and the ledger."""


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_team(store: KnownReads, team: str | None, now_ts: float) -> None:
    """Raise UnknownTeam unless `team` (when given) is known."""
    if not team:
        return
    if any(b.scope == "team" and b.name == team for b in store.budgets()):
        return
    if store.job_records(team=team, limit=1):
        return
    # the (kind, team) rollup answers the ledger's whole days; the last day from the ledger
    if (team,) in store.grouped_costs(["team"], 0.0, now_ts + DAY_S):
        return
    raise UnknownTeam(
        f"team {team[:MAX_NAME]!r}: no such team (no budget, job or ledger row names it)"
    )


def first_ledger_ts(store: Ledger) -> float | None:
    """When the ledger's first row starts; None for an empty ledger."""
    chunks = store.ledger_export(chunk_rows=1)
    try:
        for chunk in chunks:
            for row in chunk:
                return float(row[0])
        return None
    finally:  # a generator holding a database cursor: let it go now, not at collection
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def window_outside_ledger(store: Ledger, from_ts: float, to_ts: float, now_ts: float) -> str:
    """Why [from_ts, to_ts) can hold no ledger row, or "" when it can."""
    if from_ts > now_ts:
        return (
            f"the window starts at {_iso(from_ts)}, after now ({_iso(now_ts)}): "
            "the ledger has no rows there yet"
        )
    first = first_ledger_ts(store)
    if first is not None and to_ts <= first:
        return (
            f"the window ends at {_iso(to_ts)}, before the ledger's first row "
            f"({_iso(first)}): there is nothing to report there"
        )
    return ""


def check_window(store: Ledger, from_ts: float, to_ts: float, now_ts: float) -> None:
    """Raise WindowOutsideLedger when the window can hold no ledger row."""
    reason = window_outside_ledger(store, from_ts, to_ts, now_ts)
    if reason:
        raise WindowOutsideLedger(reason)
