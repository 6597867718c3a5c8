"""The web console: server-rendered pages on the API app (see docs/console.md)."""
