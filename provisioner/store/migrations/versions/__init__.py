"""Alembic revision scripts (a package so that wheels ship them)."""
