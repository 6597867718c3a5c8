"""`GET /v1/iac/review`: the working tree's pools reviewed against an optional git ref.

`iac_router(...)` builds the router; `provisioner/api/app.py` includes it under `/v1` behind the
viewer role (the dependency is passed by the app, so this module needs nothing of the app's auth).
Reviews are cached by what they depend on (the policy files, the program, the pack, the base
commit, the expected use rounded to a percent), so repeated calls are cheap; a render takes
about a second of CPU. Because that CPU is the controller's, renders are bounded: one at a time
in the whole process (another caller gets a 429 with Retry-After instead of queueing), and each
caller (token) at most `misses_per_minute` renders a minute. Every review, cached or not, also
resolves its base with git, so each caller gets at most `requests_per_minute` reviews of any
kind (issue 30: 1,200 requests with cached or invalid refs started 2,400 git processes); the
repository's root is found once. Answers carry no server paths: the repository root and the
home directory are cut out of every string.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.params import Depends
from fastapi.responses import PlainTextResponse, Response

from provisioner import data_files
from provisioner.config.loader import POLICY_FILES
from provisioner.domain.errors import ConfigError, InputError
from provisioner.domain.rate_window import RateWindow
from provisioner.iac.guard import default_policy_pack
from provisioner.iac.sources import (
    TEMPLATE,
    default_infra_dir,
    git_root,
    package_program_file,
    resolve_commit,
)


def default_policies_dir() -> Path:
    return data_files.policies_dir()


class _Cache:
    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()

    def get(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[Any, ...], value: dict[str, Any]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class RenderLimiter:
    """One render at a time, and at most `per_minute` renders per caller per minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.busy = threading.Lock()
        self._window = RateWindow(per_minute)

    def admit(self, caller: str) -> None:
        """Count a render for `caller`, or raise a 429."""
        retry = self._window.admit(caller, self.clock())
        if retry is not None:
            raise HTTPException(
                429,
                f"at most {self.per_minute} uncached IaC reviews a minute per caller; "
                f"retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )


def _caller(request: Request) -> str:
    principal = getattr(request.state, "principal", None)
    token = getattr(principal, "token_id", None)
    if token:
        return f"token:{token}"
    return f"host:{request.client.host if request.client else '?'}"


def scrub_paths(value: Any, roots: Sequence[str]) -> Any:
    """`value` with every absolute server path prefix in `roots` cut out of its strings."""
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root + "/", "").replace(root, ".")
        return value
    if isinstance(value, dict):
        return {k: scrub_paths(v, roots) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_paths(v, roots) for v in value]
    return value


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p).encode())
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"\0missing")
    return h.hexdigest()


def _controller_of(request: Request) -> str:
    """The serving controller's identity (its policy, with the store's identity applied)."""
    deps = getattr(request.app.state, "deps", None)
    policy = getattr(deps, "policy", None)
    return str(getattr(policy, "controller", "") or "")


def iac_router(
    policies_dir: Path | None = None,
    *,
    catalog: Path | None = None,
    policy_pack: Path | None = None,
    policy_config: Path | None = None,
    dependencies: Sequence[Depends] = (),
    cache_size: int = 128,
    misses_per_minute: int = 6,
    requests_per_minute: int = 30,
    clock: Callable[[], float] = time.monotonic,
    limiter: RenderLimiter | None = None,
) -> APIRouter:
    """The `/iac/review` route over `policies_dir` (default: the repository's policies/)."""
    policies = policies_dir or default_policies_dir()
    pack = policy_pack or default_policy_pack()
    cache = _Cache(cache_size)
    limiter = limiter or RenderLimiter(misses_per_minute, clock)
    requests = RateWindow(requests_per_minute)
    found_root: list[Path | None] = []  # git_root(policies), looked up on the first review
    roots = sorted(
        {str(p) for p in (policies.resolve().parent, Path.home()) if str(p) not in ("", "/")}
        | {str(policies.resolve())},
        key=len,
        reverse=True,
    )
    r = APIRouter(tags=["iac"], dependencies=list(dependencies))

    def _inputs() -> list[Path]:
        files = [policies / n for n in POLICY_FILES] if policies.is_dir() else [policies]
        infra = default_infra_dir()
        files += [package_program_file(), infra / TEMPLATE, pack / "gpu_policies.py"]
        files += [p for p in (catalog, policy_config) if p is not None]
        return files

    @r.get(
        "/iac/review",
        summary="Review the declared burst pools as infrastructure code",
        description="Renders the pools of the controller's policies/ through the Pulumi programs "
        "(under mocks where the Pulumi CLI is absent), diffs them against `base` (a git ref; "
        "default HEAD), prices every pool and evaluates the CrossGuard pack. The verdict is in "
        "the body (`verdict`, `exit_code`): a failing review is still a 200.",
        response_model=None,
        responses={
            200: {"content": {"application/json": {}, "text/markdown": {}}},
            400: {"description": "the base is not a commit"},
            422: {"description": "a policy file is invalid (file and field named)"},
        },
    )
    def iac_review(
        request: Request,
        base: Annotated[
            str | None,
            Query(max_length=200, description="Git ref to compare with (default: HEAD)."),
        ] = None,
        format: Annotated[
            Literal["json", "markdown"], Query(description="Report format.")
        ] = "json",
        expected_use: Annotated[
            float,
            Query(ge=0, le=1, allow_inf_nan=False, description="Default busy fraction."),
        ] = 0.25,
    ) -> Response | dict[str, Any]:
        from provisioner.iac.report import to_markdown
        from provisioner.iac.review import review_working_tree

        retry = requests.admit(_caller(request), clock())
        if retry is not None:
            raise HTTPException(
                429,
                f"at most {requests_per_minute} IaC reviews a minute per caller; "
                f"retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )
        try:
            if not found_root:
                found_root.append(git_root(policies))
            root = found_root[0]
            sha = resolve_commit(root, base or "HEAD") if root is not None else None
            if base and sha is None:
                raise InputError("base: the policies are not in a git work tree")
            # A percent is the finest use anyone prices with; rounding keeps a caller from
            # missing the cache with 0.25, 0.2500001, 0.2500002, ...
            use = Decimal(str(expected_use)).quantize(Decimal("0.01"))
            key = (sha, str(use), _digest(_inputs()), _controller_of(request))
            data = cache.get(key)
            if data is None:
                limiter.admit(_caller(request))
                if not limiter.busy.acquire(blocking=False):
                    raise HTTPException(
                        429,
                        "another IaC review is being rendered; retry in a few seconds",
                        headers={"Retry-After": "5"},
                    )
                try:
                    data = cache.get(key) or scrub_paths(
                        review_working_tree(
                            policies,
                            base_ref=sha,
                            catalog=catalog,
                            expected_use=use,
                            policy_pack=pack,
                            policy_config=policy_config,
                            controller=_controller_of(request),
                        ).to_dict(),
                        roots,
                    )
                finally:
                    limiter.busy.release()
                if sha is not None:
                    data["base"] = f"{base or 'HEAD'} ({sha[:7]})"
                cache.put(key, data)
        except InputError as exc:
            raise HTTPException(400, scrub_paths(str(exc), roots)) from None
        except ConfigError as exc:
            raise HTTPException(422, scrub_paths(str(exc), roots)) from None
        if format == "markdown":
            return PlainTextResponse(to_markdown(data), media_type="text/markdown")
        return data

    return r
