"""The HTTP API: the ``web`` section's listeners, token auth, routes and OpenAPI document.

It reads the daemon through :class:`~cronstable.web.view.DaemonApi` only; the
runtime never imports this package (an import-linter contract).
"""
