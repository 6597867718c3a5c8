"""`python -m provisioner.cli`: the same command as the `provisioner` entry point."""

from provisioner.cli import app

app()
