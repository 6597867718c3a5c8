"""Ending a burst node's agent token with its instance: the token was issued for that one
instance (api/routes/node_agent_token.py), and the node's name will serve other instances."""

from __future__ import annotations

from typing import Protocol

from provisioner.domain.agent_tokens import instance_of_token
from provisioner.ports.store import InstanceRepo, TokenRepo


class _Store(InstanceRepo, TokenRepo, Protocol): ...


def revoke_ended(store: _Store, now_ts: float) -> list[str]:
    """Revoke every live agent token whose instance has ended (or that the store no longer
    knows); the instance ids whose tokens went."""
    ended: list[str] = []
    for t in store.tokens():
        iid = instance_of_token(t.name) if t.revoked_ts is None and t.node else None
        if iid is None:
            continue
        rec = store.instance(iid)
        if rec is None or rec.instance.state.terminal:
            store.revoke_token(t.token_id, now_ts)
            ended.append(iid)
    return ended
