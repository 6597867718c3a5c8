"""Load policy YAML, turning every problem into a ConfigError that names the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from provisioner.config.models import Policy
from provisioner.domain.errors import ConfigError

# Files in a policies/ directory merged into one Policy, each owning these top-level keys.
POLICY_FILES = ("burst.yaml", "pools.yaml", "budgets.yaml")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            str(path), where, f"invalid YAML: {getattr(exc, 'problem', exc)}"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", "top level must be a mapping")
    return data


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def policy_from_mapping(data: dict[str, Any], source: str) -> Policy:
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"]
        more = len(exc.errors()) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise ConfigError(source, _field_path(tuple(err["loc"])), msg) from None


def load_policy(path: str | Path) -> Policy:
    """Load a policy from one YAML file or from a policies/ directory of them."""
    p = Path(path)
    if p.is_dir():
        merged: dict[str, Any] = {}
        owner: dict[str, Path] = {}
        found = [p / name for name in POLICY_FILES if (p / name).exists()]
        if not found:
            raise ConfigError(str(p), "", f"no policy file found (expected one of {POLICY_FILES})")
        for f in found:
            for key, value in _read_yaml(f).items():
                if key in merged:
                    raise ConfigError(str(f), key, f"already set in {owner[key]}")
                merged[key] = value
                owner[key] = f
        for key, f in owner.items():
            try:
                Policy.model_validate({key: merged[key]})
            except ValidationError as exc:
                first = exc.errors()[0]
                if first["loc"] and first["loc"][0] == key:
                    raise ConfigError(
                        str(f), _field_path(tuple(first["loc"])), first["msg"]
                    ) from None
        return policy_from_mapping(merged, str(p))
    if not p.exists():
        raise ConfigError(str(p), "", "file not found")
    return policy_from_mapping(_read_yaml(p), str(p))
