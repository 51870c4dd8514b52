"""The MCP SDK's streamable-HTTP server, run inside the daemon's aiohttp application.

The official SDK (``mcp``) serves MCP as an ASGI application; :class:`McpServer` runs
its :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager` on the
daemon's loop and :meth:`McpServer.handle` hands it one aiohttp request at a time:

* the body arrives already read, bounded and within ``bodyTimeout``
  (:mod:`cronstable.web.mcp.endpoint`), and the caller's token beside it; the SDK
  caps a body at :data:`~cronstable.web.bodies.MAX_BODY` too;
* sessions are the SDK's: at most ``maxSessions`` open at once (one more is answered
  503), each closed after ``sessionIdleTimeout`` seconds without a request (its id then
  answers 404 and the client starts a new one), each bound to the token that opened
  it; answers are JSON, not event streams (no tool streams anything);
* a tool call ends within :data:`TOOL_TIMEOUT` seconds, a request within
  :data:`REQUEST_TIMEOUT` (504 if nothing was answered yet), a write within
  :data:`WRITE_TIMEOUT`.

The SDK's own loggers (``mcp.*``) log at WARNING and above unless the logging section
sets them.  Importing this module imports the SDK (starlette, pydantic models, httpx2 …), so only
:mod:`cronstable.web.mcp.endpoint` imports it, and only once a revision enables MCP:
``validate``, ``next`` and a daemon without MCP never load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from aiohttp import web
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from cronstable import __version__
from cronstable.config.models import McpConfig
from cronstable.web.auth import Token
from cronstable.web.bodies import MAX_BODY
from cronstable.web.calls import Refused, shown
from cronstable.web.mcp import tools
from cronstable.web.mcp.schemas import BY_NAME, TOOLS
from cronstable.web.view import DaemonApi

logger = logging.getLogger("cronstable.web.mcp")

_sdk_logger = logging.getLogger("mcp")
if _sdk_logger.level == logging.NOTSET:
    # the SDK logs every session opened and closed at INFO, with its id; the daemon says
    # what matters itself (a logging section that sets the "mcp" logger wins)
    _sdk_logger.setLevel(logging.WARNING)

TOOL_TIMEOUT = 60.0
"""Seconds a tool call may take (a diff fetches from the origin, within its own timeout)."""
REQUEST_TIMEOUT = TOOL_TIMEOUT + 15.0
"""Seconds the SDK may take to answer one request."""
WRITE_TIMEOUT = 10.0
"""Seconds one write of an answer may take (a client that does not read is dropped)."""
CLOSE_TIMEOUT = 5.0
"""Seconds the sessions get to end when the server stops."""
TOKEN_KEY = "cronstable.token"
"""Where the ASGI scope carries the request's token (None: a local peer without one)."""
PEER_KEY = "cronstable.peer"

INSTRUCTIONS = (
    "cronstable is a cron daemon whose jobs come from a configuration repository. "
    "list_jobs and job_status show the jobs, job_runs a job's runs with their output, "
    "next_fires when it runs next; explain_rejection says why the last revision of the "
    "configuration was refused and diff_revision what a branch would change. start_job, "
    "cancel_run (scope trigger) and reload (scope reload) act on the daemon."
)


def _tool(spec: Any) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=f"{spec.description} Needs a token with scope {spec.scope}.",
        input_schema=spec.input_schema(),
        output_schema=spec.output,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.read_only,
            open_world_hint=spec.name == "diff_revision",
        ),
    )


def _scope_of(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    request = ctx.request
    scope = getattr(request, "scope", None)
    return scope if isinstance(scope, Mapping) else {}


def _failed(refusal: Refused) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=f"{refusal.message} ({refusal.status})")],
        structured_content={**refusal.body(), "status": refusal.status},
        is_error=True,
    )


class McpServer:
    """The SDK's MCP server and session manager, answering the tools of one daemon."""

    def __init__(
        self,
        daemon: DaemonApi,
        config: McpConfig,
        *,
        on_call: Callable[[str, bool], None] = lambda tool, ok: None,
    ) -> None:
        """``on_call``: told of each tool call, by name, and whether it was answered."""
        self.daemon = daemon
        self._on_call = on_call
        self._listed = types.ListToolsResult(tools=[_tool(spec) for spec in TOOLS])
        server: Server[Any] = Server(
            "cronstable",
            version=__version__,
            title="cronstable",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        server.middleware = []  # no OpenTelemetry span per message
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            # the daemon's own Host and Origin rules ran before (web.allowedHosts)
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=MAX_BODY,
            max_sessions=config.max_sessions,
            session_idle_timeout=config.session_idle_timeout,
        )
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def configure(self, config: McpConfig) -> None:
        """A revision's limits: ``maxSessions`` at once from now on, ``sessionIdleTimeout``
        for the sessions opened from now on."""
        self.manager.max_sessions = config.max_sessions
        self.manager.session_idle_timeout = config.session_idle_timeout

    @property
    def sessions(self) -> int:
        """The sessions open now (the manager's own count: it has no public one)."""
        return len(getattr(self.manager, "_server_instances", ()))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mcp-sessions")

    async def _run(self) -> None:
        try:
            async with self.manager.run():
                self._started.set()
                await self._stop.wait()
        except Exception:
            logger.exception(
                "The MCP session manager stopped; /mcp answers 503; please report this"
            )
        finally:
            self._stop.set()
            self._started.set()  # a request waiting for the start sees the server stopped

    async def close(self) -> None:
        """End every session and stop (the web section is closing, or MCP was turned off)."""
        self._stop.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            except Exception:
                logger.exception("The MCP session manager failed while stopping")

    # ------------------------------------------------------------ the protocol's handlers

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return self._listed

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        scope = _scope_of(ctx)
        token: Token | None = scope.get(TOKEN_KEY)
        spec = BY_NAME.get(params.name)
        if spec is not None and spec.scope != "read":
            arguments = params.arguments or {}
            job = arguments.get("job")
            logger.info(
                "MCP %s (job %s) by %s from %s",
                spec.name,
                shown(job) if isinstance(job, str) else "-",
                token.name if token is not None else "anonymous",
                scope.get(PEER_KEY, "unix socket"),
                extra={"route": "/mcp", "tool": spec.name},
            )
        try:
            async with asyncio.timeout(TOOL_TIMEOUT):
                data = await tools.call(self.daemon, params.name, params.arguments, token)
        except Refused as refusal:
            self._on_call(params.name, False)
            return _failed(refusal)
        except TimeoutError:
            self._on_call(params.name, False)
            return _failed(Refused(504, f"{params.name} took more than {TOOL_TIMEOUT:g} s"))
        self._on_call(params.name, True)
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(data, ensure_ascii=False))],
            structured_content=data,
        )

    # ------------------------------------------------------------ HTTP

    async def handle(
        self, request: web.Request, body: bytes, token: Token | None
    ) -> web.StreamResponse:
        """One request to ``/mcp``, its ``body`` read, its caller's ``token`` checked."""
        await self._started.wait()
        if self._stop.is_set():
            return web.json_response({"error": "the MCP endpoint is stopping"}, status=503)
        bridge = _Exchange(request, body)
        scope = _asgi_scope(request, token)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                await self.manager.handle_request(scope, bridge.receive, bridge.send)
        except TimeoutError:
            if bridge.response is None:
                return web.json_response({"error": "the MCP request took too long"}, status=504)
            bridge.drop()
        except (ConnectionError, _WriteStuck):
            bridge.drop()
        finally:
            bridge.done.set()
        return await bridge.finished()


def _asgi_scope(request: web.Request, token: Token | None) -> dict[str, Any]:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) and len(peer) >= 2 else None
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": client,
        "server": None,
        "state": {},
        TOKEN_KEY: token,
        PEER_KEY: client[0] if client is not None else "unix socket",
    }
    if token is not None:  # each session answers only the token that opened it
        access = AccessToken(token=token.name, client_id=token.name, scopes=sorted(token.scopes))
        scope["user"] = AuthenticatedUser(access)
    return scope


class _WriteStuck(Exception):
    """A write of the answer did not complete in time."""


class _Exchange:
    """One request's ASGI ``receive`` and ``send`` over an aiohttp request."""

    def __init__(self, request: web.Request, body: bytes) -> None:
        self.request = request
        self._body: bytes | None = body
        self.done = asyncio.Event()
        """The application returned: ``receive`` answers a disconnect."""
        self.response: web.StreamResponse | None = None
        self._prepared = False
        self._ended = False

    async def receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Mapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            response = web.StreamResponse(status=int(message["status"]))
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self.response = response
            return
        if kind != "http.response.body" or self.response is None or self._ended:
            return
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                if not self._prepared:
                    self._prepared = True
                    await self.response.prepare(self.request)
                chunk = message.get("body", b"")
                if chunk:
                    await self.response.write(chunk)
                if not message.get("more_body", False):
                    self._ended = True
                    await self.response.write_eof()
        except TimeoutError:
            raise _WriteStuck from None

    def drop(self) -> None:
        """The answer cannot be finished: close the connection."""
        if self.request.transport is not None:
            self.request.transport.close()

    async def finished(self) -> web.StreamResponse:
        response = self.response
        if response is None:  # the SDK answered nothing (it always does)
            return web.json_response({"error": "the MCP request got no answer"}, status=500)
        if not self._prepared:
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await response.prepare(self.request)
                    await response.write_eof()
        return response
