"""The HTTP API (FastAPI): status, decisions, costs, FOCUS, operator actions, metrics, auth.

Import `create_app` / `ApiDeps` from `provisioner.api.app`; this package stays import-light.
"""
