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
    held = [
        (t.token_id, iid)
        for t in store.tokens()
        if t.revoked_ts is None and t.node and (iid := instance_of_token(t.name))
    ]
    if not held:  # the usual pass: no burst node holds a token, nothing more to read
        return []
    live = {si.instance.instance_id for si in store.instances(live_only=True)}
    ended: list[str] = []
    for token_id, iid in held:
        if iid not in live:
            store.revoke_token(token_id, now_ts)
            ended.append(iid)
    return ended
