"""The web console: server-rendered pages (Jinja2) on the API's FastAPI app, at `/`.

`mount_console(app)` adds the pages, the sign-in and the operator forms; `create_app` calls it.
Every asset is served from `provisioner/api/console/static` (htmx and Chart.js are vendored there
with their licences), so the console works with no internet. Pages need a session (see
`sessions.py`); operator forms need the operator role and the session's CSRF token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from provisioner.account.focus import FocusOptions, iter_focus_csv
from provisioner.account.reports import ReportError, cost_report, parse_group_by, report_to_csv
from provisioner.api.auth import Role, verify_token
from provisioner.api.console import views
from provisioner.api.console.drill import instance_page, job_page
from provisioner.api.console.ledger_page import ledger_page
from provisioner.api.console.paging import page_of
from provisioner.api.console.sessions import COOKIE, Session, Sessions, can_operate, csrf_ok
from provisioner.api.deps import ApiDeps
from provisioner.domain.errors import NotKnown

log = logging.getLogger("provisioner.console")
HERE = Path(__file__).resolve().parent
MAX_FORM_BYTES = 16_384
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'"
)
PAGES = (
    ("overview", "/", "Overview"),
    ("costs", "/costs", "Costs"),
    ("budgets", "/budgets", "Budgets"),
    ("decisions", "/decisions", "Decisions"),
    ("jobs", "/jobs", "Jobs"),
    ("instances", "/instances", "Instances"),
    ("gpus", "/gpus", "GPUs"),
    ("iac", "/iac", "IaC reviews"),
    ("whatif", "/whatif", "What-if"),
)


def _money(value: Any, places: int = 2) -> str:
    if value is None or value == "":
        return "—"
    return f"${float(value):,.{places}f}"


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "—"
    s = int(float(seconds))
    if s < 60:
        return f"{s}s"
    m = s // 60
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m"


def _when(iso: Any) -> str:
    """'2026-12-01T20:17:41.854891Z' -> '2026-12-01 20:17:41Z' (the data attributes keep it all)."""
    if not iso:
        return "—"
    text = str(iso).replace("T", " ")
    return text.split(".")[0].removesuffix("Z") + "Z"


def _templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters["money"] = _money
    t.env.filters["duration"] = _duration
    t.env.filters["when"] = _when
    t.env.filters["key_label"] = views.key_label
    t.env.globals["pages"] = PAGES
    return t


def _without_page(q: Any) -> str:
    """A page's query string without `page`: what the pager's links add their page to."""
    return urlencode([(k, v) for k, v in q.multi_items() if k != "page" and v])


def _deps(request: Request) -> ApiDeps:
    deps: ApiDeps = request.app.state.deps
    return deps


def _sessions(request: Request) -> Sessions:
    s: Sessions = request.app.state.console_sessions
    return s


def _session(request: Request) -> Session | None:
    deps = _deps(request)
    return _sessions(request).get(
        request.cookies.get(COOKIE), deps.store, now_ts=deps.clock.now().timestamp()
    )


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body, first value per field (the console posts no files).

    A browser names the page a form came from in `Origin`: a post from another site is refused
    before anything else (defence in depth beside the CSRF token, and the only guard the sign-in
    form has, as there is no session yet to hold a token). `Origin: null` is refused too: it is
    what a sandboxed frame or a redirect chain on another site sends. A client that sends no
    Origin (curl, a script) is no browser a page could drive."""
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin == "null" or origin.split("://", 1)[-1] != host:
            raise HTTPException(403, "cross-site form post refused")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(413, "form too large")
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(400, "malformed form") from exc
    return {k: v[0] for k, v in parsed.items()}


def _secure(resp: Response) -> Response:
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    # same-origin, not no-referrer: under no-referrer a browser posts the console's own forms
    # with `Origin: null`, which the sign-in must refuse (it is what a foreign sandboxed frame
    # sends); another site still gets no Referer
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def mount_console(app: FastAPI, *, sessions: Sessions | None = None) -> None:
    """Add the console's routes and static files to `app` (built by `create_app`)."""
    app.state.console_sessions = sessions or Sessions()
    templates = _templates()
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="console-static")

    def page(request: Request, name: str, ctx: dict[str, Any], status_code: int = 200) -> Response:
        sess = _session(request)
        full = {
            "request": request,
            "active": name,
            "session": sess,
            "who": sess.principal.name if sess else "",
            "role": sess.principal.role.label if sess else "",
            "operator": can_operate(sess),
            "csrf": sess.csrf if sess else "",
            **ctx,
        }
        return _secure(
            templates.TemplateResponse(request, f"{name}.html", full, status_code=status_code)
        )

    def signed_in(handler: Callable[[Request, Session], Response]) -> Callable[..., Response]:
        def wrapper(request: Request) -> Response:
            sess = _session(request)
            if sess is None:
                nxt = request.url.path
                if request.url.query:
                    nxt += "?" + request.url.query
                return RedirectResponse("/login?" + urlencode({"next": nxt}), status_code=303)
            try:
                return handler(request, sess)
            except ReportError as exc:
                return page(request, "error", {"message": str(exc)}, status_code=400)
            except NotKnown as exc:  # a job, an instance or a team nobody knows
                return page(request, "error", {"message": str(exc)}, status_code=404)

        wrapper.__name__ = handler.__name__
        return wrapper

    def add(path: str, handler: Callable[[Request, Session], Response]) -> None:
        app.add_api_route(path, signed_in(handler), methods=["GET"], include_in_schema=False)

    # ------------------------------------------------------------------ sign-in

    @app.get("/login", include_in_schema=False)
    def login_form(request: Request, next: str = "/") -> Response:
        return page(request, "login", {"next": _safe_next(next), "error": ""})

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = await _form(request)
        nxt = _safe_next(form.get("next", "/"))
        deps = _deps(request)
        principal = verify_token(deps.store, form.get("token", ""), deps.clock.now().timestamp())
        if principal is not None and principal.role < Role.VIEWER:
            principal = None  # an NVML agent's token pushes telemetry only: no console
        if principal is None:
            return page(
                request,
                "login",
                # 200, not 401: the form is shown again, and the browser logs no failed load.
                {
                    "next": nxt,
                    "error": "That token is not valid (unknown, revoked, expired or mistyped).",
                },
            )
        sess = _sessions(request).open(principal)
        log.info("console sign-in: %s as %s", principal.who, principal.role.label)
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(
            COOKIE,
            sess.session_id,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
            max_age=int(_sessions(request).ttl_s),
        )
        return resp

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        sess = _session(request)
        form = await _form(request)
        if sess is not None:
            if not csrf_ok(sess, form.get("csrf")):
                raise HTTPException(403, "missing or wrong CSRF token")
            _sessions(request).close(sess.session_id)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    # ------------------------------------------------------------------ pages

    def overview(request: Request, sess: Session) -> Response:
        return page(request, "overview", {"o": views.overview(_deps(request))})

    def overview_live(request: Request, sess: Session) -> Response:
        return page(request, "overview_live", {"o": views.overview(_deps(request))})

    def costs(request: Request, sess: Session) -> Response:
        q = request.query_params
        data = views.costs(
            _deps(request),
            q.get("group_by", "team"),
            q.get("from"),
            q.get("to"),
            q.get("kind"),
            q.get("eff_by"),
        )
        query = urlencode(
            {"group_by": data["key"], "from": data["from"], "to": data["to"]}
            | ({"kind": data["kind"]} if data["kind"] else {})
        )
        focus_q = urlencode({"from": data["from"], "to": data["to"]})
        return page(
            request,
            "costs",
            {
                "team_colours": views.team_colours(_deps(request)),
                "c": data,
                "groups": views.PAGE_GROUPS,
                "labels": views.GROUP_LABELS,
                "query": query,
                "focus_query": focus_q,
            },
        )

    def costs_csv(request: Request, sess: Session) -> Response:
        q = request.query_params
        deps = _deps(request)
        keys = parse_group_by(q.get("group_by", "team"))
        f, t = views.window(deps, q.get("from"), q.get("to"))
        kinds = tuple(k for k in (q.get("kind") or "").split(",") if k)
        report = cost_report(deps.store, keys, f, t, kinds=kinds)
        return Response(
            report_to_csv(report),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="costs.csv"'},
        )

    def focus_csv(request: Request, sess: Session) -> Response:
        q = request.query_params
        deps = _deps(request)
        f = views.parse_when(q.get("from"), "from")
        t = views.parse_when(q.get("to"), "to")
        opts = FocusOptions(
            controller=deps.focus.controller, billing_accounts=deps.focus.billing_accounts
        )
        return StreamingResponse(
            iter_focus_csv(deps.store, f, t, opts),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="focus.csv"'},
        )

    def budgets(request: Request, sess: Session) -> Response:
        deps = _deps(request)
        colours = views.team_colours(deps)
        return page(request, "budgets", {"b": views.budgets(deps), "team_colours": colours})

    def decisions(request: Request, sess: Session) -> Response:
        q = request.query_params
        data = views.decisions(
            _deps(request), q.get("job"), q.get("team"), q.get("reason"), page_of(q.get("page"))
        )
        return page(request, "decisions", {"d": data, "pq": _without_page(q)})

    def jobs(request: Request, sess: Session) -> Response:
        q = request.query_params
        data = views.jobs(_deps(request), q, page_of(q.get("page")))
        return page(request, "jobs", {"j": data, "pq": _without_page(q)})

    def job(request: Request, sess: Session) -> Response:
        data = job_page(_deps(request), request.path_params["job_id"])
        return page(request, "job", {"j": data, "active": "jobs"})

    def instance(request: Request, sess: Session) -> Response:
        data = instance_page(_deps(request), request.path_params["instance_id"])
        return page(request, "instance", {"i": data, "active": "instances"})

    def instances(request: Request, sess: Session) -> Response:
        q = request.query_params
        data = views.instances(_deps(request), q, page_of(q.get("page")))
        return page(request, "instances", {"i": data, "pq": _without_page(q)})

    def ledger(request: Request, sess: Session) -> Response:
        q = request.query_params
        data = ledger_page(_deps(request), q, page_of(q.get("page")))
        # an empty filter is a filter ("team=": rows no team owns), so the pager keeps it
        pq = urlencode([(k, v) for k, v in q.multi_items() if k != "page"])
        return page(request, "ledger", {"l": data, "pq": pq, "active": "costs"})

    def gpus(request: Request, sess: Session) -> Response:
        return page(request, "gpus", {"g": views.gpus(_deps(request))})

    def iac(request: Request, sess: Session) -> Response:
        return page(request, "iac", {"reviews": views.iac_reviews(_deps(request))})

    def whatif(request: Request, sess: Session) -> Response:
        return page(request, "whatif", {})

    for path, handler in (
        ("/", overview),
        ("/live/overview", overview_live),
        ("/costs", costs),
        ("/costs.csv", costs_csv),
        ("/focus.csv", focus_csv),
        ("/budgets", budgets),
        ("/decisions", decisions),
        ("/jobs", jobs),
        ("/ledger", ledger),
        ("/jobs/{job_id}", job),
        ("/instances", instances),
        ("/instances/{instance_id}", instance),
        ("/gpus", gpus),
        ("/iac", iac),
        ("/whatif", whatif),
    ):
        add(path, handler)

    # ------------------------------------------------------------------ operator forms

    async def operator_form(request: Request) -> tuple[Session, dict[str, str]]:
        sess = _session(request)
        if sess is None:
            raise HTTPException(401, "sign in first")
        form = await _form(request)
        if not csrf_ok(sess, form.get("csrf")):
            raise HTTPException(403, "missing or wrong CSRF token")
        if sess.principal.role < Role.OPERATOR:
            raise HTTPException(403, "this needs the operator role")
        return sess, form

    @app.post("/actions/pause", include_in_schema=False)
    async def pause(request: Request) -> Response:
        sess, form = await operator_form(request)
        deps = _deps(request)
        reason = form.get("reason", "")[:500]
        deps.store.set_paused(True, views.now_ts(deps), by=sess.principal.who, reason=reason)
        log.info("bursting paused by %s (console)", sess.principal.who)
        return RedirectResponse("/", status_code=303)

    @app.post("/actions/resume", include_in_schema=False)
    async def resume(request: Request) -> Response:
        sess, _ = await operator_form(request)
        deps = _deps(request)
        deps.store.set_paused(False, views.now_ts(deps), by=sess.principal.who)
        log.info("bursting resumed by %s (console)", sess.principal.who)
        return RedirectResponse("/", status_code=303)

    @app.post("/actions/pools/{name}/{action}", include_in_schema=False)
    async def drain(request: Request, name: str, action: str) -> Response:
        if action not in ("drain", "undrain"):
            raise HTTPException(404, "no such action")
        sess, _ = await operator_form(request)
        deps = _deps(request)
        done = deps.store.set_pool_drained(
            name[:64], action == "drain", views.now_ts(deps), by=sess.principal.who
        )
        if done is None:
            raise HTTPException(404, "no such pool")
        log.info("pool %s %sed by %s (console)", name, action, sess.principal.who)
        return RedirectResponse("/", status_code=303)


def _safe_next(nxt: str) -> str:
    """Only same-site paths: never redirect a sign-in to another host."""
    if not nxt.startswith("/") or nxt.startswith("//") or "\\" in nxt:
        return "/"
    return nxt
