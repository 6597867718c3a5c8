"""A preflight check's result: its verdict (ok, warn, fail, skip), what it found, and how to fix
it. `provisioner doctor` prints them; the clouds' field preflights (act/) return them too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    verdict: Verdict
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def line(self) -> str:
        tail = f" -> fix: {self.fix}" if self.fix and self.verdict in ("fail", "warn") else ""
        return f"{self.verdict.upper():4}  {self.name}: {self.detail}{tail}"
