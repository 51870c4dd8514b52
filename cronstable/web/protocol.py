"""The HTTP protocol of one connection: aiohttp's, with a header deadline and quiet errors.

:class:`Connection` is aiohttp's :class:`~aiohttp.web.RequestHandler` with
three additions:

* a deadline for the request line and headers (``web.headerTimeout``): armed
  by the first byte of a request, cancelled when its head is parsed; a client
  that sends headers slower closes at the deadline (``keepAliveTimeout``, aiohttp's
  own, closes a connection that sends nothing; neither applies while a request is
  being answered, so ``GET /events`` streams stay open);
* the connection's :class:`~cronstable.web.connections.Slot` is given back when
  it closes;
* a request aiohttp's parser refuses (a bad request line, a bad header, a line
  too long) is answered with a JSON 400 that quotes nothing of it, one DEBUG line
  and no traceback; ``Server: cronstable`` (these answers bypass the application,
  and with it its ``on_response_prepare``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, BadStatusLine, InvalidHeader, LineTooLong
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from cronstable.web.connections import Slot

logger = logging.getLogger(__name__)

SERVER_NAME = "cronstable"
"""The ``Server`` header of every answer the low-level protocol makes itself."""


LINGERING_TIME = 10.0
"""aiohttp's own lingering time, the most a refused body's rest is drained for."""


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """What a revision sets about new connections (``web.keepAliveTimeout``, ``headerTimeout``,
    ``bodyTimeout``)."""

    keep_alive_timeout: float = 15.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0

    @property
    def lingering_time(self) -> float:
        """Seconds the unread rest of a refused request's body is read and dropped before the
        connection closes (so the client sees the answer): aiohttp's 10 s, never more than
        ``bodyTimeout``."""
        return min(LINGERING_TIME, self.body_timeout)


def parse_problem(exc: BaseException | None) -> str:
    """What was wrong with a request aiohttp could not parse, in words that quote none of it."""
    if isinstance(exc, LineTooLong):
        return "a request line or header is too long"
    if isinstance(exc, BadHttpMethod):
        return "not an HTTP method"
    if isinstance(exc, BadStatusLine):
        return "not an HTTP request line"
    if isinstance(exc, InvalidHeader):
        return "a header that is not valid"
    return "a request that cannot be parsed"


class Connection(web.RequestHandler):
    __slots__ = ("_slot", "_header_timeout", "_head_timer", "_answering", "_on_header_timeout")

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        slot: Slot,
        settings: ConnectionSettings,
        on_header_timeout: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=settings.keep_alive_timeout,
            lingering_time=settings.lingering_time,
            access_log=None,  # type: ignore[arg-type]  # None: no access log (as AppRunner's)
        )
        self._slot = slot
        self._header_timeout = settings.header_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._answering = False
        """A request's head was parsed and its answer is not finished."""
        self._on_header_timeout = on_header_timeout

    # ------------------------------------------------------------ the header deadline

    def data_received(self, data: bytes) -> None:
        if data and self._head_timer is None and not self._answering:
            self._head_timer = asyncio.get_running_loop().call_later(
                self._header_timeout, self._head_too_slow
            )
        super().data_received(data)

    def head_received(self) -> None:
        """A request's line and headers are in (called by the server's request factory)."""
        self._answering = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._answering or not self.connected:
            return
        peer = self.transport.get_extra_info("peername") if self.transport else None
        logger.debug(
            "Closing a connection from %s: no complete request head within %g s (headerTimeout)",
            peer,
            self._header_timeout,
        )
        self._on_header_timeout()
        self.force_close()

    async def finish_response(
        self, request: BaseRequest, resp: StreamResponse, start_time: float | None
    ) -> tuple[StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._answering = False

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._slot.release()
        super().connection_lost(exc)

    # ------------------------------------------------------------ quiet errors

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        """The answer to a request the parser refused (4xx) or whose handler failed (5xx)."""
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was partly sent; the connection is dropped")
        body: dict[str, Any]
        if status < 500:
            problem = parse_problem(exc)
            logger.debug("Malformed request from %s (%s): answered %d", request.remote, problem,
                         status)  # fmt: skip
            body = {"error": "malformed request", "problem": problem}
        else:
            if status == 500:
                logger.error("A request from %s failed; please report this", request.remote,
                             exc_info=exc)  # fmt: skip
            body = {"error": "internal error (logged by the daemon)" if status == 500
                    else "the request took too long"}  # fmt: skip
        response = web.json_response(body, status=status)
        response.headers["Server"] = SERVER_NAME
        response.force_close()
        return response


def note_heads(server: web.Server) -> None:
    """Make ``server`` tell each :class:`Connection` when a request's head is parsed.

    aiohttp calls the server's request factory once per parsed request (a refused one
    included), from the connection's task, before the request is handled."""
    make = server.request_factory

    def factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> BaseRequest:
        if isinstance(protocol, Connection):
            protocol.head_received()
        return make(message, payload, protocol, writer, task)

    server.request_factory = factory
