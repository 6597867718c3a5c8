"""`TokenRepo` in memory: API tokens over a dict."""

from __future__ import annotations

from dataclasses import replace

from provisioner.domain.records import TokenRecord
from provisioner.ports.store import StoreError, TokenRepo


class MemoryTokenRepo(TokenRepo):
    """`TokenRepo` over a dict."""

    def __init__(self) -> None:
        self._tokens: dict[str, TokenRecord] = {}

    def add_token(self, rec: TokenRecord) -> None:
        if rec.token_id in self._tokens:
            raise StoreError(f"token {rec.token_id!r} exists")
        self._tokens[rec.token_id] = rec

    def token(self, token_id: str) -> TokenRecord | None:
        return self._tokens.get(token_id)

    def tokens(self) -> list[TokenRecord]:
        return sorted(self._tokens.values(), key=lambda t: (t.created_ts, t.token_id))

    def revoke_token(self, token_id: str, now_ts: float) -> bool:
        rec = self._tokens.get(token_id)
        if rec is None:
            return False
        if rec.revoked_ts is None:
            self._tokens[token_id] = replace(rec, revoked_ts=now_ts)
        return True
