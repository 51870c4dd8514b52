"""``GET /events``: the daemon's live events as server-sent events.

Each event is ``event: <type>`` and one line of JSON ``data:``.  A comment line
goes out every :data:`HEARTBEAT` seconds so proxies keep the stream open and a
vanished client is noticed.  The daemon never waits for a client: events wait
in the subscription's bounded queue, and a client that lets it fill is dropped
(its stream ends after an ``event: dropped`` when that can still be written).
A write that does not complete within :data:`WRITE_TIMEOUT` seconds closes the
connection.  When the web server stops, every stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from types import MappingProxyType

from aiohttp import web

from cronstable.web.encode import event_data
from cronstable.web.view import DaemonApi, EventSubscription

logger = logging.getLogger(__name__)

HEARTBEAT = 15.0
WRITE_TIMEOUT = 10.0
RETRY_MS = 3000
"""How long a browser's EventSource waits before reconnecting."""
STREAM_HEADERS: Mapping[str, str] = MappingProxyType(
    {"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
)


def encode(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class EventStreams:
    """The open ``/events`` streams of one application."""

    def __init__(self, daemon: DaemonApi) -> None:
        self.daemon = daemon
        self._open: set[EventSubscription] = set()

    async def serve(self, request: web.Request) -> web.StreamResponse:
        subscription = self.daemon.subscribe()
        if subscription is None:
            return web.json_response(
                {"error": "too many event streams are open; try again later"}, status=429
            )
        self._open.add(subscription)
        response = web.StreamResponse(headers=STREAM_HEADERS)
        try:
            await response.prepare(request)
            await self._write(response, f"retry: {RETRY_MS}\n: connected\n\n".encode())
            while True:
                try:
                    async with asyncio.timeout(HEARTBEAT):
                        event = await subscription.next()
                except TimeoutError:
                    await self._write(response, b": heartbeat\n\n")
                    continue
                if event is None:
                    if subscription.dropped:
                        logger.info("Dropped a slow /events client (%s)", request.remote)
                        with contextlib.suppress(TimeoutError, ConnectionError):
                            reason = {"reason": "the client did not keep up"}
                            await asyncio.wait_for(response.write(encode("dropped", reason)), 1)
                    break
                await self._write(response, encode(event.type, event_data(event.data)))
        except (TimeoutError, ConnectionError):
            if request.transport is not None:
                request.transport.close()  # gone or stuck: nothing more is written
        finally:
            self._open.discard(subscription)
            self.daemon.unsubscribe(subscription)
        return response

    @staticmethod
    async def _write(response: web.StreamResponse, data: bytes) -> None:
        await asyncio.wait_for(response.write(data), WRITE_TIMEOUT)

    async def close(self, app: web.Application) -> None:
        """End every stream (``on_shutdown``: the web server is stopping)."""
        for subscription in list(self._open):
            self.daemon.unsubscribe(subscription)
