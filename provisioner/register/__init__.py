"""Register: make burst nodes part of the one Slurm cluster, drain and remove them."""
