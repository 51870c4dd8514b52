"""The MCP tools: each checks its caller's scope and its arguments, then asks the
question of :mod:`cronstable.web.calls` that the HTTP route of the same answer asks.

A refusal is a :class:`~cronstable.web.calls.Refused`, with the status the route
would answer (401 or 403 for a scope, 400 for an argument, 404 for no such job …);
:mod:`cronstable.web.mcp.asgi` turns it into a tool result marked as an error.
Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cronstable.web import calls
from cronstable.web.auth import Token
from cronstable.web.calls import Json, Refused
from cronstable.web.mcp.schemas import BY_NAME, ToolSpec
from cronstable.web.view import DaemonApi

Handler = Callable[[DaemonApi, Mapping[str, Any], Token | None], Awaitable[Json]]
"""A tool: the daemon, its checked arguments, and the caller's token (None: none)."""


def scope_refusal(tool: ToolSpec, token: Token | None) -> Refused | None:
    """Why the caller may not use ``tool`` (None: it may).

    As on the HTTP API: a token must allow the tool's scope (``admin`` allows all);
    without one (no token configured, a loopback or unix-socket peer) only the
    ``read`` tools answer.
    """
    if token is None:
        if tool.scope == "read":
            return None
        return Refused(
            401, f"{tool.name} needs a token with scope {tool.scope!r}", missingScope=tool.scope
        )
    if not token.allows(tool.scope):
        return Refused(
            403, f"the token {token.name!r} lacks scope {tool.scope!r}", missingScope=tool.scope
        )
    return None


def arguments(tool: ToolSpec, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """``given`` checked against the tool's parameters, defaults filled in; Refused (400)
    naming the first argument that is unknown, missing or of the wrong kind."""
    given = given or {}
    known = {param.name: param for param in tool.params}
    for name in given:
        if name not in known:
            raise Refused(400, f"{tool.name} takes no argument {calls.shown(str(name))!r}")
    checked: dict[str, Any] = {}
    for param in tool.params:
        value = given.get(param.name)
        if value is None:
            if param.required:
                raise Refused(400, f"{tool.name} needs the argument {param.name!r}")
            checked[param.name] = param.default
            continue
        if param.kind == "string" and not isinstance(value, str):
            raise Refused(400, f"the argument {param.name!r} must be a string")
        if param.kind == "number" and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise Refused(400, f"the argument {param.name!r} must be a number")
        checked[param.name] = value
    return checked


async def _list_jobs(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.list_jobs(daemon, args["limit"], args["cursor"])


async def _job_status(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.job_status(daemon, args["job"])


async def _job_runs(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.runs(daemon, args["job"])


async def _next_fires(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.next_fires(daemon, args["job"], float(args["hours"]))


async def _explain_rejection(
    daemon: DaemonApi, args: Mapping[str, Any], token: Token | None
) -> Json:
    return calls.rejection(daemon)


async def _diff_revision(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return await calls.diff(daemon, args["ref"])


async def _start_job(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return await calls.start(daemon, args["job"])


async def _cancel_run(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.cancel(daemon, args["job"], args["run"])


async def _reload(daemon: DaemonApi, args: Mapping[str, Any], token: Token | None) -> Json:
    return calls.reload(daemon, token.name if token is not None else None, via="mcp")


HANDLERS: dict[str, Handler] = {
    "list_jobs": _list_jobs,
    "job_status": _job_status,
    "job_runs": _job_runs,
    "next_fires": _next_fires,
    "explain_rejection": _explain_rejection,
    "diff_revision": _diff_revision,
    "start_job": _start_job,
    "cancel_run": _cancel_run,
    "reload": _reload,
}
assert HANDLERS.keys() == BY_NAME.keys(), "every tool has one handler"


async def call(
    daemon: DaemonApi, name: str, given: Mapping[str, Any] | None, token: Token | None
) -> Json:
    """The result of tool ``name`` called with ``given`` by the holder of ``token``."""
    tool = BY_NAME.get(name)
    if tool is None:
        raise Refused(404, f"no tool named {calls.shown(name)!r} (tools/list lists them)")
    refusal = scope_refusal(tool, token)
    if refusal is not None:
        raise refusal
    return await HANDLERS[name](daemon, arguments(tool, given), token)
