"""What the in-memory repositories share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from provisioner.ports.store import StoreError


def json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy as a JSON column reads it back (tuples become lists, keys text); `StoreError`
    for a value that is not JSON."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"not JSON: {exc}") from None
    return copied
