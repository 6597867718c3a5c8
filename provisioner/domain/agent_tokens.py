"""The GPU agent token a burst node gets for its instance: named after the instance, so the
pass can end it with the instance (a node name outlives its instances)."""

from __future__ import annotations

# What a token request's MUNGE payload must say it is for: a credential made for another
# endpoint (a spot warning) is no token request.
PURPOSE = "agent-token"
# The longest an agent token lives; the instance's end revokes it well before, as a rule.
AGENT_TOKEN_TTL_S = 7 * 86_400.0
_PREFIX = "burst-agent:"


def agent_token_name(instance_id: str) -> str:
    return f"{_PREFIX}{instance_id}"


def instance_of_token(name: str) -> str | None:
    """The instance an agent token was issued for (None: not a burst node's token)."""
    return name[len(_PREFIX) :] or None if name.startswith(_PREFIX) else None
