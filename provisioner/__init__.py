"""Hybrid GPU burst provisioner.

Importing the package must stay cheap: cloud SDKs, Pulumi and NVML are imported lazily by the
adapters that need them.
"""

__version__ = "0.1.0"
