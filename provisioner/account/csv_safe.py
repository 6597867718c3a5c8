"""CSV cells that a spreadsheet will not run as formulas.

Team, account, user, partition and job names come from Slurm, where any user can choose them
(a Slurm account name becomes the team by default). A cell starting with `=`, `+`, `-`, `@`, a
tab or a carriage return is a formula to Excel, LibreOffice and Google Sheets, so such a cell
gets a leading apostrophe (OWASP's advice). Plain numbers, negative ones included, are left
alone so amounts stay numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def safe_cell(value: Any) -> Any:
    if not isinstance(value, str) or not value.startswith(_TRIGGERS):
        return value
    if _NUMBER.fullmatch(value):
        return value
    return "'" + value


def safe_row(row: Iterable[Any]) -> list[Any]:
    return [safe_cell(v) for v in row]


__all__ = ["safe_cell", "safe_row"]
