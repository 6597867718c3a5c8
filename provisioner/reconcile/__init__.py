"""Reconcile: the store (SQLAlchemy), passive sync and the controller loop."""
