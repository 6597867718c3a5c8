"""Render a review (its `to_dict()` form) as JSON or as Markdown for a pull-request comment.

Both come from the same dict, so they carry the same facts; the Markdown only lays them out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

MAX_RESOURCES_SHOWN = 60
MAX_NAMES_PER_FINDING = 5  # a finding on many resources names a few; the JSON has them all
MAX_VALUE_CHARS = 80


def to_json(review: Mapping[str, Any]) -> str:
    return json.dumps(review, indent=2, sort_keys=False, default=str)


def _money(value: Any, places: int = 2) -> str:
    if value is None:
        return "–"
    d = Decimal(str(value))
    return f"${d:,.{places}f}"


def _delta(value: Any, places: int = 2) -> str:
    d = Decimal(str(value))
    if d == 0:
        return "±$0"
    sign = "+" if d > 0 else "−"
    return f"{sign}${abs(d):,.{places}f}"


def _code(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _range(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "–"
    if r["min"] == r["max"]:
        return f"{_money(r['min'])} ({r['cheapest']})"
    return f"{_money(r['min'])} ({r['cheapest']}); range {_money(r['min'])}–{_money(r['max'])}"


def _counts(c: Mapping[str, int]) -> str:
    return f"+{c['added']} ~{c['changed']} −{c['removed']}"


def _change(p: Mapping[str, Any]) -> str:
    old = "(absent)" if p["old"] is None else _code(p["old"])
    new = "(absent)" if p["new"] is None else _code(p["new"])
    return f"`{p['path']}`: {old} → {new}"


def _summary_line(r: Mapping[str, Any]) -> str:
    s = r["summary"]
    pools, res, vio = s["pools"], s["resources"], s["violations"]
    month = s["cost"]["expected_usd_month"]
    verdict = (
        f"❌ **FAIL**: {vio['mandatory']} mandatory policy violation"
        f"{'s' if vio['mandatory'] != 1 else ''}"
        if r["verdict"] == "fail"
        else "✅ **PASS**: no mandatory policy violation"
    )
    if vio["advisory"]:
        verdict += f" ({vio['advisory']} advisory)"
    mode = "Pulumi mocks" if r["rendering"]["mode"] == "mocks" else "pulumi preview + mocks"
    return (
        f"{verdict} · pools +{pools['added']} ~{pools['changed']} −{pools['removed']} · "
        f"resources +{res['added']} ~{res['changed']} −{res['removed']} · "
        f"expected spend {_money(month['head'])}/month ({_delta(month['delta'])}) · "
        f"rendered with {mode}"
    )


def _pool_table(pools: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| pool | change | resources | on-demand $/h at max size | spot $/h at max size "
        "| expected $/month (base → head) | Δ $/month |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pools:
        base, head = p["cost"]["base"], p["cost"]["head"]
        cost = head or base or {}
        nodes = f"{cost.get('max_nodes', '?')} nodes" if cost else ""
        month = (
            f"{_money(base['expected_usd_month']) if base else '–'} → "
            f"{_money(head['expected_usd_month']) if head else '–'}"
        )
        lines.append(
            f"| `{p['name']}` ({p['cloud']}, {nodes}) | {p['status']} | "
            f"{_counts(p['resource_counts'])} | "
            f"{_cell(_range(cost.get('on_demand_usd_hr_at_max')))} | "
            f"{_cell(_range(cost.get('spot_usd_hr_at_max')))} | {month} | "
            f"{_delta(p['cost']['expected_usd_month_delta'])} |"
        )
    return lines


def _placement(where: Mapping[str, Any]) -> str:
    """zones, subnets, … as one line (lists joined), the cloud's defaults left unsaid."""
    parts = []
    for key, value in where.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        label = key.replace("_", " ")
        parts.append(f"{label} {shown} GB" if key == "root_disk_gb" else f"{label} `{shown}`")
    return "; ".join(p.replace("root disk gb", "root disk") for p in parts)


def _pool_details(p: Mapping[str, Any]) -> list[str]:
    out = [f"<details><summary><b>{p['name']}</b>: {p['status']}</summary>", ""]
    if p["policy_changes"]:
        out.append("Policy: " + "; ".join(_change(c) for c in p["policy_changes"]))
        out.append("")
    groups = p["node_groups"]
    out.append(f"Node groups: {groups['base']} → {groups['head']}.")
    if p.get("placement"):
        out.append("Placement: " + _placement(p["placement"]) + ".")
    head = p["cost"]["head"]
    if head and head["expected_usd_month"] is not None:
        out.append(
            f"Expected use {float(head['expected_use']):.0%} ({head['expected_use_source']}): "
            f"{_money(head['expected_usd_month'])}/month on {head['expected_basis']}, at most "
            f"{_money(head['expected_usd_month_max'])}/month on the dearest allowed option."
        )
    for note in (head or {}).get("notes", []):
        out.append(f"Note: {note}")
    out.append("")
    shown = p["resources"][:MAX_RESOURCES_SHOWN]
    if not shown:
        out.append("No resource changes.")
    for c in shown:
        mark = {"added": "+", "changed": "~", "removed": "−"}[c["status"]]
        out.append(f"- {mark} `{c['display_type']}` `{c['name']}` ({c['status']})")
        for prop in c.get("properties", []):
            out.append(f"  - {_change(prop)}")
    if len(p["resources"]) > len(shown):
        out.append(f"- … and {len(p['resources']) - len(shown)} more (see the JSON report)")
    out += ["", "</details>", ""]
    return out


def _violation_lines(vs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per policy, then one per distinct finding (pool and message), naming the
    resources it holds for: the same finding on 20 templates is one line, not 20."""
    out: list[str] = []
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for v in vs:
        by_policy.setdefault(v["policy"], []).append(v)
    for policy, items in by_policy.items():
        new = sum(1 for v in items if v["new"])
        out.append(
            f"- `{policy}` ({items[0]['level']}): {len(items)} resource"
            f"{'s' if len(items) != 1 else ''}{f', {new} new' if new else ''}"
        )
        findings: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for v in items:
            findings.setdefault((v["pool"] or "–", v["message"]), []).append(v)
        for (pool, message), same in findings.items():
            shown = ", ".join(
                f"`{v['display_type']}` `{v['resource']}`" for v in same[:MAX_NAMES_PER_FINDING]
            )
            more = len(same) - MAX_NAMES_PER_FINDING
            more_text = f" and {more} more (see the JSON report)" if more > 0 else ""
            out.append(f"  - pool {pool}: {_cell(message)} ({shown}{more_text})")
    return out


def _not_applicable(r: Mapping[str, Any]) -> list[str]:
    """Rules that read none of a pool's resources (an AWS-only rule on a GCP pool): they did not
    pass there, they do not apply."""
    by_policy: dict[str, list[str]] = {}
    for p in r["pools"]:
        if p["status"] == "removed":
            continue
        for pv in p.get("policy_verdicts", []):
            if pv["verdict"] == "not applicable":
                by_policy.setdefault(pv["policy"], []).append(p["name"])
    if not by_policy:
        return []
    where = "; ".join(f"`{k}` on {', '.join(f'`{n}`' for n in v)}" for k, v in by_policy.items())
    return [f"Not applicable (the pool has none of the resources the rule reads): {where}.", ""]


def _violations(r: Mapping[str, Any]) -> list[str]:
    vs = r["violations"]
    out = ["### Policy violations", ""]
    if not vs:
        out += [
            f"None: each of the {len(r['policies'])} policies of the pack passes where it applies.",
            "",
        ]
    out += _not_applicable(r)
    if not vs:
        return out
    mandatory = [v for v in vs if v["level"] == "mandatory"]
    others = [v for v in vs if v["level"] != "mandatory"]
    if mandatory:
        out += ["**Mandatory** (these fail the review):", ""]
        out += _violation_lines(mandatory)
        out.append("")
    if others:
        out += [
            f"<details><summary>Advisory: {len(others)} (do not fail the review)</summary>",
            "",
        ]
        out += _violation_lines(others)
        out += ["", "</details>", ""]
    return out


def to_markdown(review: Mapping[str, Any]) -> str:
    r = review
    s = r["summary"]
    hr = s["cost"]["max_usd_hr"]
    lines = [
        "## IaC review: burst pools",
        "",
        _summary_line(r),
        "",
        f"Base: `{r['base']}` → head: `{r['head']}`. Max spend at full size: "
        f"{_money(hr['base'])}/h → {_money(hr['head'])}/h ({_delta(hr['delta'])}/h).",
        "",
    ]
    if r["pools"]:
        lines += _pool_table(r["pools"])
        lines.append("")
    else:
        lines += ["No pools on either side.", ""]
    changed = [p for p in r["pools"] if p["status"] != "unchanged"]
    if changed:
        lines += ["### Changes", ""]
        for p in changed:
            lines += _pool_details(p)
    lines += _violations(r)
    lines += ["### How this was rendered", "", r["rendering"]["note"], ""]
    for group, summary in sorted(r["rendering"]["previews"].items()):
        lines.append(f"- `{group}`: {', '.join(f'{k} {v}' for k, v in sorted(summary.items()))}")
    for group, err in sorted(r["rendering"]["preview_errors"].items()):
        lines.append(f"- `{group}`: preview failed: {_cell(err)}")
    lines.append(
        f"Costs: catalog prices × max nodes; expected spend = expected use "
        f"(default {float(s['cost']['expected_use_default']):.0%}) × 730 h × max nodes × the "
        "cheapest allowed $/h."
    )
    for note in r["notes"]:
        lines.append(f"- {note}")
    return "\n".join(lines).rstrip() + "\n"
