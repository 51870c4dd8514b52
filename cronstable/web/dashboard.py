"""``GET /``: the dashboard, one self-contained HTML page (``dashboard.html``).

The page holds no data: its script reads ``/status``, ``/jobs/{name}/runs``,
``/jobs/{name}/next``, ``/fleet`` (its fleet tab), ``/audit`` (its audit tab) and
``/events`` with the token the user typed (kept in ``sessionStorage``).  It builds
what it shows from text nodes, never markup, so no answer's text is read as HTML.
It is served with a Content-Security-Policy that allows exactly its one inline
script and one inline style, by their sha256 digests (computed from the file on
first use), and fetches to this origin only.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from importlib.resources import files

from aiohttp import web

PAGE = "dashboard.html"


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy(html: str) -> str:
    """The CSP for ``html``: its inline ``<script>`` and ``<style>`` blocks, nothing else."""
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    if not scripts or not styles:
        raise ValueError(f"{PAGE} needs an inline <script> and <style>")
    return "; ".join(
        (
            "default-src 'none'",
            "script-src " + " ".join(_digest(s) for s in scripts),
            "style-src " + " ".join(_digest(s) for s in styles),
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


@cache
def page() -> tuple[bytes, str]:
    """The page's bytes and its CSP."""
    html = (files("cronstable.web") / PAGE).read_text(encoding="utf-8")
    return html.encode(), policy(html)


def dashboard_page() -> web.Response:
    body, csp = page()
    return web.Response(
        body=body,
        content_type="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": csp,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache",
        },
    )
