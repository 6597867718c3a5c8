"""Actuation: turn the planner's actions into cloud GPU node pools and back.

Ports (`ports.py`) are tiny; the AWS and GCP adapters and the Pulumi driver import their SDKs
lazily, so importing this package costs nothing. One module per kind of plan action carries it
out through them, intent first, writing through the store's ports (`provisioner.ports.store`):
`scale_up.py` (the offer, the planner's fallbacks, the back-off) and `terminate.py`.
"""
