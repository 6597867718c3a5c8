"""Fixtures of the live Slurm cluster tests (see slurm_harness.py)."""

from slurm_harness import cluster, slurm_cluster

__all__ = ["cluster", "slurm_cluster"]
