"""Actuation: turn the planner's actions into cloud GPU node pools and back.

Ports (`ports.py`) are tiny; the AWS and GCP adapters and the Pulumi driver import their SDKs
lazily, so importing this package costs nothing. `cloud_actuator.py` carries out a pass's
scale-ups and terminations through them, intent first (`actuator_store.py`: the store slice it
writes through); `actuator.py` is the offer fallback underneath.
"""
