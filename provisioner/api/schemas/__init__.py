"""Response models of the JSON API, one module per area.

They describe, field for field, the dicts `provisioner.api.render` (and `telemetry_views`)
build, so the OpenAPI document shows what each endpoint really answers. Every model forbids
unknown keys: a rendering that grows a field without its model fails the tests (a 500)
instead of silently losing the field.
"""
