"""``/mcp``: the route the web application always has, answering only while a revision
enables ``web.mcp`` (404 otherwise, as for any route the daemon does not serve).

Before the SDK sees a request, it passes the checks every route passes (Host and
Origin, by the application's middleware) and then these, in order:

1. a token that allows ``read``, or none from a peer that may read without one (the
   HTTP API's rule, :func:`cronstable.web.access.authorize`): 401 or 403 otherwise;
   each tool then needs its own scope (:mod:`cronstable.web.mcp.tools`);
2. ``POST`` (a message) or ``DELETE`` (the end of a session): another method gets 405,
   ``GET`` included, since the daemon sends nothing unasked (no event stream to keep
   open);
3. a body of at most :data:`~cronstable.web.bodies.MAX_BODY` bytes, arriving within
   ``web.bodyTimeout`` (413, 408).

The SDK is imported when a revision first enables MCP, in a worker thread while the
revision is prepared: when it is not installed the revision is rejected, naming the
key and the extra to install, and the running one stays.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from cronstable.config.models import McpConfig
from cronstable.tasks import TaskSet
from cronstable.web.access import authorize
from cronstable.web.answers import error, refused
from cronstable.web.bodies import MAX_BODY, BodyTooLarge, read_body, timed_out
from cronstable.web.calls import Refused
from cronstable.web.mcp.schemas import BY_NAME
from cronstable.web.settings import Holder
from cronstable.web.view import DaemonApi

if TYPE_CHECKING:
    from cronstable.web.mcp.asgi import McpServer

logger = logging.getLogger("cronstable.web.mcp")

PATH = "/mcp"
SDK_MODULE = "cronstable.web.mcp.asgi"
INSTALL_HINT = "pip install 'cronstable[mcp]'"


class SdkMissing(Exception):
    """The MCP SDK cannot be imported; the message says why and what to install."""


def import_sdk() -> None:
    """Import the bridge and the SDK under it (blocking: run in a thread)."""
    try:
        importlib.import_module(SDK_MODULE)
    except ImportError as exc:
        raise SdkMissing(
            f"web.mcp is enabled but the MCP SDK cannot be imported ({exc}); "
            f"install it with {INSTALL_HINT}"
        ) from exc


class McpMetrics:
    """What ``/metrics`` shows of MCP."""

    def __init__(self, registry: CollectorRegistry, sessions: Callable[[], int]) -> None:
        self.sessions = Gauge(
            "cronstable_mcp_sessions", "MCP sessions open now.", registry=registry
        )
        self.sessions.set_function(lambda: float(sessions()))
        self.calls = Counter(
            "cronstable_mcp_tool_calls",
            "MCP tool calls, by tool and outcome (ok, or refused: a scope, an argument, "
            "no such job ...).",
            ["tool", "outcome"],
            registry=registry,
        )

    def called(self, tool: str, ok: bool) -> None:
        self.calls.labels(tool if tool in BY_NAME else "unknown", "ok" if ok else "refused").inc()


class McpEndpoint:
    """``/mcp`` of one web application, and the MCP server behind it while enabled."""

    def __init__(
        self, daemon: DaemonApi, holder: Holder, registry: CollectorRegistry | None = None
    ) -> None:
        self.daemon = daemon
        self.holder = holder
        self.server: McpServer | None = None
        """Serving while a revision enables MCP."""
        self._retiring = TaskSet("mcp")
        self.metrics = McpMetrics(
            registry if registry is not None else CollectorRegistry(),
            lambda: self.server.sessions if self.server is not None else 0,
        )

    def register(self, app: web.Application) -> None:
        app.router.add_route("*", PATH, self.handle)

    # ------------------------------------------------------------ the web section's hooks

    async def prepare(self, config: McpConfig | None) -> McpServer | None:
        """A server for ``config`` if it enables MCP and none runs yet (not started);
        :class:`SdkMissing` when the SDK cannot be imported."""
        if config is None or not config.enabled or self.server is not None:
            return None
        await asyncio.to_thread(import_sdk)
        from cronstable.web.mcp.asgi import McpServer

        return McpServer(self.daemon, config, on_call=self.metrics.called)

    def commit(self, config: McpConfig | None, prepared: McpServer | None) -> None:
        """Serve as ``config`` says: start ``prepared``, apply new limits, or stop."""
        enabled = config is not None and config.enabled
        if not enabled:
            if self.server is not None:
                logger.info("MCP endpoint %s stopped: web.mcp is off", PATH)
                server, self.server = self.server, None
                self._retiring.start(server.close(), name="mcp-close")
            return
        assert config is not None
        if self.server is None:
            assert prepared is not None, "prepare() built the server"
            self.server = prepared
            prepared.start()
            logger.info(
                "MCP endpoint serving at %s (at most %d sessions, closed after %g s idle)",
                PATH,
                config.max_sessions,
                config.session_idle_timeout,
            )
        else:
            self.server.configure(config)

    async def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.close()
        await self._retiring.wait()

    # ------------------------------------------------------------ requests

    async def handle(self, request: web.Request) -> web.StreamResponse:
        server = self.server
        if server is None:
            return error(404, "no such route (GET /openapi.json lists them)")
        settings = self.holder.settings
        try:
            token = authorize(settings, request.headers.get("Authorization"), request.transport,
                              "read")  # fmt: skip
        except Refused as refusal:
            return refused(refusal)
        if request.method not in ("POST", "DELETE"):
            response = error(
                405,
                "MCP takes POST (messages) and DELETE (the end of a session) here; "
                "the daemon opens no event stream",
                allowed=["DELETE", "POST"],
            )
            response.headers["Allow"] = "DELETE, POST"
            return response
        if request.content_length is not None and request.content_length > MAX_BODY:
            return error(413, f"the body is larger than {MAX_BODY} bytes")
        try:
            body = await read_body(request, MAX_BODY, settings.body_timeout)
        except BodyTooLarge:
            return error(413, f"the body is larger than {MAX_BODY} bytes")
        except TimeoutError:
            return await timed_out(request, settings.body_timeout)
        return await server.handle(request, bytes(body), token)
