"""A small synchronous HTTP client for the daemon's API: http://, https:// and unix://.

Built on :mod:`http.client` so the client commands start fast (no asyncio, no
aiohttp).  Every answer is read up to a bound, and the timeout bounds the whole
request: resolving the host, connecting, the TLS handshake, sending, the status
line, the headers and the body.  A socket timeout alone would not: it limits
each read, so a server that sends a byte a second keeps it waiting for ever.
So the request runs in a worker thread that the caller waits for until the
deadline; past it, the caller shuts the connection down (which ends the
worker's blocked read or write at once) and reports the timeout.

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
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cronstable.errors import CronstableError
from cronstable.redact import redact

DEFAULT_TIMEOUT = 10.0
"""Seconds for a whole request, from resolving the host to the last byte of the answer."""
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
        """The body as JSON; None when it is not JSON (or nested too deep to read)."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            return None

    def message(self) -> str:
        """The daemon's ``error`` text, or the start of the body, or the status."""
        data = self.json()
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return str(data["error"])
        text = self.body[:200].decode("utf-8", "replace").strip()
        return text or f"HTTP {self.status}"


class _Abandonable(http.client.HTTPConnection):
    """A connection that the waiting thread can give up on while a worker uses it.

    :meth:`abandon` shuts the socket down, which ends a read or write blocked on it
    at once; a connection still being made when it is abandoned is closed as soon
    as it is made, so no request goes out after the deadline.
    """

    abandoned = False

    def connect(self) -> None:
        super().connect()
        # abandon() sets the flag and then reads self.sock; this sets self.sock and
        # then reads the flag: whichever runs second sees what the other did
        if self.abandoned:
            self.close()
            raise TimeoutError("abandoned")

    def abandon(self) -> None:
        self.abandoned = True
        sock = self.sock
        if sock is not None:
            try:  # socket.socket's own shutdown, also for TLS: no TLS state is touched
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _TCPConnection(_Abandonable):
    pass


class _TLSConnection(_Abandonable, http.client.HTTPSConnection):
    pass


class _UnixSocket(http.client.HTTPConnection):
    """HTTP over a unix socket: the path instead of a host and port."""

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


class _UnixConnection(_Abandonable, _UnixSocket):
    pass


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

    def connection(self, timeout: float, cafile: str | None) -> _Abandonable:
        if self.scheme == "unix":
            return _UnixConnection(self.host, timeout)
        if self.scheme == "https":
            try:
                context = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError) as exc:
                raise ApiError(
                    f"CA file {cafile}: {getattr(exc, 'strerror', None) or exc}"
                ) from exc
            return _TLSConnection(self.host, self.port, timeout=timeout, context=context)
        return _TCPConnection(self.host, self.port, timeout=timeout)


def _reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return _late(timeout)
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


def _late(timeout: float) -> str:
    return f"no complete answer within the timeout of {timeout:g} s"


def _exchange(
    connection: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: dict[str, str],
    body: bytes | None = None,
) -> tuple[int, bytes, str]:
    """Send one request and read its whole answer (up to MAX_ANSWER + 1 bytes)."""
    connection.request(method, target, body=body, headers=headers)
    response = connection.getresponse()
    body = response.read(MAX_ANSWER + 1)
    return response.status, body, response.getheader("Content-Type", "")


def call(
    endpoint: Endpoint,
    method: str,
    path: str,
    *,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cafile: str | None = None,
    body: Any = None,
) -> Answer:
    """One request; ``path`` is already percent-encoded.  Raises ApiError / Unreachable.

    ``body``: sent as JSON (None: no body).  ``timeout`` bounds all of it (see the
    module doc): past it, Unreachable."""
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
        headers["Content-Length"] = str(len(data))
    elif method == "POST":
        headers["Content-Length"] = "0"
    connection = endpoint.connection(timeout, cafile)
    outcome: list[tuple[int, bytes, str] | BaseException] = []

    def work() -> None:
        try:
            outcome.append(_exchange(connection, method, endpoint.prefix + path, headers, data))
        except BaseException as exc:  # handed to the waiting thread, raised there
            outcome.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=work, name="cronstable-api-request", daemon=True)
    late = True
    try:
        worker.start()
        worker.join(timeout)
        late = worker.is_alive()
    finally:
        if late:  # past the deadline (or interrupted): stop the worker where it is
            connection.abandon()
    if late or not outcome:  # what the worker makes of the shut connection does not count
        raise Unreachable(f"cannot reach {redact(endpoint.url)}: {_late(timeout)}")
    result = outcome[0]
    if isinstance(result, OSError | http.client.HTTPException):
        raise Unreachable(
            f"cannot reach {redact(endpoint.url)}: {redact(_reason(result, timeout))}"
        ) from result
    if isinstance(result, BaseException):
        raise result
    status, body, content_type = result
    if len(body) > MAX_ANSWER:
        raise Unreachable(f"{redact(endpoint.url)}: the answer is larger than {MAX_ANSWER} bytes")
    return Answer(status, body, content_type)
