"""A small synchronous HTTP client for the daemon's API: http://, https:// and unix://.

Built on :mod:`http.client` so the client commands start fast (no asyncio, no
aiohttp).  Every request has a timeout and every answer is read up to a bound.
Failures are translated here, at the edge, into two errors whose messages are
redacted and name the URL::

    ApiError        a problem before any answer: bad URL, unreadable CA file
    └── Unreachable no answer: refused, no such socket, timeout, TLS, not HTTP

An answer, whatever its status, is a :class:`Answer`; the caller decides what
a status means.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cronstable.errors import CronstableError
from cronstable.redact import redact

DEFAULT_TIMEOUT = 10.0
"""Seconds for connecting and for each read of an answer."""
MAX_ANSWER = 32 * 1024 * 1024
"""Larger answers are refused (a runs listing is at most 20 runs × 2 × 64 KiB of output)."""
USER_AGENT = "cronstable-cli"


class ApiError(CronstableError):
    """The request cannot be made (a usage problem)."""


class Unreachable(ApiError):
    """The daemon did not answer: nothing listens, a timeout, a TLS or protocol failure."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        """The body as JSON; None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def message(self) -> str:
        """The daemon's ``error`` text, or the start of the body, or the status."""
        data = self.json()
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return str(data["error"])
        text = self.body[:200].decode("utf-8", "replace").strip()
        return text or f"HTTP {self.status}"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a daemon answers: a base URL split for :mod:`http.client`."""

    url: str
    scheme: str
    host: str
    """Host for TCP, socket path for unix."""
    port: int | None
    prefix: str
    """Path prefix of every route ('' or '/behind/a/proxy')."""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        if url.startswith("unix://"):
            path = url[len("unix://") :]
            if not path.startswith("/"):
                raise ApiError(f"{redact(url)}: a unix URL needs an absolute socket path")
            return cls(url, "unix", path, None, "")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ApiError(
                f"{redact(url)} is not a daemon URL; use http://HOST:PORT, https://HOST:PORT "
                "or unix:///PATH"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ApiError(f"{redact(url)}: {exc}") from None
        return cls(url, parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def connection(self, timeout: float, cafile: str | None) -> http.client.HTTPConnection:
        if self.scheme == "unix":
            return _UnixConnection(self.host, timeout)
        if self.scheme == "https":
            try:
                context = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError) as exc:
                raise ApiError(
                    f"CA file {cafile}: {getattr(exc, 'strerror', None) or exc}"
                ) from exc
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "no answer in time"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer ({type(exc).__name__})"
    return str(exc) or type(exc).__name__


def call(
    endpoint: Endpoint,
    method: str,
    path: str,
    *,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
) -> Answer:
    """One request; ``path`` is already percent-encoded.  Raises ApiError / Unreachable."""
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if method == "POST":
        headers["Content-Length"] = "0"
    connection = endpoint.connection(timeout, cafile)
    try:
        connection.request(method, endpoint.prefix + path, headers=headers)
        response = connection.getresponse()
        body = response.read(MAX_ANSWER + 1)
        if len(body) > MAX_ANSWER:
            raise Unreachable(
                f"{redact(endpoint.url)}: the answer is larger than {MAX_ANSWER} bytes"
            )
        return Answer(response.status, body, response.getheader("Content-Type", ""))
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"cannot reach {redact(endpoint.url)}: {redact(_reason(exc))}") from exc
    finally:
        connection.close()
