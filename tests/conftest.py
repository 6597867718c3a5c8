"""Fixtures every suite may use: the store's database engines (tests/databases.py), and one
Chromium driven by Playwright for the whole session (tests/browser, and the e2e console test):
Playwright's sync API runs one instance per thread, so a second `sync_playwright()` while the
first is open fails."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.databases import BACKENDS, PG_URL, databases

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def pytest_configure(config: pytest.Config) -> None:
    # `make test` sets this: a run meant to cover PostgreSQL must not quietly run SQLite only.
    if os.environ.get("REQUIRE_POSTGRES") == "1" and "postgresql" not in BACKENDS:
        raise pytest.UsageError(
            "REQUIRE_POSTGRES=1 but PROVISIONER_TEST_DATABASE_URL is not set (make pg-up)"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("db_backend") == "postgresql":
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="module", params=BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def make_db_url(db_backend: str, tmp_path_factory: Any) -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty databases on this module's engine."""
    yield from databases(db_backend, tmp_path_factory.mktemp(f"db-{db_backend}"))


@pytest.fixture
def db_url(make_db_url: Callable[[], str]) -> str:
    return make_db_url()


@pytest.fixture
def pg_url(tmp_path: Any) -> Iterator[Callable[[], str]]:
    """A factory of fresh PostgreSQL databases, for tests that are about PostgreSQL itself
    (its locks, a restart); `make test` always has one (REQUIRE_POSTGRES)."""
    if not PG_URL:
        pytest.skip("needs PostgreSQL: PROVISIONER_TEST_DATABASE_URL (make test starts one)")
    yield from databases("postgresql", tmp_path)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from pathlib import Path

    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser-deps`"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
