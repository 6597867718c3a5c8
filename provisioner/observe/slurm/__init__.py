"""Readers of Slurm: the observer (queue, nodes, partitions), the output parsers, job usage from
sacct and squeue, and version detection."""
