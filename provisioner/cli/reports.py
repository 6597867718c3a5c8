"""`provisioner costs`, `budgets`, `decisions` and `jobs`: the same reports as the console,
read from the API with a token, printed as rich tables, or as JSON / CSV for scripts."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Any

import typer

from provisioner.cli.common import friendly_errors

UrlOpt = Annotated[
    str,
    typer.Option("--url", envvar="PROVISIONER_URL", help="The API's address."),
]
TokenOpt = Annotated[
    str,
    typer.Option(
        "--token",
        envvar="PROVISIONER_TOKEN",
        help="A viewer (or higher) API token.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print CSV.")]
DEFAULT_URL = "http://127.0.0.1:8000"


def _cents(value: Any) -> str:
    """Dollars as people read them: to the cent, with separators (the Decimal stays exact in
    --json and --csv)."""
    return f"{Decimal(str(value)):,.2f}"


def _emit(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    raw: Any,
    as_json: bool,
    as_csv: bool,
    numeric: Sequence[str] = (),
    money: Sequence[str] = (),
) -> None:
    """A report as JSON (the API's answer), CSV (exact figures), or a table that fits the
    terminal: long values fold onto the next line rather than being cut."""
    if as_json and as_csv:
        raise typer.BadParameter("give --json or --csv, not both")
    if as_json:
        typer.echo(json.dumps(raw, indent=2))
        return
    if as_csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(["" if v is None else v for v in r] for r in rows)
        typer.echo(buf.getvalue(), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        right = c in numeric or c in money
        t.add_column(c, justify="right" if right else "left", overflow="fold")
    at = {c: i for i, c in enumerate(columns)}
    for r in rows:
        cells = ["—" if v is None else str(v) for v in r]
        for c in money:
            if r[at[c]] is not None:
                cells[at[c]] = _cents(r[at[c]])
        t.add_row(*cells)
    Console().print(t)


def costs(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    group_by: Annotated[str, typer.Option("--group-by", help="e.g. team,kind")] = "team",
    from_: Annotated[str, typer.Option("--from", help="ISO date or date-time (UTC).")] = "",
    to: Annotated[str, typer.Option("--to", help="ISO date or date-time (UTC).")] = "",
    kind: Annotated[str, typer.Option("--kind", help="job, idle, onprem, energy")] = "",
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Cost report grouped by team, account, user, partition, cloud, region, pool, kind, day."""
    from provisioner.cli.report_client import get_json

    data = get_json(
        url, token, "/v1/costs", {"group_by": group_by, "from": from_, "to": to, "kind": kind}
    )
    keys = list(data["group_by"])
    rows = [[r[k] for k in keys] + [r["cost_usd"], r["ledger_rows"]] for r in data["rows"]]
    _emit(
        f"Costs {data['from']} to {data['to']}: total ${Decimal(data['total_usd']):,.2f}",
        [*keys, "cost_usd", "ledger_rows"],
        rows,
        data,
        as_json,
        as_csv,
        numeric=("ledger_rows",),
        money=("cost_usd",),
    )


def budgets(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Budget status per team: spent, burn, forecast and headroom this month."""
    from provisioner.cli.report_client import get_json

    data = get_json(url, token, "/v1/budgets", {})
    cols = ["team", "monthly_usd", "spent_usd", "burn_usd_hr", "forecast_usd", "headroom_usd"]
    rows = [[t[c] for c in cols] for t in data["teams"]]
    g = data["global"]
    cap = g["usd_per_hour_cap"]
    capped = f" of a ${_cents(cap)}/h cap" if cap is not None else " (no global cap)"
    _emit(
        f"Budgets, month from {data['month_start'][:10]}: burn ${_cents(g['burn_usd_hr'])}/h"
        + capped,
        cols,
        rows,
        data,
        as_json,
        as_csv,
        money=cols[1:],
    )


def decisions(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    reason: Annotated[str, typer.Option("--reason", help="Only this reason code.")] = "",
    job: Annotated[str, typer.Option("--job", help="Only decisions about this job.")] = "",
    team: Annotated[str, typer.Option("--team", help="Only this team's decisions.")] = "",
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Planner decisions, newest first, with the reason in words and the chosen offer."""
    from provisioner.cli.report_client import get_json
    from provisioner.plan.reasons import reason_words

    data = get_json(url, token, "/v1/decisions", {"reason": reason, "limit": limit})
    if job:
        data = [d for d in data if job in d["job_ids"]]
    if team:
        data = [d for d in data if d["team"] == team]
    cols = ["created_at", "decision_id", "reason", "why", "jobs", "team", "chosen"]
    rows = [
        [
            d["created_at"],
            d["decision_id"],
            d["reason"],
            reason_words(d["reason"]),
            " ".join(d["job_ids"]),
            d["team"],
            d["chosen"],
        ]
        for d in data
    ]
    if as_json or as_csv:
        _emit(f"{len(rows)} decision(s)", cols, rows, data, as_json, as_csv)
    else:
        _decision_records(rows)


def _decision_records(rows: Sequence[Sequence[Any]]) -> None:
    """Decisions as records, not a 7-column table: the reason in words is a sentence, and a
    sentence squeezed into a table column at 80 columns is one word a line."""
    import shutil
    import textwrap

    width = max(40, shutil.get_terminal_size((80, 24)).columns)
    out = [f"{len(rows)} decision(s)"]
    for when, did, reason, why, jobs, team, chosen in rows:
        out.append("")
        out.append(f"{when}  {did}  {reason}")
        facts = [("team", team), ("jobs", jobs), ("chosen", chosen), ("why", why)]
        for key, value in facts:
            if value:
                out += textwrap.wrap(
                    f"{key}: {value}", width, initial_indent="  ", subsequent_indent="    ",
                    break_on_hyphens=False,
                )  # fmt: skip
    typer.echo("\n".join(out))


def _duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    m = int(seconds) // 60
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{m}m{int(seconds) % 60:02d}s"


def jobs(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    state: Annotated[str, typer.Option("--state", help="e.g. pending,running")] = "",
    team: Annotated[str, typer.Option("--team", help="Only this team's jobs.")] = "",
    partition: Annotated[str, typer.Option("--partition")] = "",
    where: Annotated[str, typer.Option("--where", help="cloud or onprem")] = "",
    ran_on: Annotated[
        str, typer.Option("--ran-on", help="A node name or instance id it ran on.")
    ] = "",
    from_: Annotated[str, typer.Option("--from", help="ISO date or date-time (UTC).")] = "",
    to: Annotated[str, typer.Option("--to", help="ISO date or date-time (UTC).")] = "",
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Jobs, newest submit first: waited, ran, where, dollars and the decision that placed them."""
    from provisioner.cli.report_client import get_json

    params = {"state": state, "team": team, "partition": partition, "where": where,
              "ran_on": ran_on, "from": from_, "to": to, "limit": limit}  # fmt: skip
    data = get_json(url, token, "/v1/jobs", params)
    cols = ["job", "state", "team", "where", "gpus", "waited", "ran", "usd", "decision"]
    rows = [
        [
            j["job_id"],
            j["state"],
            j["team"],
            j["where"] or "-",
            j["gpus"],
            _duration(j["waited_s"]),
            _duration(j["ran_s"]),
            j["cost_usd"],
            " ".join(j["decision_ids"]) or None,
        ]
        for j in data
    ]
    if as_csv:  # scripts get exact figures
        rows = [
            [*r[:5], j["waited_s"], j["ran_s"], j["cost_usd"], r[8]]
            for r, j in zip(rows, data, strict=True)
        ]
    _emit(
        f"{len(rows)} job(s)", cols, rows, data, as_json, as_csv, numeric=("gpus",), money=("usd",)
    )


def register(app: typer.Typer) -> None:
    app.command("costs")(friendly_errors(costs))
    app.command("budgets")(friendly_errors(budgets))
    app.command("decisions")(friendly_errors(decisions))
    app.command("jobs")(friendly_errors(jobs))
