"""The ``web`` section of the Applier: listeners bound in prepare, swapped in commit.

* prepare: read the tokens and the TLS files, bind every address not bound
  yet and create (not start) its servers.  A port in use, a bad certificate or
  an empty token raises ConfigError naming file, line and key; the running
  server is untouched.
* commit: the new settings (tokens, metricsPublic) replace the old ones in one
  assignment, new servers start, servers of removed addresses close.  An
  address present before and after keeps its bound socket (an http:// one keeps
  its server too, so changing only tokens drops no connection; an https:// one
  gets a server with the freshly read certificate on the same socket).
* discard: close what prepare bound.

One aiohttp application serves every listener for the daemon's life; it reads
the daemon through :class:`~cronstable.web.view.DaemonApi`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from cronstable.config import ConfigError, DesiredState, Problem
from cronstable.reconcile.plan import Plan
from cronstable.web.app import Holder, Settings, make_app
from cronstable.web.auth import resolve_secret, resolve_tokens
from cronstable.web.listeners import (
    Address,
    BindError,
    bind,
    bound_url,
    parse_listen,
    server_context,
    unlink_socket,
)
from cronstable.web.view import DaemonApi

logger = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT = 5.0
"""Seconds open connections get to finish when the daemon stops."""


@dataclass(eq=False, slots=True)
class Listener:
    address: Address
    sockets: list[socket.socket]
    """Bound sockets, owned by the listener (servers get duplicates)."""
    servers: list[asyncio.Server] = field(default_factory=list)

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
        if self.address.scheme == "unix":
            unlink_socket(self.address.host)


@dataclass(slots=True)
class _Prepared:
    settings: Settings | None
    listeners: dict[tuple[str, str, int], Listener]
    """The listener of every address after commit (kept ones included)."""
    fresh: list[Listener]
    """Listeners bound by this prepare (closed on discard)."""
    new_servers: list[tuple[Listener, list[asyncio.Server]]]
    """Servers to start at commit, replacing the listener's current ones."""
    mode: int | None


class WebSection:
    name = "web"

    def __init__(self, daemon: DaemonApi) -> None:
        self.daemon = daemon
        self.holder = Holder()
        self.listeners: dict[tuple[str, str, int], Listener] = {}
        self._runner: web.AppRunner | None = None

    def urls(self) -> list[str]:
        """Where the API answers now (real ports when the configuration said 0)."""
        return [url for listener in self.listeners.values() for url in listener.urls]

    def affected(self, plan: Plan) -> bool:
        # every revision re-reads the token files and the certificate
        return True

    async def _server(self) -> web.Server:
        if self._runner is None:
            runner = web.AppRunner(
                make_app(self.daemon, self.holder),
                access_log=None,
                shutdown_timeout=SHUTDOWN_TIMEOUT,
                handle_signals=False,
            )
            await runner.setup()
            self._runner = runner
        server = self._runner.server
        assert server is not None
        return server

    async def prepare(self, desired: DesiredState) -> Any:
        web_config = desired.web
        if web_config is None or not web_config.listen:
            return _Prepared(None, {}, [], [], None)
        tokens = resolve_tokens(web_config, desired.problem)
        context: ssl.SSLContext | None = None
        problems: list[Problem] = []
        github_secret: bytes | None = None
        hook = web_config.webhooks.github if web_config.webhooks is not None else None
        if hook is not None:
            value, why = resolve_secret(hook.secret)
            github_secret = value.encode("utf-8") or None
            if github_secret is None:
                problems.append(
                    desired.problem(
                        ("web", "webhooks", "github", "secret"),
                        f"the GitHub webhook secret resolves empty ({why}); "
                        "refusing to accept unsigned pushes",
                    )
                )
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
            listener = Listener(address, sockets)
            fresh.append(listener)
            listeners[address.key] = listener
        prepared = _Prepared(
            Settings(tuple(tokens), web_config.metrics_public, github_secret),
            listeners,
            fresh,
            [],
            web_config.mode,
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
                    servers = [await _create(server, sock, tls) for sock in listener.sockets]
                    prepared.new_servers.append((listener, servers))
                    if new_scheme:
                        listeners[address.key] = replacement = Listener(address, listener.sockets)
                        prepared.new_servers[-1] = (replacement, servers)
        except BaseException:
            await self.discard(prepared)
            raise
        return prepared

    def commit(self, prepared: Any, desired: DesiredState) -> None:
        assert isinstance(prepared, _Prepared)
        self.holder.settings = prepared.settings or Settings()
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
                    asyncio.ensure_future(server.start_serving())
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

    async def discard(self, prepared: Any) -> None:
        assert isinstance(prepared, _Prepared)
        for _, servers in prepared.new_servers:
            for server in servers:
                server.close()
        for listener in prepared.fresh:
            listener.close()

    async def close(self) -> None:
        """Stop listening and let open requests finish (the daemon is stopping)."""
        for listener in self.listeners.values():
            listener.close()
        self.listeners = {}
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def _create(
    server: web.Server, sock: socket.socket, context: ssl.SSLContext | None
) -> asyncio.Server:
    """A server on a duplicate of ``sock`` that does not accept until started."""
    loop = asyncio.get_running_loop()
    dup = sock.dup()
    dup.setblocking(False)
    try:
        if sock.family == getattr(socket, "AF_UNIX", None):
            return await loop.create_unix_server(server, sock=dup, ssl=context, start_serving=False)
        return await loop.create_server(server, sock=dup, ssl=context, start_serving=False)
    except BaseException:
        dup.close()
        raise
