"""Real local servers that receive reports: SMTP (aiosmtpd), HTTP (aiohttp), and hanging ones.

Everything listens on 127.0.0.1, port 0, on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiosmtpd.smtp import SMTP, Envelope, Session
from daemon_proc import until


@dataclass
class Mailbox:
    mails: list[Envelope] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.mails.append(envelope)
        self.arrived.set()
        return "250 OK"


@asynccontextmanager
async def smtp_server() -> AsyncIterator[tuple[int, Mailbox]]:
    """aiosmtpd's SMTP protocol on this loop; (port, mailbox)."""
    box = Mailbox()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(box, hostname="test", loop=loop), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], box
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """Accepts connections and never says a word (a hung SMTP server)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    """Answers to give, in order (then 200)."""
    hang: bool = False

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def wait_for(self, count: int, timeout: float = 20) -> list[Received]:
        """Until ``count`` requests came in: every request so far."""
        await until(lambda: len(self.requests) >= count, timeout, f"{count} requests", every=0.02)
        return self.requests


@asynccontextmanager
async def http_receiver() -> AsyncIterator[Receiver]:
    """Records every request (a gzip body is unpacked); answers from ``statuses``."""
    box = Receiver(0)

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        box.requests.append(Received(request.path, dict(request.headers), body))
        if box.hang:
            await asyncio.Event().wait()
        status = box.statuses.pop(0) if box.statuses else 200
        return web.Response(status=status, text="{}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    box.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield box
    finally:
        await runner.cleanup()
