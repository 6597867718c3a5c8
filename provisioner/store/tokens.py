"""API tokens (salted hashes only; the secret never reaches the store). The behaviour each
method promises is written on its port, `provisioner.ports.store.TokenRepo`."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from provisioner.domain.records import TokenRecord
from provisioner.ports.store import StoreError, TokenRepo
from provisioner.store.engine import StoreBase
from provisioner.store.models import ApiTokenRow


class TokenStore(StoreBase, TokenRepo):
    # ------------------------------------------------------------------ API tokens

    def add_token(self, rec: TokenRecord) -> None:
        if self.token(rec.token_id) is not None:
            raise StoreError(f"token {rec.token_id} already exists")
        try:
            self._insert_token(rec)
        except IntegrityError:  # added by someone else between the check and the insert
            raise StoreError(f"token {rec.token_id} already exists") from None

    def _insert_token(self, rec: TokenRecord) -> None:
        with self.transaction() as s:
            s.add(
                ApiTokenRow(
                    token_id=rec.token_id,
                    name=rec.name,
                    role=rec.role,
                    salt=rec.salt,
                    secret_hash=rec.secret_hash,
                    created_ts=rec.created_ts,
                    revoked_ts=rec.revoked_ts,
                    node=rec.node,
                    expires_ts=rec.expires_ts,
                )
            )

    def token(self, token_id: str) -> TokenRecord | None:
        with self.reading() as s:
            row = s.get(ApiTokenRow, token_id)
            return _token(row) if row else None

    def tokens(self) -> list[TokenRecord]:
        with self.reading() as s:
            q = select(ApiTokenRow).order_by(ApiTokenRow.created_ts, ApiTokenRow.token_id)
            return [_token(r) for r in s.scalars(q)]

    def revoke_token(self, token_id: str, now_ts: float) -> bool:
        with self.transaction() as s:
            row = s.get(ApiTokenRow, token_id)
            if row is None:
                return False
            if row.revoked_ts is None:
                row.revoked_ts = now_ts
            return True


# --------------------------------------------------------------------------- row <-> record


def _token(r: ApiTokenRow) -> TokenRecord:
    return TokenRecord(
        token_id=r.token_id,
        name=r.name,
        role=r.role,
        salt=r.salt,
        secret_hash=r.secret_hash,
        created_ts=r.created_ts,
        revoked_ts=r.revoked_ts,
        node=r.node,
        expires_ts=r.expires_ts,
    )
