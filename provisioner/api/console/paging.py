"""Pages of a console table: which page, whether another follows, and a bad page number (or
one past the end) as a clear error, a 400 with the reason, never a blank page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from provisioner.account.reports import ReportError

PER_PAGE = 50
MAX_PAGE = 100_000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page:
    number: int  # from 1
    size: int = PER_PAGE

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def fetch(self) -> int:
        """Rows to read: one more than a page, to know whether another page follows."""
        return self.size + 1


def page_of(raw: str | None, size: int = PER_PAGE) -> Page:
    """The `page` query parameter: empty is page 1."""
    text = (raw or "").strip()
    if not text:
        return Page(1, size)
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise ReportError(f"page: {text[:20]!r} is not a page number (1 to {MAX_PAGE})")
    return Page(int(text), size)


def cut(rows: Sequence[T], page: Page, what: str) -> tuple[list[T], dict[str, Any]]:
    """`rows` read from the page's offset (up to `page.fetch`): the page's rows and the pager
    the template draws. A page past the end raises, naming the last page there is."""
    shown = list(rows[: page.size])
    if page.number > 1 and not shown:
        raise ReportError(f"page {page.number}: there are no more {what} (try page 1)")
    pager = {
        "page": page.number,
        "first": page.offset + 1 if shown else 0,
        "last": page.offset + len(shown),
        "prev": page.number - 1 if page.number > 1 else None,
        "next": page.number + 1 if len(rows) > page.size else None,
    }
    return shown, pager
