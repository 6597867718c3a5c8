"""Trace replay through the real planner, with baselines and metrics."""
