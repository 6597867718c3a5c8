"""What each console page shows, as plain dicts for the templates.

Numbers come from the same functions and renderings as the JSON API (`cost_report` with
`render.report_dict`, `budget_status` with `render.budget_dict`, ...), so a page and the API
answer the same query with the same figures. Times come from the injected clock, never the
wall clock.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from provisioner.account.billing import month_start
from provisioner.account.budgets import CLOUD_KINDS, budget_status, with_forecasts
from provisioner.account.cloud_waste import cloud_waste
from provisioner.account.efficiency import (
    GPU_HOURS,
    efficiency,
    efficiency_dict,
    parse_dimension,
)
from provisioner.account.gpu_waste import DEFAULT_ALERT_MAX_AGE_S, gpu_alerts, gpu_waste
from provisioner.account.known import check_team, window_outside_ledger
from provisioner.account.ledger_query import hourly
from provisioner.account.reports import ReportError, cost_report, parse_group_by, parse_kinds
from provisioner.api import render
from provisioner.api.console.gpu_fleet import gpu_fleet
from provisioner.api.console.paging import Page, cut
from provisioner.api.deps import ApiDeps
from provisioner.api.jobs_view import job_dicts
from provisioner.api.routes.efficiency import efficiency_body
from provisioner.api.telemetry_views import alerts_dict, policy_of, refusals_dict, waste_dict
from provisioner.domain.job_records import JOB_STATES
from provisioner.domain.nodes import NodeKind
from provisioner.domain.plan import ReasonCode
from provisioner.domain.telemetry import DEFAULT_MAX_AGE_S
from provisioner.plan.reasons import kind_of_reason, reason_words

PAGE_GROUPS = ("team", "account", "pool", "node", "slice", "cloud", "kind", "day")
GROUP_LABELS = {
    "team": "Team",
    "account": "Project",
    "pool": "Pool",
    "node": "Node",
    "slice": "Slice",
    "cloud": "Cloud",
    "kind": "Kind",
    "day": "Day",
    "user": "User",
    "partition": "Partition",
    "region": "Region",
}
# A window this short or shorter is charted by UTC hour, a longer one by day.
HOURLY_UP_TO_S = 2 * 86_400.0
HOUR_S = 3600.0
CLOUD_SIDE = set(CLOUD_KINDS)  # job, idle, unbound, orphan: cloud instances
ONPREM_SIDE = {"onprem", "energy"}  # amortised hardware and measured energy


def now_ts(deps: ApiDeps) -> float:
    return deps.clock.now().timestamp()


def parse_when(text: str | None, name: str) -> float | None:
    """A page parameter: ISO date or date-time (UTC when no offset); '' or None: default."""
    if not text:
        return None
    try:
        if len(text) == 10:
            d = date.fromisoformat(text)
            return datetime.combine(d, time(0), tzinfo=UTC).timestamp()
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReportError(f"{name}: {text!r} is not an ISO 8601 date or date-time") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def window(deps: ApiDeps, from_: str | None, to: str | None) -> tuple[float, float]:
    """The API's default window: [start of this UTC month, now) by the injected clock."""
    now = deps.clock.now().astimezone(UTC)
    f = parse_when(from_, "from")
    t = parse_when(to, "to")
    if f is None:
        f = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    if t is None:
        t = now.timestamp()
    if not t > f:
        raise ReportError("'to' must be after 'from'")
    return f, t


# --------------------------------------------------------------------------- overview


def overview(deps: ApiDeps) -> dict[str, Any]:
    store = deps.store
    now = now_ts(deps)
    policy = policy_of(deps)
    snap = deps.snapshot() if deps.snapshot is not None else None
    out: dict[str, Any] = {"now": render.iso(now), "snapshot": None}
    if snap is not None:
        pending = snap.pending
        onprem = {n.name: n for n in snap.nodes_of(NodeKind.ONPREM)}
        by_team: dict[str, int] = defaultdict(int)
        by_project: dict[tuple[str, str], int] = defaultdict(int)
        job_util = _job_util(deps)
        team_util: dict[str, list[float]] = defaultdict(list)
        project_util: dict[tuple[str, str], list[float]] = defaultdict(list)
        for j in snap.running:
            if j.nodes and all(n in onprem for n in j.nodes):
                team = policy.budgets.team_for(j.account)
                by_team[team] += j.gpus
                by_project[(team, j.account or "-")] += j.gpus
                team_util[team] += job_util.get(j.job_id, [])
                project_util[(team, j.account or "-")] += job_util.get(j.job_id, [])
        total = sum(n.gpus for n in onprem.values())
        util = _node_util(deps)
        out["snapshot"] = {
            "taken_at": render.iso(snap.taken_ts),
            "stale": snap.stale,
            "pending_jobs": len(pending),
            "pending_gpus": sum(j.gpus for j in pending),
            "oldest_wait_s": max((now - j.submit_ts for j in pending), default=0.0),
            "running_jobs": len(snap.running),
            "onprem_gpus": total,
            "onprem_alloc": sum(n.gpus_alloc for n in onprem.values()),
            "by_team": [
                (k, n, _mean(team_util.get(k)))
                for k, n in sorted(by_team.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "by_project": [
                (k, n, _mean(project_util.get(k)))
                for k, n in sorted(by_project.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "nodes": [
                {
                    "name": n.name,
                    "gpus": n.gpus,
                    "alloc": n.gpus_alloc,
                    "state": str(n.state),
                    "util_pct": util.get(n.name),
                }
                for n in sorted(onprem.values(), key=lambda n: n.name)
            ],
        }
    counts = store.instance_counts()
    out["instances_by_state"] = [(k, v) for k, v in sorted(counts.items()) if v]
    b = render.budget_dict(budget_status(store, now))
    out["burn"] = b["global"]
    cap = b["global"]["usd_per_hour_cap"]
    burn = Decimal(b["global"]["burn_usd_hr"])
    out["burn_ratio"] = float(burn / Decimal(cap)) if cap not in (None, "0") else None
    # waste at a glance: this month's cloud dollars on instances that never ran a job
    out["waste"] = cloud_waste(store, month_start(now), now + 1.0)
    out["month"] = month_to_date(deps, b, now)
    out["efficiency"] = _month_efficiency(deps, now)
    out["operator"] = render.operator_dict(store.operator_state())
    out["pools"] = [render.pool_dict(p) for p in store.pools()]
    out["decisions"] = [decision_row(d) for d in _decisions(deps, limit=8)]
    out["waiting_policy"] = _waiting_policy(store)
    return out


def _waiting_policy(store: Any) -> dict[str, Any]:
    """The waiting policy in force, chosen from the site's own past: the newest round's."""
    newest = store.decisions(reason=ReasonCode.POLICY_SELECTION.value, limit=1)
    if not newest:
        return {"in_force": "default", "at": None, "why": "", "decision_id": ""}
    d = newest[0]
    return {
        "in_force": d.decision.detail.get("chosen", "default"),
        "at": render.iso(d.created_ts),
        "why": d.decision.detail.get("why", ""),
        "decision_id": d.decision.decision_id,
    }


_EFFICIENCY_TTL_S = 60.0
# by store object (weakly: a closed store's entry goes with it)
_efficiency_cache: weakref.WeakKeyDictionary[Any, tuple[float, float, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def _month_efficiency(deps: ApiDeps, now: float) -> dict[str, Any]:
    """This month's GPU efficiency (all teams). It reads every GPU-hour row of the month, and
    the Overview refreshes every 5 s: computed at most once a minute of the controller's clock
    per store."""
    key = deps.store
    hit = _efficiency_cache.get(key)
    if hit is not None and hit[0] == month_start(now) and 0 <= now - hit[1] < _EFFICIENCY_TTL_S:
        return hit[2]
    _, total = efficiency(deps.store, "team", month_start(now), now + 1.0)
    value = efficiency_dict(total)
    _efficiency_cache[key] = (month_start(now), now, value)
    return value


def month_to_date(deps: ApiDeps, budgets: Mapping[str, Any], now: float) -> dict[str, Any]:
    """What the Overview leads with: this month's spend so far, cloud and on-prem (every ledger
    kind, so the two add up to the month's total), against the teams' monthly cloud budgets."""
    start = month_start(now)
    by_kind = cost_report(deps.store, ("kind",), start, now + 1.0).rows
    cloud_kinds = {str(k) for k in CLOUD_KINDS}
    cloud = sum((r.cost for r in by_kind if str(r.key[0]) in cloud_kinds), Decimal(0))
    onprem = sum((r.cost for r in by_kind if str(r.key[0]) not in cloud_kinds), Decimal(0))
    caps = [Decimal(t["monthly_usd"]) for t in budgets["teams"] if t.get("monthly_usd")]
    budget = sum(caps, Decimal(0)) if caps else None
    return {
        "from": render.iso(start),
        "cloud_usd": f"{cloud:.6f}",
        "onprem_usd": f"{onprem:.6f}",
        "total_usd": f"{cloud + onprem:.6f}",
        "budget_usd": f"{budget:.6f}" if budget is not None else None,
        "budget_share": float(cloud / budget) if budget else None,
    }


# The charts' palette (console.js has the same for series that are not teams).
PALETTE = ("#2456d6", "#38a169", "#dd6b20", "#805ad5", "#d69e2e", "#e53e3e", "#319795",
           "#b83280", "#4a5568", "#2b6cb0", "#9c4221", "#276749")  # fmt: skip


def team_colours(deps: ApiDeps) -> dict[str, str]:
    """One colour per team, the same on every page: teams in name order (those with a budget,
    and those the ledger ever charged), each the next colour of the palette."""
    now = now_ts(deps)
    teams = {t.team for t in budget_status(deps.store, now).teams}
    teams |= {str(r.key[0]) for r in cost_report(deps.store, ("team",), 0.0, now + 1.0).rows}
    ordered = sorted(t for t in teams if t)
    return {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(ordered)}


def _mean(values: list[float] | None) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def _job_util(deps: ApiDeps) -> dict[str, list[float]]:
    """NVML utilisation of each GPU a job has processes on, from the agents' latest payloads."""
    out: dict[str, list[float]] = defaultdict(list)
    for p in deps.store.telemetry_payloads(None):
        for g in p.payload.get("gpus", ()):
            util = g.get("util_pct") if isinstance(g, dict) else None
            if util is None:
                continue
            for job in g.get("jobs", ()):
                out[str(job)].append(float(util))
    return out


def _node_util(deps: ApiDeps) -> dict[str, float]:
    """Mean NVML utilisation per node from the latest pushed samples."""
    out: dict[str, float] = {}
    for t in deps.store.telemetry(None):
        vals = [g.util_pct for g in t.gpus if g.util_pct is not None]
        if vals:
            out[t.node] = round(sum(vals) / len(vals), 1)
    return out


# --------------------------------------------------------------------------- costs


def costs(
    deps: ApiDeps,
    group_by: str,
    from_: str | None,
    to: str | None,
    kind: str | None,
    eff_by: str | None = None,
) -> dict[str, Any]:
    keys = parse_group_by(group_by or "team")
    if len(keys) != 1:
        raise ReportError("group_by: the console groups by one key at a time")
    kinds = parse_kinds(kind)
    f, t = window(deps, from_, to)
    report = render.report_dict(cost_report(deps.store, keys, f, t, kinds=kinds))
    key = keys[0]
    by_hour = t - f <= HOURLY_UP_TO_S
    by_kind = render.report_dict(cost_report(deps.store, ("kind",), f, t))
    side = {"cloud": Decimal(0), "onprem": Decimal(0)}
    window_q = {"from": render.iso(f) or "", "to": render.iso(t) or ""}
    for r in by_kind["rows"]:
        r["side"] = "cloud" if r["kind"] in CLOUD_SIDE else "onprem"
        side[r["side"]] += Decimal(r["cost_usd"])
        r["href"] = ledger_href(window_q | {"kind": r["kind"]})
    kinds_q = {"kind": ",".join(kinds)} if kinds else {}
    total = Decimal(report["total_usd"])
    for r in report["rows"]:
        r["share"] = float(Decimal(r["cost_usd"]) / total) if total else None
        r["href"] = ledger_href(window_q | kinds_q | {key: r[key]})
    eff_key = parse_dimension(eff_by)
    eff = linked_efficiency(deps, eff_key, f, t)
    return {
        "notice": window_outside_ledger(deps.store, f, t, now_ts(deps)),
        "key": key,
        "kind": ",".join(kinds),
        "from": render.iso(f),
        "to": render.iso(t),
        "windows": quick_windows(now_ts(deps)),
        "efficiency": eff,
        "eff_by": eff_key,
        "report": report,
        "by_hour": by_hour,
        "chart": (
            _hourly_chart(deps, key, f, t, kinds)
            if by_hour
            else _daily_chart(deps, key, f, t, kinds, report)
        ),
        "cloud_usd": f"{side['cloud']:.2f}",
        "onprem_usd": f"{side['onprem']:.2f}",
        "cloud_href": ledger_href(window_q | {"kind": ",".join(sorted(CLOUD_SIDE))}),
        "onprem_href": ledger_href(window_q | {"kind": ",".join(sorted(ONPREM_SIDE))}),
        "by_kind": by_kind["rows"],
    }


def linked_efficiency(deps: ApiDeps, key: str, f: float, t: float) -> dict[str, Any]:
    """The efficiency report by `key` over [f, t), each money figure with the link to the
    ledger rows it sums."""
    eff = efficiency_body(deps.store, key, f, t)
    window_q = {"from": render.iso(f) or "", "to": render.iso(t) or ""}
    for e in [*eff["rows"], eff["total"]]:
        of = window_q | ({key: e["key"]} if e is not eff["total"] else {})
        e["href"] = {
            "cost_usd": ledger_href(of),
            "gpu_hours_paid": ledger_href(of | {"unit": GPU_HOURS}),
            "idle_usd": ledger_href(of | {"kind": "idle"}),
            "never_ran_usd": ledger_href(of | {"never_ran": "1"}),
        }
    return eff


def ledger_href(params: Mapping[str, str]) -> str:
    """The console's ledger page of the rows a figure sums (console/ledger_page.py)."""
    return "/ledger?" + urlencode(params)


def _chart(labels: list[str], series: Mapping[str, Mapping[str, object]]) -> dict[str, Any]:
    return {
        "labels": labels,
        "datasets": [
            {"label": name, "data": [float(str(vals.get(x, "0"))) for x in labels]}
            for name, vals in sorted(series.items())
        ],
    }


def _daily_chart(
    deps: ApiDeps, key: str, f: float, t: float, kinds: tuple[str, ...], report: dict[str, Any]
) -> dict[str, Any]:
    """One bar per day, one stack per value of the key."""
    if key == "day":
        days = {r["day"]: r["cost_usd"] for r in report["rows"]}
        return _chart(list(days), {"total": days})
    per_day = render.report_dict(cost_report(deps.store, ("day", key), f, t, kinds=kinds))
    series: dict[str, dict[str, object]] = defaultdict(dict)
    for r in per_day["rows"]:
        series[key_label(r[key])][r["day"]] = r["cost_usd"]
    return _chart(sorted({r["day"] for r in per_day["rows"]}), series)


def _hourly_chart(
    deps: ApiDeps, key: str, f: float, t: float, kinds: tuple[str, ...]
) -> dict[str, Any]:
    """One bar per UTC hour of a short window (a day's single bar says nothing)."""
    label = {}
    h = f // HOUR_S * HOUR_S
    while h < t:
        label[h] = datetime.fromtimestamp(h, UTC).strftime("%m-%d %H:00")
        h += HOUR_S
    series = {
        key_label(name): {label[h]: v for h, v in per_hour.items()}
        for name, per_hour in hourly(deps.store, key, f, t, kinds).items()
    }
    return _chart(list(label.values()), series)


def quick_windows(now: float) -> list[tuple[str, str, str]]:
    """(label, from, to) of the windows every money page offers: today, the last 7 days, this
    month so far, last month (UTC, by the controller's clock)."""
    today = datetime.fromtimestamp(now, UTC).date()
    m0 = today.replace(day=1)
    prev = (m0 - timedelta(days=1)).replace(day=1)
    end = render.iso(now) or ""
    return [
        ("today", today.isoformat(), end),
        ("7 days", (today - timedelta(days=6)).isoformat(), end),
        ("month to date", m0.isoformat(), end),
        ("last month", prev.isoformat(), m0.isoformat()),
    ]


UNATTRIBUTED = "(unattributed)"


def key_label(value: object) -> str:
    """A group's name as shown: rows that no team, account or pool owns (idle on-prem GPUs,
    energy, orphans) get a visible name instead of an empty cell and an empty legend entry."""
    text = str(value)
    return text if text else UNATTRIBUTED


# --------------------------------------------------------------------------- budgets


def budgets(deps: ApiDeps) -> dict[str, Any]:
    from provisioner.reconcile.snapshot_view import spend

    store = deps.store
    now = now_ts(deps)
    status = with_forecasts(store, budget_status(store, now))
    data = render.budget_dict(status)
    # Committed as the budget guard counted it at the last pass: machines requested and not yet
    # serving, including scale-ups the cloud has not listed yet. Without a pass (a standby),
    # what the store holds in flight.
    snap = deps.snapshot() if deps.snapshot is not None else None
    if snap is not None:
        committed = dict(snap.spend.team_committed_usd)
        data["committed_basis"] = "the last pass's budget guard"
    else:
        live = store.instances(live_only=True)
        committed = dict(spend(store, live, [si.instance for si in live], now).team_committed_usd)
        data["committed_basis"] = "instances in flight in the store (no pass yet)"
    month_q = {
        "from": render.iso(status.month_start_ts) or "",
        "to": render.iso(status.month_end_ts) or "",
        "kind": ",".join(sorted(CLOUD_SIDE)),
    }
    for t in data["teams"]:
        t["committed_usd"] = f"{committed.get(t['team'], Decimal(0)):.6f}"
        t["spent_href"] = ledger_href(month_q | {"team": t["team"]})
    # The month's trajectory: cumulative cloud spend per team per day so far, then the forecast
    # (the fleet as it runs now, kept running) to the month's end, against each team's budget.
    if now > status.month_start_ts:
        daily = cost_report(
            store, ("team", "day"), status.month_start_ts, now, kinds=CLOUD_KINDS
        ).rows
    else:
        daily = ()
    days = _days(status.month_start_ts, status.month_end_ts)
    today = datetime.fromtimestamp(now, UTC).date().isoformat()
    burn = {t.team: t.burn_usd_hr for t in status.teams}
    datasets = []
    for team in sorted({str(r.key[0]) for r in daily if r.key[0]} | set(burn)):
        per = {r.key[1]: r.cost for r in daily if r.key[0] == team}
        running = Decimal(0)
        actual: list[float | None] = []
        forecast: list[float | None] = []
        for d in days:
            if d <= today:
                running += per.get(d, Decimal(0))
            actual.append(float(running) if d <= today else None)
            if d >= today:  # at the end of that day, the fleet kept running as now
                end_of_day = datetime.fromisoformat(d).replace(tzinfo=UTC).timestamp() + 86_400
                hours = Decimal(repr(min(end_of_day, status.month_end_ts) - now)) / 3600
                forecast.append(float(running + burn.get(team, Decimal(0)) * hours))
            else:
                forecast.append(None)
        datasets.append({"label": team, "data": actual, "forecast": forecast})
    data["chart"] = {
        "labels": days,
        "datasets": datasets,
        "budgets": {t["team"]: float(t["monthly_usd"]) for t in data["teams"] if t["monthly_usd"]},
    }
    return data


def _days(from_ts: float, to_ts: float) -> list[str]:
    """The UTC days in [from_ts, to_ts), as ISO dates."""
    out = []
    d = datetime.fromtimestamp(from_ts, UTC).date()
    while datetime.combine(d, time(0), tzinfo=UTC).timestamp() < to_ts:
        out.append(d.isoformat())
        d = date.fromordinal(d.toordinal() + 1)
    return out


# --------------------------------------------------------------------------- decisions


def _decisions(
    deps: ApiDeps, *, reason: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    return [render.decision_dict(d) for d in deps.store.decisions(reason=reason, limit=limit)]


def decision_row(d: dict[str, Any]) -> dict[str, Any]:
    return {
        **d,
        "words": reason_words(d["reason"]),
        "kind": kind_of_reason(d["reason"]),
    }


def decisions(
    deps: ApiDeps, job: str | None, team: str | None, reason: str | None, page: Page = Page(1)
) -> dict[str, Any]:
    """A page of decisions, newest first, filtered by job, team and reason."""
    rows, pager = cut(_matching_decisions(deps, job, team, reason, page), page, "decisions")
    if not rows:  # none matched: say so if it is because nobody knows the team
        check_team(deps.store, team, now_ts(deps))
    counts = deps.store.decision_counts()
    return {
        "rows": [decision_row(d) for d in rows],
        "pager": pager,
        "job": job or "",
        "team": team or "",
        "reason": reason or "",
        "reasons": sorted(counts),
        "teams": sorted({d["team"] for d in _decisions(deps, limit=1000) if d["team"]}),
        "words": {k: reason_words(k) for k in counts},
    }


_SCAN_BATCH = 500


def _matching_decisions(
    deps: ApiDeps, job: str | None, team: str | None, reason: str | None, page: Page
) -> list[dict[str, Any]]:
    """The page's decisions (and one more). The store filters by reason; job and team are
    read from each decision, so those filters scan newest first in batches."""
    if not job and not team:
        got = deps.store.decisions(reason=reason or None, limit=page.fetch, offset=page.offset)
        return [render.decision_dict(d) for d in got]
    out: list[dict[str, Any]] = []
    skipped, offset = 0, 0
    while True:
        batch = deps.store.decisions(reason=reason or None, limit=_SCAN_BATCH, offset=offset)
        for sd in batch:
            d = render.decision_dict(sd)
            if (job and job not in d["job_ids"]) or (team and d["team"] != team):
                continue
            if skipped < page.offset:
                skipped += 1
                continue
            out.append(d)
            if len(out) == page.fetch:
                return out
        if len(batch) < _SCAN_BATCH:
            return out
        offset += _SCAN_BATCH


# --------------------------------------------------------------------------- jobs


def jobs(deps: ApiDeps, q: Mapping[str, str], page: Page = Page(1)) -> dict[str, Any]:
    """The Jobs page: the jobs table filtered by state, team, partition, where it ran and the
    node or instance it ran on, a page at a time."""
    keys = ("state", "team", "partition", "where", "ran_on")
    filters = {k: (q.get(k) or "").strip() for k in keys}
    where = filters["where"] if filters["where"] in ("cloud", "onprem") else ""
    state = filters["state"] if filters["state"] in JOB_STATES else ""
    records = deps.store.job_records(
        states={state} if state else None,
        team=filters["team"] or None,
        partition=filters["partition"] or None,
        placement=where or None,
        ran_on=filters["ran_on"] or None,
        limit=page.fetch,
        offset=page.offset,
    )
    records, pager = cut(records, page, "jobs")
    if not records:
        check_team(deps.store, filters["team"], now_ts(deps))
    teams = sorted({r.team for r in deps.store.job_records(limit=2000) if r.team})
    return {
        "rows": job_dicts(deps.store, records),
        "pager": pager,
        **filters,
        "where": where,
        "state": state,
        "states": JOB_STATES,
        "teams": teams,
    }


# --------------------------------------------------------------------------- instances


INSTANCE_STATES = ("live", "ended")


def instances(deps: ApiDeps, q: Mapping[str, str], page: Page = Page(1)) -> dict[str, Any]:
    """A page of instances, newest launch first, filtered by pool and by live or ended, with
    the totals of every instance the filter matches (not only the page's)."""
    state = (q.get("state") or "").strip()
    pool = (q.get("pool") or "").strip()
    if state and state not in INSTANCE_STATES:
        raise ReportError(f"state: {state[:40]!r} is not one of {', '.join(INSTANCE_STATES)}")
    now = now_ts(deps)
    matched = [
        si
        for si in deps.store.instances(pool=pool or None, live_only=state == "live")
        if state != "ended" or si.instance.state.terminal
    ]
    matched.reverse()  # newest launch first
    # Cost: the billed seconds at the instance's hourly price, as the ledger bills them.
    costs = [si.instance.price_usd_hr * Decimal(repr(si.billed_seconds)) / 3600 for si in matched]
    shown, pager = cut(matched[page.offset : page.offset + page.fetch], page, "instances")
    rows = []
    starts: list[float] = []
    ends: list[float] = []
    for si, cost in zip(shown, costs[page.offset :], strict=False):
        d = render.instance_dict(si)
        hist = si.instance.history
        segs: list[dict[str, Any]] = []
        for i, tr in enumerate(hist):
            end = hist[i + 1].at_ts if i + 1 < len(hist) else (si.ended_ts or now)
            segs.append({"state": str(tr.to_state), "from": tr.at_ts, "to": max(end, tr.at_ts)})
        if hist:
            starts.append(hist[0].at_ts)
            ends.append(max(si.ended_ts or now, hist[-1].at_ts))
        d["cost_usd"] = f"{cost:.2f}"
        d["segments"] = segs
        rows.append(d)
    t0 = min(starts, default=now)
    t1 = max(ends, default=now)
    span = max(t1 - t0, 1.0)
    for d in rows:
        for s in d["segments"]:
            s["left"] = round(100 * (s["from"] - t0) / span, 3)
            s["width"] = max(round(100 * (s["to"] - s["from"]) / span, 3), 0.3)
            s["at"] = render.iso(s["from"])
    return {
        "rows": rows,
        "pager": pager,
        "t0": render.iso(t0),
        "t1": render.iso(t1),
        "state": state,
        "pool": pool,
        "states": INSTANCE_STATES,
        "pools": sorted({p.name for p in deps.store.pools()}),
        "total": {
            "count": len(matched),
            "cost_usd": f"{sum(costs, Decimal(0)):.2f}",
            "billed_seconds": sum(si.billed_seconds for si in matched),
        },
    }


# --------------------------------------------------------------------------- GPUs


def gpus(deps: ApiDeps) -> dict[str, Any]:
    now = now_ts(deps)
    policy = policy_of(deps)
    waste = waste_dict(
        gpu_waste(deps.store, policy, now, DEFAULT_MAX_AGE_S), now, DEFAULT_MAX_AGE_S
    )
    alerts = alerts_dict(
        gpu_alerts(deps.store, policy, now, DEFAULT_ALERT_MAX_AGE_S), now, DEFAULT_ALERT_MAX_AGE_S
    )
    today = now // 86_400 * 86_400
    return {
        # today's efficiency and waste per node (a node's name is its row)
        "efficiency": linked_efficiency(deps, "node", today, now) if now > today else None,
        "fleet": gpu_fleet(deps),
        "waste": waste,
        "alerts": alerts,
        "refused": refusals_dict(deps),
    }


# --------------------------------------------------------------------------- IaC reviews


def iac_reviews(deps: ApiDeps, limit: int = 50) -> list[dict[str, Any]]:
    out = []
    for d in _decisions(deps, limit=1000):
        review = d.get("iac_review")
        if review:
            body = review["body"]
            if review["format"] == "json" and isinstance(body, str):
                with contextlib.suppress(ValueError):  # not JSON after all: shown as text
                    body = json.loads(body)
            out.append({"decision": d, "format": review["format"], "body": body})
            if len(out) >= limit:
                break
    return out
