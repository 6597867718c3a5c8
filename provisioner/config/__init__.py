"""Strict, typed policy models loaded from YAML at the edge."""

from provisioner.config.loader import load_policy
from provisioner.config.models import Policy

__all__ = ["Policy", "load_policy"]
