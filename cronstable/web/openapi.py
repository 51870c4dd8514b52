"""The OpenAPI 3.1 document of every route, built from the route table."""

from __future__ import annotations

from typing import Any

from cronstable import __version__
from cronstable.web.routes import ROUTES, STATUS_PAGE, STATUS_PAGE_MAX

_DESCRIPTIONS = {
    200: "OK",
    202: "Accepted",
    400: "A query parameter or the body is not what the route takes",
    401: "No token (or webhook signature), or one that is not valid",
    403: "The token lacks the route's scope, or a page of another origin sent the request",
    404: "No such job (or no webhook configured)",
    408: "The body did not arrive in time",
    409: "concurrencyPolicy refused the start",
    413: "The body is too large",
    415: "The body's content type is not accepted",
    421: "No token is configured and the Host is not one this daemon answers (allowedHosts)",
    429: "Too many event streams are open",
    503: "Not ready (or, for the webhook, too many bodies being received: see Retry-After)",
}


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        codes = {*route.responses, 403, *(() if route.signed else (421,))}
        if route.scope:
            codes.add(401)
        responses = {str(code): {"description": _DESCRIPTIONS[code]} for code in sorted(codes)}
        operation: dict[str, Any] = {
            "operationId": route.handler,
            "summary": route.summary,
            "responses": responses,
            "x-scope": route.scope,
        }
        if route.scope is not None:
            operation["security"] = [{"bearer": [route.scope]}]
        parameters: list[dict[str, Any]] = []
        if "{name}" in route.path:
            parameters.append(
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "The job's name, percent-encoded as one path segment.",
                    "schema": {"type": "string"},
                }
            )
        if route.handler == "cancel":
            parameters.append(
                {
                    "name": "run",
                    "in": "query",
                    "required": False,
                    "description": "Only this run id (<job>@<scheduled UTC>#<attempt>).",
                    "schema": {"type": "string"},
                }
            )
        if route.handler == "status":
            parameters.append(
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "Jobs in this page, in configuration order (default "
                    f"{STATUS_PAGE}, at most {STATUS_PAGE_MAX}).",
                    "schema": {"type": "integer", "minimum": 1, "maximum": STATUS_PAGE_MAX},
                }
            )
            parameters.append(
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "Where the page starts: the nextCursor of the page before "
                    "(also in its Link header, rel=next). Without it, the first page.",
                    "schema": {"type": "string"},
                }
            )
        if route.handler == "next_fires":
            parameters.append(
                {
                    "name": "hours",
                    "in": "query",
                    "required": False,
                    "description": "The window's length in hours (default 24, at most 168).",
                    "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 168},
                }
            )
        if parameters:
            operation["parameters"] = parameters
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "cronstable", "version": __version__},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
