"""JSON error answers, and the one way a value from the request may appear in one."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cronstable.web.calls import SHOWN_LENGTH, Refused, shown

__all__ = ["SHOWN_LENGTH", "error", "refused", "shown"]


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def refused(refusal: Refused) -> web.Response:
    """A :class:`~cronstable.web.calls.Refused` as the HTTP API answers it (a 401 names the
    scheme it wants, ``WWW-Authenticate: Bearer``)."""
    response = web.json_response(refusal.body(), status=refusal.status)
    if refusal.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="cronstable"'
    return response
