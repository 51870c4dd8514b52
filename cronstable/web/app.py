"""The aiohttp application: the route table (:mod:`cronstable.web.routes`) served; errors,
Host and Origin, auth and request bodies as middleware, in that order.

Every answer is JSON except ``GET /metrics`` (Prometheus text), ``GET /status``
asked for ``text/plain`` (yacron's one line per job) and the dashboard.  Errors
are ``{"error": ...}`` with a 4xx status and quote nothing of the request (a job
name from the URL only escaped and cut short); a bug is logged and answered 500
without a traceback.  Every ``GET`` route answers ``HEAD``; another method gets
405 with ``Allow``.  The ``Server`` header is ``cronstable``, without versions.

A body is read only once the request passed the checks: then within
``web.bodyTimeout`` seconds (408 and the connection closed past it) and at most
:data:`MAX_BODY` bytes, except by the webhook, which reads its own.  A request
refused before its body was read is answered ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from cronstable import __version__
from cronstable.web import backfill as backfills
from cronstable.web import calls, encode, pauses
from cronstable.web.access import authorize
from cronstable.web.answers import error, refused, shown
from cronstable.web.auth import Token, bearer, is_local_peer, match
from cronstable.web.bodies import MAX_BODY, timed_out
from cronstable.web.dashboard import dashboard_page
from cronstable.web.events import STREAM_HEADERS, EventStreams
from cronstable.web.github import GitHubWebhook
from cronstable.web.hosts import HOST_REFUSED, ORIGIN_REFUSED, host_allowed, origin_allowed
from cronstable.web.mcp.endpoint import McpEndpoint
from cronstable.web.routes import ROUTES, STATUS_PAGE, STATUS_PAGE_MAX, Route, aiohttp_path
from cronstable.web.settings import Holder, Settings
from cronstable.web.view import DaemonApi

__all__ = ["MAX_BODY", "Holder", "Settings", "error", "make_app"]

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER = "cronstable"
"""The Server header of every answer: no versions."""


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


def _page_size(text: str) -> int | None:
    if not text.isdigit() or not 1 <= int(text) <= STATUS_PAGE_MAX:
        return None
    return int(text)


def _answer(call: Callable[[], calls.Json]) -> web.Response:
    """``call``'s answer (200), or its refusal."""
    try:
        return web.json_response(call())
    except calls.Refused as refusal:
        return refused(refusal)


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
        self.github = GitHubWebhook(daemon, lambda: holder.settings).handle

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
        text = request.query.get("limit")
        limit = STATUS_PAGE if text is None else _page_size(text)
        if limit is None:
            return error(400, f"limit must be a whole number from 1 to {STATUS_PAGE_MAX}")
        try:
            view = self.daemon.status(limit, request.query.get("cursor"))
        except ValueError:
            return error(400, "cursor is not one this daemon gave (start again without it)")
        status = encode.status(view)
        headers = {}
        if view.next_cursor is not None:
            query = urlencode({"limit": limit, "cursor": view.next_cursor})
            headers["Link"] = f'</status?{query}>; rel="next"'
        if _wants_text(request):
            return web.Response(text=status_text(status), headers=headers)
        return web.json_response(status, headers=headers)

    async def config(self, request: web.Request) -> web.StreamResponse:
        config = self.daemon.applied_config()
        if config is None:
            return error(404, "no configuration has been applied yet")
        return web.json_response(encode.applied_config(config))

    async def reload(self, request: web.Request) -> web.StreamResponse:
        answer = calls.reload(self.daemon, self.token_name(request))
        return web.json_response(answer, status=202)

    async def audit(self, request: web.Request) -> web.StreamResponse:
        cursor = request.query.get("cursor")
        limit = calls.limit_of(request.query.get("limit"), calls.AUDIT_PAGE)
        try:
            answer = calls.audit(self.daemon, cursor, limit)
        except calls.Refused as refusal:
            return refused(refusal)
        headers = {}
        if answer["nextCursor"] is not None:
            query = urlencode({"limit": limit, "cursor": answer["nextCursor"]})
            headers["Link"] = f'</audit?{query}>; rel="next"'
        return web.json_response(answer, headers=headers)

    async def pools(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(calls.pools(self.daemon))

    async def cluster(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(encode.cluster(self.daemon.cluster_view()))

    async def fleet(self, request: web.Request) -> web.StreamResponse:
        after, limit = request.query.get("after"), calls.limit_of(request.query.get("limit"))
        try:
            return web.json_response(await calls.fleet(self.daemon, after, limit))
        except calls.Refused as refusal:
            return refused(refusal)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        body, content_type = self.daemon.metrics_text()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def start(self, request: web.Request) -> web.StreamResponse:
        try:
            answer = await calls.start(self.daemon, request.match_info["name"])
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer, status=202)

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        name, run = request.match_info["name"], request.query.get("run")
        return _answer(lambda: calls.cancel(self.daemon, name, run))

    async def pause(self, request: web.Request) -> web.StreamResponse:
        name, by = request.match_info["name"], self.token_name(request)
        try:
            answer = await pauses.pause(self.daemon, name, await request.read(), by)
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer)

    async def resume(self, request: web.Request) -> web.StreamResponse:
        name, by = request.match_info["name"], self.token_name(request)
        try:
            answer = await pauses.resume(self.daemon, name, by)
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer)

    async def pause_workflow(self, request: web.Request) -> web.StreamResponse:
        name, by = request.match_info["name"], self.token_name(request)
        try:
            answer = await pauses.pause(self.daemon, name, await request.read(), by, workflow=True)
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer)

    async def resume_workflow(self, request: web.Request) -> web.StreamResponse:
        name, by = request.match_info["name"], self.token_name(request)
        try:
            answer = await pauses.resume(self.daemon, name, by, workflow=True)
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer)

    async def backfill(self, request: web.Request) -> web.StreamResponse:
        name, by = request.match_info["name"], self.token_name(request)
        try:
            status, answer = backfills.backfill(self.daemon, name, await request.read(), by)
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer, status=status)

    async def backfill_progress(self, request: web.Request) -> web.StreamResponse:
        return _answer(lambda: backfills.progress(self.daemon, request.match_info["name"]))

    def token_name(self, request: web.Request) -> str | None:
        """The name of the token the request carries (the auth middleware let it through);
        None without one."""
        presented = bearer(request.headers.get("Authorization"))
        token = match(self.holder.settings.tokens, presented) if presented is not None else None
        return token.name if token is not None else None

    async def runs(self, request: web.Request) -> web.StreamResponse:
        return _answer(lambda: calls.runs(self.daemon, request.match_info["name"]))

    async def workflows(self, request: web.Request) -> web.StreamResponse:
        return _answer(lambda: calls.workflows(self.daemon))

    async def workflow_runs(self, request: web.Request) -> web.StreamResponse:
        return _answer(lambda: calls.workflow_runs(self.daemon, request.match_info["name"]))

    async def start_workflow(self, request: web.Request) -> web.StreamResponse:
        try:
            answer = await calls.start_workflow(self.daemon, request.match_info["name"])
        except calls.Refused as refusal:
            return refused(refusal)
        return web.json_response(answer, status=202)

    async def cancel_workflow(self, request: web.Request) -> web.StreamResponse:
        name, run = request.match_info["name"], request.match_info["id"]
        return _answer(lambda: calls.cancel_workflow(self.daemon, name, run))

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        from cronstable.web.openapi import document

        return web.json_response(document())

    async def next_fires(self, request: web.Request) -> web.StreamResponse:
        name, hours = request.match_info["name"], calls.hours_of(request.query.get("hours"))
        return _answer(lambda: calls.next_fires(self.daemon, name, hours))

    async def events(self, request: web.Request) -> web.StreamResponse:
        if request.method == "HEAD":  # the headers a stream would start with, and no stream
            return web.Response(headers=STREAM_HEADERS)
        return await self.streams.serve(request)

    async def dashboard(self, request: web.Request) -> web.StreamResponse:
        return dashboard_page()

    # ------------------------------------------------------------ middleware

    def route(self, request: web.Request) -> Route | None:
        """The table's route of a request (HEAD finds its GET); None for no route."""
        resource = request.match_info.route.resource
        if resource is None:
            return None
        method = "GET" if request.method == "HEAD" else request.method
        return self.routes.get(resource.canonical, {}).get(method)

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await self._answer_or_error(request, handler)
        if request.body_exists and not request.content.is_eof() and not response.prepared:
            response.force_close()  # refused unread: the connection is not used again
        return response

    async def _answer_or_error(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            extra: dict[str, Any] = {}
            if isinstance(exc, web.HTTPMethodNotAllowed):
                extra["allowed"] = sorted(exc.allowed_methods)
            response = error(exc.status, _MESSAGES.get(exc.status, _phrase(exc.status)), **extra)
            for header in ("Allow", "WWW-Authenticate"):
                if header in exc.headers:
                    response.headers[header] = exc.headers[header]
            return response
        except Exception:
            logger.exception("%s %s failed; please report this", request.method, request.path)
            return error(500, "internal error (logged by the daemon)")

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """403 for a page of another origin; 421 for a name a token-less daemon does not know."""
        settings = self.holder.settings
        host = request.headers.get("Host")
        if not origin_allowed(
            request.headers.get("Origin"), request.scheme, host, settings.allowed_hosts
        ):
            logger.debug("Refused a request from a page of another origin")
            return error(403, ORIGIN_REFUSED)
        route = self.route(request)
        if (
            not settings.tokens
            and not (route is not None and route.signed)
            and not host_allowed(
                host, request.transport, settings.listen_hosts, settings.allowed_hosts
            )
        ):
            logger.debug("Refused a request for a host name not allowed (421)")
            return error(421, HOST_REFUSED)
        return await handler(request)

    @web.middleware
    async def auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = self.route(request)
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
            try:
                token = authorize(
                    settings, request.headers.get("Authorization"), request.transport, scope
                )
            except calls.Refused as refusal:
                return refused(refusal)
        if request.method == "POST" and route is not None:
            peer = request.remote or "unix socket"
            logger.info(
                "%s %s (job %s) by %s from %s",
                request.method,
                route.path,
                shown(request.match_info.get("name", "-")),
                token.name if token is not None else "anonymous",
                peer,
                extra={"route": route.path, "peer": peer},
            )
        return await handler(request)

    @web.middleware
    async def bodies(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Read a body (at most MAX_BODY bytes, within bodyTimeout) before the route runs."""
        route = self.route(request)
        if route is None or route.signed or not request.body_exists:
            return await handler(request)
        if request.content_length is not None and request.content_length > MAX_BODY:
            return error(413, _MESSAGES[413])
        timeout = self.holder.settings.body_timeout
        try:
            async with asyncio.timeout(timeout):
                await request.read()  # 413 past client_max_size (MAX_BODY)
        except TimeoutError:
            return await timed_out(request, timeout)
        return await handler(request)


_MESSAGES = {
    404: "no such route (GET /openapi.json lists them)",
    405: "this method is not allowed here (the Allow header lists those that are)",
    413: f"the body is larger than {MAX_BODY} bytes",
}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "the request was refused"


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER


def _unauthorized(message: str, scope: str) -> web.Response:
    return refused(calls.Refused(401, message, missingScope=scope))


def make_app(daemon: DaemonApi, holder: Holder, mcp: McpEndpoint | None = None) -> web.Application:
    """The application: every route of the table, and ``/mcp`` when ``mcp`` is given."""
    api = Api(daemon, holder)
    app = web.Application(
        middlewares=[api.errors, api.guard, api.auth, api.bodies], client_max_size=MAX_BODY
    )
    for route in ROUTES:
        path, handler = aiohttp_path(route.path), getattr(api, route.handler)
        added = app.router.add_route(route.method, path, handler)
        if route.method == "GET":
            app.router.add_route("HEAD", path, handler)
        api.routes.setdefault(added.resource.canonical, {})[route.method] = route  # type: ignore[union-attr]
    if mcp is not None:
        mcp.register(app)
    app.on_response_prepare.append(_server_header)
    app.on_shutdown.append(api.streams.close)
    return app
