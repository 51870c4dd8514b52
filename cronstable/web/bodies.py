"""Request bodies: read against a size limit and a deadline, and a shared byte budget.

A route that reads a body reads it here: at most ``limit`` bytes (counted as
they arrive, so a chunked body without Content-Length is held to it too) within
``seconds``.  Past the deadline the answer is 408 and the connection is
closed at once, so a sender trickling a body holds nothing for longer.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

MAX_BODY = 64 * 1024
"""No route but the webhook reads a body bigger than this (nor does ``/mcp``)."""


class BodyTooLarge(Exception):
    """More than the limit arrived."""


async def read_body(request: web.Request, limit: int, seconds: float) -> bytearray:
    """The whole body; :class:`BodyTooLarge` past ``limit``, TimeoutError past ``seconds``."""
    body = bytearray()
    async with asyncio.timeout(seconds):
        while chunk := await request.content.readany():
            if len(body) + len(chunk) > limit:
                raise BodyTooLarge
            body += chunk
    return body


async def timed_out(request: web.Request, seconds: float) -> web.StreamResponse:
    """408, written now; then the connection is closed (the rest of the body is not waited for)."""
    response = web.json_response(
        {"error": f"the request body did not arrive within {seconds:g} s (web.bodyTimeout)"},
        status=408,
    )
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the transport sends what is written, then closes
    return response


class ByteBudget:
    """Bytes of bodies being received at once, shared by every request of one route."""

    def __init__(self) -> None:
        self.in_use = 0

    def reserve(self, size: int, total: int) -> bool:
        """Hold ``size`` bytes if they fit in ``total`` beside what is held; False if not."""
        if self.in_use + size > total:
            return False
        self.in_use += size
        return True

    def release(self, size: int) -> None:
        self.in_use -= size
