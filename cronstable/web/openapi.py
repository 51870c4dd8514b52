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
    404: "No such job or workflow (or run, or no webhook configured)",
    408: "The body did not arrive in time",
    409: "The job's state refuses it (concurrencyPolicy refused the start; no API pause to lift)",
    413: "The body is too large",
    415: "The body's content type is not accepted",
    421: "No token is configured and the Host is not one this daemon answers (allowedHosts)",
    429: "Too many event streams are open",
    503: "Not ready (or, for the webhook, too many bodies being received: see Retry-After)",
}


_TIME = {"type": "string", "format": "date-time", "description": "ISO 8601 with an offset."}
_BODIES: dict[str, dict[str, Any]] = {
    "pause": {
        "type": "object",
        "additionalProperties": False,
        "required": ["reason"],
        "properties": {
            "reason": {"type": "string", "minLength": 1, "maxLength": 1000},
            "until": _TIME | {"description": "When the pause ends by itself (in the future)."},
        },
    },
}
"""The JSON body of each route that takes one, by handler."""
_BODIES["pause_workflow"] = _BODIES["pause"]
_BODIES["backfill"] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["from", "to"],
    "properties": {
        "from": _TIME | {"description": "The first fire at or after this time."},
        "to": _TIME | {"description": "Fires before this time (not in the future)."},
        "dryRun": {"type": "boolean", "default": False, "description": "List, run nothing."},
        "max": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 100},
        "ignorePause": {"type": "boolean", "default": False},
    },
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
            what = "workflow" if route.path.startswith("/workflows/") else "job"
            parameters.append(
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": f"The {what}'s name, percent-encoded as one path segment.",
                    "schema": {"type": "string"},
                }
            )
        if "{id}" in route.path:
            parameters.append(
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "description": "The workflow run's id (<workflow>@<scheduled UTC>), "
                    "percent-encoded.",
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
        if route.handler == "audit":
            parameters += [
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "Entries in this page, newest first (default 100, at "
                    "most 1000).",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                },
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "Where the page starts: the nextCursor of the page before "
                    "(also in its Link header, rel=next). Without it, the newest entries.",
                    "schema": {"type": "string"},
                },
            ]
        if route.handler == "fleet":
            parameters += [
                {
                    "name": "after",
                    "in": "query",
                    "required": False,
                    "description": "The page after this job's name (the last page's nextAfter).",
                    "schema": {"type": "string", "maxLength": 1024},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "Jobs (and workflows) in the page (default 100, at most 500).",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                },
            ]
        if parameters:
            operation["parameters"] = parameters
        body = _BODIES.get(route.handler)
        if body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "cronstable", "version": __version__},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
