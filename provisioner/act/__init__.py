"""Actuation: turn the planner's actions into cloud GPU node pools and back.

Ports (`ports.py`) are tiny; the AWS and GCP adapters and the Pulumi driver import their SDKs
lazily, so importing this package costs nothing.
"""
