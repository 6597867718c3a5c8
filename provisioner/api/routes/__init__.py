"""The `/v1` routers, one module per area; `provisioner.api.app` includes them all."""
