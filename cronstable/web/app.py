"""The aiohttp application: one table of routes, auth and JSON errors as middleware.

Every answer is JSON except ``GET /metrics`` (Prometheus text) and
``GET /status`` asked for ``text/plain`` (yacron's one line per job).  Errors
are ``{"error": ...}`` with a 4xx status; a bug is logged and answered 500
without a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from cronstable import __version__
from cronstable.web.auth import Token, bearer, is_local_peer, match
from cronstable.web.dashboard import dashboard_page
from cronstable.web.events import EventStreams
from cronstable.web.fires import next_fires
from cronstable.web.github import GitHubWebhook
from cronstable.web.view import DaemonApi

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 64 * 1024
"""No route reads a body bigger than this."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What a revision configures about answering requests (swapped whole at commit)."""

    tokens: tuple[Token, ...] = ()
    metrics_public: bool = False
    github_secret: bytes | None = None


@dataclass(slots=True)
class Holder:
    settings: Settings = field(default_factory=Settings)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    scope: str | None
    """None: no token needed."""
    summary: str
    handler: str
    responses: tuple[int, ...] = (200,)
    page: bool = False
    """A static page (no data in it): no token needed, but with no token configured only
    the peers the read routes would answer get it."""


ROUTES: tuple[Route, ...] = (
    Route("GET", "/version", None, "The daemon's version.", "version"),
    Route("GET", "/healthz", None, "The process is up.", "healthz"),
    Route("GET", "/readyz", None, "A revision is applied (503 with the reason if not).",
          "readyz", (200, 503)),
    Route("GET", "/status", "read", "Applied and last rejected revisions, and every job.",
          "status"),
    Route("GET", "/config", "admin",
          "The applied configuration in canonical form, secrets as sha256 digests.",
          "config", (200, 404)),
    Route("POST", "/reload", "reload", "Ask the source to look for a new revision now.",
          "reload", (202,)),
    Route("GET", "/metrics", "read", "Prometheus metrics.", "metrics"),
    Route("POST", "/jobs/{name}/start", "trigger",
          "Start the job now (also when disabled); 409 when concurrencyPolicy refuses.",
          "start", (202, 404, 409)),
    Route("POST", "/jobs/{name}/cancel", "trigger",
          "Stop the job's running runs (only ?run=ID when given).", "cancel", (200, 404)),
    Route("GET", "/jobs/{name}/runs", "read",
          "Running runs, then the last finished ones with captured output.", "runs",
          (200, 404)),
    Route("GET", "/openapi.json", "read", "This API as an OpenAPI 3.1 document.", "openapi"),
    Route("GET", "/jobs/{name}/next", "read",
          "The job's fires in the next ?hours=24 (at most 500, else bands).", "next_fires",
          (200, 400, 404)),
    Route("GET", "/events", "read",
          "Live events (server-sent): runs started and ended, revisions applied and rejected.",
          "events", (200, 429)),
    Route("GET", "/", None, "The dashboard: one static HTML page that reads the API.",
          "dashboard", page=True),
    Route("POST", "/webhooks/github", None,
          "A GitHub push (signed with the webhook secret) makes the source fetch now.",
          "github", (200, 202, 400, 401, 404, 408, 413, 415)),
    Route("GET", "/cluster", "read",
          "Members, leader, lease and this node's role ({enabled: false} without election).",
          "cluster"),
)  # fmt: skip


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _ago(moment: str | None) -> str:
    if moment is None:
        return "no next fire"
    seconds = (datetime.fromisoformat(moment) - datetime.now(UTC)).total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"in {count} {unit}{'' if count == 1 else 's'}"
    return f"in {max(0, int(seconds))} seconds"


def status_text(status: dict[str, Any]) -> str:
    """yacron's form: ``name: running (pid: 1, 2)`` or ``name: scheduled (in 5 minutes)``."""
    lines = []
    for job in status["jobs"]:
        if job["running"]:
            pids = ", ".join(str(run["pid"]) for run in job["running"])
            lines.append(f"{job['name']}: running (pid: {pids})")
        elif not job["enabled"]:
            lines.append(f"{job['name']}: disabled")
        else:
            lines.append(f"{job['name']}: scheduled ({_ago(job['nextFire'])})")
    return "\n".join(lines) + ("\n" if lines else "")


def _wants_text(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "text/plain" in accept and "application/json" not in accept


class Api:
    def __init__(self, daemon: DaemonApi, holder: Holder) -> None:
        self.daemon = daemon
        self.holder = holder
        self.routes: dict[str, dict[str, Route]] = {}
        """Routes by aiohttp's canonical path and method."""
        self.streams = EventStreams(daemon)
        self.github = GitHubWebhook(daemon, lambda: holder.settings.github_secret).handle

    # ------------------------------------------------------------ routes

    async def version(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"version": __version__})

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.StreamResponse:
        reason = self.daemon.ready()
        if reason is not None:
            return web.json_response({"ready": False, "reason": reason}, status=503)
        return web.json_response({"ready": True})

    async def status(self, request: web.Request) -> web.StreamResponse:
        status = self.daemon.status()
        if _wants_text(request):
            return web.Response(text=status_text(status))
        return web.json_response(status)

    async def config(self, request: web.Request) -> web.StreamResponse:
        config = self.daemon.applied_config()
        if config is None:
            return error(404, "no configuration has been applied yet")
        return web.json_response(config)

    async def reload(self, request: web.Request) -> web.StreamResponse:
        self.daemon.reload()
        return web.json_response({"reload": "requested"}, status=202)

    async def cluster(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.daemon.cluster_view())

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        body, content_type = self.daemon.metrics_text()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    def _job(self, request: web.Request) -> str:
        name = request.match_info["name"]
        if not self.daemon.has_job(name):
            raise web.HTTPNotFound(reason=f"no job named {name!r}")
        return name

    async def start(self, request: web.Request) -> web.StreamResponse:
        name = self._job(request)
        try:
            run, refusal = await self.daemon.start(name)
        except KeyError:
            return error(404, f"no job named {name!r}")
        if run is None:
            return error(409, f"job {name!r} not started: {refusal}", job=name)
        return web.json_response({"job": name, "run": run}, status=202)

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        name = self._job(request)
        wanted = request.query.get("run")
        stopped = self.daemon.cancel(name, wanted)
        if wanted is not None and not stopped:
            return error(404, f"job {name!r} has no running run {wanted!r}", job=name)
        return web.json_response({"job": name, "cancelled": stopped})

    async def runs(self, request: web.Request) -> web.StreamResponse:
        name = self._job(request)
        try:
            runs = self.daemon.runs(name)
        except KeyError:
            return error(404, f"no job named {name!r}")
        return web.json_response({"job": name, "runs": runs})

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        from cronstable.web.openapi import document

        return web.json_response(document())

    async def next_fires(self, request: web.Request) -> web.StreamResponse:
        return await next_fires(self.daemon, request)

    async def events(self, request: web.Request) -> web.StreamResponse:
        return await self.streams.serve(request)

    async def dashboard(self, request: web.Request) -> web.StreamResponse:
        return dashboard_page()

    # ------------------------------------------------------------ middleware

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = exc.reason if exc.status != 405 else f"{request.method} is not allowed here"
            extra: dict[str, Any] = {}
            if isinstance(exc, web.HTTPMethodNotAllowed):
                extra["allowed"] = sorted(exc.allowed_methods)
            response = error(exc.status, message, **extra)
            for header in ("Allow", "WWW-Authenticate"):
                if header in exc.headers:
                    response.headers[header] = exc.headers[header]
            return response
        except Exception:
            logger.exception("%s %s failed; please report this", request.method, request.path)
            return error(500, "internal error (logged by the daemon)")

    @web.middleware
    async def auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = (
            self.routes.get(request.match_info.route.resource.canonical, {}).get(request.method)
            if request.match_info.route.resource is not None
            else None
        )
        scope = route.scope if route is not None else None
        settings = self.holder.settings
        token: Token | None = None
        if route is not None and route.page and not settings.tokens:
            if not is_local_peer(request.transport):
                return _unauthorized("no token is configured, so only local peers may read", "read")
        if scope is not None and not (
            scope == "read"
            and route is not None
            and route.path == "/metrics"
            and settings.metrics_public
        ):
            presented = bearer(request.headers.get("Authorization"))
            if presented is not None:
                token = match(settings.tokens, presented)
                if token is None:
                    return _unauthorized("the token is not valid", scope)
                if not token.allows(scope):
                    return error(
                        403, f"the token {token.name!r} lacks scope {scope!r}", missingScope=scope
                    )
            elif settings.tokens or scope != "read":
                return _unauthorized(f"this route needs a token with scope {scope!r}", scope)
            elif not is_local_peer(request.transport):
                return _unauthorized(
                    "no token is configured, so only loopback and unix-socket peers may read",
                    scope,
                )
        if request.method == "POST" and route is not None:
            peer = request.remote or "unix socket"
            logger.info(
                "%s %s (job %s) by %s from %s",
                request.method,
                route.path,
                request.match_info.get("name", "-"),
                token.name if token is not None else "anonymous",
                peer,
                extra={"route": route.path, "peer": peer},
            )
        return await handler(request)


def _unauthorized(message: str, scope: str) -> web.Response:
    response = error(401, message, missingScope=scope)
    response.headers["WWW-Authenticate"] = 'Bearer realm="cronstable"'
    return response


def aiohttp_path(path: str) -> str:
    """A route path as aiohttp matches it (a job name is one percent-encoded segment)."""
    return path.replace("{name}", "{name:.+}")


def make_app(daemon: DaemonApi, holder: Holder) -> web.Application:
    api = Api(daemon, holder)
    app = web.Application(middlewares=[api.errors, api.auth], client_max_size=MAX_BODY)
    for route in ROUTES:
        added = app.router.add_route(
            route.method, aiohttp_path(route.path), getattr(api, route.handler)
        )
        api.routes.setdefault(added.resource.canonical, {})[route.method] = route  # type: ignore[union-attr]
    app.on_shutdown.append(api.streams.close)
    return app
