"""JSON error answers, and the one way a value from the request may appear in one."""

from __future__ import annotations

from typing import Any

from aiohttp import web

SHOWN_LENGTH = 64
"""Characters of a request value (a job name from the URL) an answer or log line shows."""


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def shown(text: str, limit: int = SHOWN_LENGTH) -> str:
    """``text`` cut to ``limit`` characters, every unprintable one escaped (``\\x1b``)."""
    cut = text[:limit]
    escaped = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in cut)
    return escaped + ("…" if len(text) > limit else "")


def no_such_job(name: str) -> web.Response:
    return error(404, f"no job named '{shown(name)}'")


def no_such_workflow(name: str) -> web.Response:
    return error(404, f"no workflow named '{shown(name)}'")
