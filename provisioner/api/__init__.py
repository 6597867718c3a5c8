"""The HTTP API (FastAPI): status, decisions, costs, FOCUS, operator actions, metrics, auth.

Import `create_app` / `ApiDeps` from `provisioner.api.app`; this package stays import-light.
Layout: `app` assembles; `deps` (ApiDeps), `access` (the role dependency), `params` (shared
query parameters), `errors` (exception handlers), `edge` (body limit); `routes/` one router
per area; `schemas/` the response models; `render` and `telemetry_views` the JSON renderings.
"""
