"""The ``web`` section of the Applier: listeners bound in prepare, swapped in commit.

* prepare: read the tokens and the TLS files, bind every address not bound
  yet and create (not start) its servers.  A port in use, a bad certificate or
  an empty token raises ConfigError naming file, line and key; the running
  server is untouched.
* commit: the new settings (tokens, metricsPublic, allowedHosts, the body limits)
  replace the old ones in one assignment, new servers start, servers of removed addresses close.  An
  address present before and after keeps its bound socket (an http:// one keeps
  its server too, so changing only tokens drops no connection; an https:// one
  gets a server with the freshly read certificate on the same socket).
* discard: close what prepare bound.
* between revisions, every :data:`FILE_CHECK_INTERVAL` seconds, the token and
  webhook secret files and the certificate and key are looked at: when one's
  modification time changed, the tokens are read again (swapped like a
  revision's, no connection dropped) and https:// listeners get new servers with
  the new certificate on the same sockets (open connections go on).  A file that
  became empty or unreadable, or a certificate that does not load, keeps what was
  read before and logs an ERROR.

* connections: each listener accepts through an
  :class:`~cronstable.web.acceptor.Acceptor` (``maxConnections`` per listener,
  ``fdReserve`` descriptors kept for the jobs) and serves each connection with a
  :class:`~cronstable.web.protocol.Connection` (``keepAliveTimeout``,
  ``headerTimeout``); a revision's limits apply to connections accepted after
  its commit.

One aiohttp application serves every listener for the daemon's life; it reads
the daemon through :class:`~cronstable.web.view.DaemonApi`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from cronstable.config import ConfigError, DesiredState, Problem
from cronstable.config.models import TlsFiles, WebConfig
from cronstable.reconcile.plan import Plan
from cronstable.tasks import TaskSet
from cronstable.web.acceptor import AcceptErrors, Acceptor, DescriptorBudget
from cronstable.web.app import make_app
from cronstable.web.auth import reread_tokens, resolve_secret, resolve_tokens, token_files
from cronstable.web.connections import ConnectionMetrics, ConnectionSlots, Slot
from cronstable.web.listeners import (
    Address,
    BindError,
    bind,
    bound_url,
    parse_listen,
    server_context,
    unlink_socket,
)
from cronstable.web.mcp.endpoint import McpEndpoint, SdkMissing
from cronstable.web.protocol import Connection, ConnectionSettings, note_heads
from cronstable.web.settings import Holder, Settings
from cronstable.web.view import DaemonApi

if TYPE_CHECKING:
    from cronstable.web.mcp.asgi import McpServer

logger = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT = 5.0
"""Seconds open connections get to finish when the daemon stops."""
FILE_CHECK_INTERVAL = 10.0
"""Seconds between two looks at the modification times of token, secret and TLS files."""


def watched_files(config: WebConfig) -> list[str]:
    """The node files a web section reads: token and webhook secret files, cert and key."""
    paths = token_files(config)
    hook = config.webhooks.github if config.webhooks is not None else None
    chosen = hook.secret.chosen() if hook is not None else None
    if chosen is not None and chosen[0] == "fromFile":
        paths.append(chosen[1])
    if config.tls is not None:
        paths += [config.tls.cert, config.tls.key]
    return paths


def modification_times(paths: list[str]) -> dict[str, int | None]:
    """Each path's mtime in nanoseconds, None when it cannot be stat'ed (blocking)."""
    times: dict[str, int | None] = {}
    for path in paths:
        try:
            times[path] = os.stat(path).st_mtime_ns
        except OSError:
            times[path] = None
    return times


def github_secret(config: WebConfig) -> tuple[bytes | None, str]:
    """The webhook secret (None when none is configured or it resolves empty), and why empty."""
    hook = config.webhooks.github if config.webhooks is not None else None
    if hook is None:
        return None, ""
    value, why = resolve_secret(hook.secret)
    return value.encode("utf-8") or None, why


def listener_label(address: Address) -> str:
    """How metrics and logs name a listener: where it binds (``host:port``, ``unix://path``)."""
    if address.scheme == "unix":
        return f"unix://{address.host}"
    host = f"[{address.host}]" if ":" in address.host else address.host
    return f"{host}:{address.port}"


@dataclass(eq=False, slots=True)
class Listener:
    address: Address
    sockets: list[socket.socket]
    """Bound sockets, owned by the listener (acceptors get duplicates)."""
    slots: ConnectionSlots
    """Its open connections (kept when only the scheme changes, as the sockets are)."""
    servers: list[Acceptor] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [bound_url(self.address, sock) for sock in self.sockets]

    def close_servers(self) -> None:
        for server in self.servers:
            server.close()
        self.servers = []

    def close(self) -> None:
        self.close_servers()
        for sock in self.sockets:
            sock.close()
        self.slots.close()
        if self.address.scheme == "unix":
            unlink_socket(self.address.host)


@dataclass(slots=True)
class _Prepared:
    settings: Settings | None
    listeners: dict[tuple[str, str, int], Listener]
    """The listener of every address after commit (kept ones included)."""
    fresh: list[Listener]
    """Listeners bound by this prepare (closed on discard)."""
    new_servers: list[tuple[Listener, list[Acceptor]]]
    """Acceptors to start at commit, replacing the listener's current ones."""
    mode: int | None
    config: WebConfig | None = None
    mtimes: dict[str, int | None] = field(default_factory=dict)
    """The watched files' modification times, taken before they were read."""
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)
    mcp: McpServer | None = None
    """The MCP server to start at commit (the first revision that enables it)."""


class WebSection:
    name = "web"

    def __init__(self, daemon: DaemonApi, registry: CollectorRegistry | None = None) -> None:
        """``registry``: where the connection metrics go (the daemon's, for /metrics)."""
        self.daemon = daemon
        self.holder = Holder()
        self.listeners: dict[tuple[str, str, int], Listener] = {}
        self._runner: web.AppRunner | None = None
        self._config: WebConfig | None = None
        self._mtimes: dict[str, int | None] = {}
        self._checker: asyncio.Task[None] | None = None
        registry = registry if registry is not None else CollectorRegistry()
        self.metrics = ConnectionMetrics(registry)
        self.connection_settings = ConnectionSettings()
        """What new connections get (the applied revision's timeouts)."""
        self.budget = DescriptorBudget(WebConfig.model_fields["fd_reserve"].default, self.metrics)
        self.accept_errors = AcceptErrors(self.metrics)
        self.setups = TaskSet("web")
        """The set-ups (TLS handshakes) of accepted connections, on every listener."""
        self.mcp = McpEndpoint(daemon, self.holder, registry)
        """``/mcp``, serving while the applied revision enables ``web.mcp``."""

    def urls(self) -> list[str]:
        """Where the API answers now (real ports when the configuration said 0)."""
        return [url for listener in self.listeners.values() for url in listener.urls]

    def affected(self, plan: Plan) -> bool:
        # every revision re-reads the token files and the certificate
        return True

    async def _server(self) -> web.Server:
        if self._runner is None:
            runner = web.AppRunner(
                make_app(self.daemon, self.holder, self.mcp),
                access_log=None,
                shutdown_timeout=SHUTDOWN_TIMEOUT,
                handle_signals=False,
            )
            await runner.setup()
            assert runner.server is not None
            note_heads(runner.server)
            self._runner = runner
        server = self._runner.server
        assert server is not None
        return server

    async def prepare(self, desired: DesiredState) -> _Prepared:
        web_config = desired.web
        if web_config is None or not web_config.listen:
            return _Prepared(None, {}, [], [], None)
        mtimes = await asyncio.to_thread(modification_times, watched_files(web_config))
        tokens = resolve_tokens(web_config, desired.problem)
        context: ssl.SSLContext | None = None
        problems: list[Problem] = []
        secret, why = github_secret(web_config)
        if web_config.webhooks is not None and web_config.webhooks.github is not None:
            if secret is None:
                problems.append(
                    desired.problem(
                        ("web", "webhooks", "github", "secret"),
                        f"the GitHub webhook secret resolves empty ({why}); "
                        "refusing to accept unsigned pushes",
                    )
                )
        try:
            mcp_server = await self.mcp.prepare(web_config.mcp)
        except SdkMissing as exc:
            mcp_server = None
            problems.append(desired.problem(("web", "mcp", "enabled"), str(exc)))
        if web_config.tls is not None:
            try:
                context = await asyncio.to_thread(server_context, web_config.tls)
            except (OSError, ssl.SSLError, ValueError) as exc:
                problems.append(
                    desired.problem(("web", "tls"), f"cannot load the certificate and key: {exc}")
                )
        listeners: dict[tuple[str, str, int], Listener] = {}
        fresh: list[Listener] = []
        for index, url in enumerate(web_config.listen):
            address = parse_listen(url)
            if address.key in listeners:
                problems.append(
                    desired.problem(("web", "listen", index), f"{url} binds an address twice")
                )
                continue
            current = self.listeners.get(address.key)
            if current is not None:
                listeners[address.key] = current
                continue
            try:
                sockets = await asyncio.to_thread(bind, address)
            except BindError as exc:
                problems.append(desired.problem(("web", "listen", index), f"{url}: {exc}"))
                continue
            slots = ConnectionSlots(
                listener_label(address), web_config.max_connections, self.metrics
            )
            listener = Listener(address, sockets, slots)
            fresh.append(listener)
            listeners[address.key] = listener
        prepared = _Prepared(
            Settings.of(web_config, tuple(tokens), secret),
            listeners,
            fresh,
            [],
            web_config.mode,
            web_config,
            mtimes,
            ConnectionSettings(
                web_config.keep_alive_timeout, web_config.header_timeout, web_config.body_timeout
            ),
            mcp_server,
        )
        if problems:
            await self.discard(prepared)
            raise ConfigError(problems)
        try:
            server = await self._server()
            for url in web_config.listen:
                address = parse_listen(url)
                listener = listeners[address.key]
                new_scheme = listener.address.scheme != address.scheme
                if listener in fresh or new_scheme or address.scheme == "https":
                    tls = context if address.scheme == "https" else None
                    servers = [
                        self._acceptor(server, sock, listener.slots, tls, web_config.header_timeout)
                        for sock in listener.sockets
                    ]
                    prepared.new_servers.append((listener, servers))
                    if new_scheme:
                        listeners[address.key] = replacement = Listener(
                            address, listener.sockets, listener.slots
                        )
                        prepared.new_servers[-1] = (replacement, servers)
        except BaseException:
            await self.discard(prepared)
            raise
        return prepared

    def commit(self, prepared: _Prepared, desired: DesiredState) -> None:
        self.holder.settings = prepared.settings or Settings()
        self.mcp.commit(prepared.config.mcp if prepared.config is not None else None, prepared.mcp)
        self._config, self._mtimes = prepared.config, prepared.mtimes
        self.connection_settings = prepared.connections
        if prepared.config is not None:
            self.budget.set_reserve(prepared.config.fd_reserve)
            for listener in prepared.listeners.values():
                listener.slots.set_limit(prepared.config.max_connections)
        if self._config is not None and self._checker is None:
            self._checker = asyncio.ensure_future(self._check_files_forever())
        kept = set(prepared.listeners.values())
        for key, listener in self.listeners.items():
            successor = prepared.listeners.get(key)
            if successor is None:
                listener.close()  # the address was removed
            elif successor is not listener:
                listener.close_servers()  # same socket, another scheme: new servers below
        for listener, servers in prepared.new_servers:
            if listener in kept:
                listener.close_servers()
                listener.servers = servers
                for server in servers:
                    server.start()
        for listener in prepared.listeners.values():
            if listener.address.scheme == "unix" and prepared.mode is not None:
                try:
                    os.chmod(listener.address.host, prepared.mode)
                except OSError as exc:
                    logger.warning("Cannot chmod %s: %s", listener.address.host, exc)
        was_listening = bool(self.listeners)
        self.listeners = dict(prepared.listeners)
        if self.listeners:
            logger.info("HTTP API listening on %s", ", ".join(self.urls()))
        elif was_listening:
            logger.info("HTTP API stopped: the web section is gone or lists no address")

    async def discard(self, prepared: _Prepared) -> None:
        for _, servers in prepared.new_servers:
            for server in servers:
                server.close()
        for listener in prepared.fresh:
            listener.close()

    async def _check_files_forever(self) -> None:
        while True:
            await asyncio.sleep(FILE_CHECK_INTERVAL)
            try:
                await self.check_files()
            except Exception:
                logger.exception("Re-reading the web section's files failed; please report this")

    async def check_files(self) -> None:
        """Read tokens, secret and certificate again if a file's modification time changed."""
        config = self._config
        if config is None:
            return
        mtimes = await asyncio.to_thread(modification_times, watched_files(config))
        if config is not self._config or mtimes == self._mtimes:
            return  # a revision committed meanwhile (it read the files), or nothing changed
        changed = {path for path, mtime in mtimes.items() if self._mtimes.get(path) != mtime}
        self._mtimes = mtimes
        logger.info("Web: %s changed; reading it again", ", ".join(sorted(changed)))
        settings = self.holder.settings
        tokens, problems = await asyncio.to_thread(reread_tokens, config, settings.tokens)
        secret, why = await asyncio.to_thread(github_secret, config)
        if secret is None and settings.github_secret is not None:
            problems.append(f"the GitHub webhook secret resolves empty ({why}); keeping the old")
            secret = settings.github_secret
        for problem in problems:
            logger.error("Web: %s", problem)
        if config is not self._config or settings is not self.holder.settings:
            return
        self.holder.settings = dataclasses.replace(
            settings, tokens=tuple(tokens), github_secret=secret
        )
        if config.tls is not None and changed & {config.tls.cert, config.tls.key}:
            await self._reload_certificate(config, config.tls)

    async def _reload_certificate(self, config: WebConfig, tls: TlsFiles) -> None:
        try:
            context = await asyncio.to_thread(server_context, tls)
        except (OSError, ssl.SSLError, ValueError) as exc:
            logger.error(
                "Web: cannot load the certificate %s and key %s (%s); keeping the loaded ones",
                tls.cert,
                tls.key,
                exc,
            )
            return
        server = await self._server()
        swaps: list[tuple[Listener, list[Acceptor]]] = []
        try:
            for listener in self.listeners.values():
                if listener.address.scheme == "https":
                    servers = [
                        self._acceptor(server, sock, listener.slots, context, config.header_timeout)
                        for sock in listener.sockets
                    ]
                    swaps.append((listener, servers))
        finally:
            if config is not self._config:  # a revision committed meanwhile: it wins
                for _, servers in swaps:
                    for new in servers:
                        new.close()
                swaps = []
        for listener, servers in swaps:
            old, listener.servers = listener.servers, servers
            for new in servers:
                new.start()
            for retired in old:
                retired.close()  # stops accepting; open connections go on
        if swaps:
            logger.info("Web: serving the certificate %s read again", tls.cert)

    async def close(self) -> None:
        """Stop listening and let open requests finish (the daemon is stopping)."""
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
            self._checker = None
        for listener in self.listeners.values():
            listener.close()
        self.listeners = {}
        await self.setups.cancel()  # the TLS handshakes still going, of every listener
        await self.mcp.close()  # its sessions end with the listeners
        self.budget.close()
        self.accept_errors.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _acceptor(
        self,
        server: web.Server,
        sock: socket.socket,
        slots: ConnectionSlots,
        context: ssl.SSLContext | None,
        handshake_timeout: float,
    ) -> Acceptor:
        """An acceptor on a duplicate of ``sock`` that does not accept until started."""
        loop = asyncio.get_running_loop()
        on_header_timeout = self.metrics.header_timeouts.inc

        def connection(slot: Slot) -> Connection:
            return Connection(
                server,
                loop=loop,
                slot=slot,
                settings=self.connection_settings,
                on_header_timeout=on_header_timeout,
            )

        dup = sock.dup()
        dup.setblocking(False)
        return Acceptor(
            dup,
            protocol=connection,
            slots=slots,
            budget=self.budget,
            errors=self.accept_errors,
            setups=self.setups,
            context=context,
            handshake_timeout=handshake_timeout,
        )
