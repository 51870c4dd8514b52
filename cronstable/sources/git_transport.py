"""How the git source reaches a remote: one dulwich client per fetch, every wait on it bounded.

* ``git://``: :class:`TimeoutTCPGitClient`, dulwich's TCP client with a socket
  timeout (dulwich sets none, so a server that accepts and never answers would
  hang the fetch forever): connecting, and each read, wait at most ``timeout``.
* ``http(s)://``: dulwich's urllib3 client on a pool with the same timeout for
  connecting and for each read, no retries inside a fetch (the source's poll
  loop retries, and logs once per outage) and every response closed after the
  fetch (:func:`close_client`).
* ``ssh://``: the ``ssh`` program, bounded by its own options (the source's
  default command sets ``ConnectTimeout`` and ``ServerAlive*``).
* ``file://``: a local repository, nothing to wait for.

:func:`is_timeout` tells a timed-out fetch from other failures: it is not worth
the quick retry a dropped connection gets.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import urlsplit

import urllib3
from dulwich.client import (
    GitClient,
    TCPGitClient,
    default_urllib3_manager,
    get_transport_and_path,
)
from dulwich.protocol import (
    DEFAULT_GIT_PROTOCOL_VERSION_FETCH,
    DEFAULT_GIT_PROTOCOL_VERSION_SEND,
    Protocol,
)

# Redirects are still followed; connection, read and status failures are not retried.
_HTTP_RETRIES = urllib3.util.Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5)


class TimeoutTCPGitClient(TCPGitClient):
    """``git://`` with a socket timeout on connecting and on every read and write."""

    def __init__(self, host: str, port: int | None = None, *, timeout: float) -> None:
        super().__init__(host, port)
        self.timeout = timeout
        self._protocols: list[Protocol] = []

    def close(self) -> None:
        """Close every connection: dulwich leaves one open when the first read fails."""
        protocols, self._protocols = self._protocols, []
        for proto in protocols:
            with contextlib.suppress(OSError):
                proto.close()
        super().close()

    def _connect(
        self,
        cmd: bytes,
        path: str | bytes,
        protocol_version: int | None = None,
    ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
        # dulwich's own _connect, with create_connection(timeout=…) for its bare
        # socket() and connect()
        if not isinstance(path, bytes):
            path = path.encode(self._remote_path_encoding)
        sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = sock.makefile("rb", -1)
        wfile = sock.makefile("wb", 0)

        def close() -> None:
            rfile.close()
            wfile.close()
            sock.close()

        def shutdown_write() -> None:
            wfile.flush()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)

        proto = Protocol(
            rfile.read,
            wfile.write,
            close,
            report_activity=self._report_activity,
            shutdown_write=shutdown_write,
        )
        self._protocols.append(proto)
        if path.startswith(b"/~"):
            path = path[1:]
        version = b""
        if cmd == b"upload-pack":
            self.protocol_version = (
                DEFAULT_GIT_PROTOCOL_VERSION_FETCH if protocol_version is None else protocol_version
            )
            if self.protocol_version == 2:
                version = b"\0\0version=2\0"
        else:
            self.protocol_version = DEFAULT_GIT_PROTOCOL_VERSION_SEND
        proto.send_cmd(b"git-" + cmd, path, b"host=" + self._host.encode("ascii") + version)

        def can_read() -> bool:
            # poll, not select: the daemon raises its open-files limit, and select()
            # refuses a descriptor numbered past FD_SETSIZE (1024)
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))

        return proto, can_read, None


def open_client(
    url: str,
    *,
    timeout: float,
    username: str | None = None,
    password: str | None = None,
    ssh_command: str | None = None,
) -> tuple[GitClient, str, urllib3.PoolManager | None]:
    """A client for ``url``, its path there, and the HTTP pool :func:`close_client` clears.

    ``url`` must not carry credentials: HTTP basic ones are ``username`` and
    ``password``.  Raises ValueError for a URL dulwich cannot reach.
    """
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        pool = default_urllib3_manager(
            None,
            pool_manager_cls=_ClosingPoolManager,
            proxy_manager_cls=_ClosingProxyManager,
            base_url=url,
            timeout=timeout,
        )
        assert isinstance(pool, urllib3.PoolManager)  # no auth callbacks: never wrapped
        pool.connection_pool_kw["retries"] = _HTTP_RETRIES
        client, path = get_transport_and_path(
            url, username=username, password=password, pool_manager=pool
        )
        return client, path, pool
    if scheme == "git":
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError("no host in the URL")
        return TimeoutTCPGitClient(parts.hostname, parts.port, timeout=timeout), parts.path, None
    if ssh_command is not None:
        client, path = get_transport_and_path(url, ssh_command=ssh_command)
        return client, path, None
    client, path = get_transport_and_path(url)
    return client, path, None


def close_client(client: GitClient, pool: urllib3.PoolManager | None) -> None:
    """Close ``client`` and every response ``pool`` gave (and so its connections)."""
    try:
        client.close()
    finally:
        if pool is not None:
            responses: list[urllib3.BaseHTTPResponse] = getattr(pool, "responses", [])
            for response in responses:
                with contextlib.suppress(Exception):
                    response.close()
            responses.clear()
            pool.clear()


def is_timeout(exc: BaseException) -> bool:
    """Whether a fetch failed because the remote did not answer in time."""
    cause = exc.__cause__
    if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
        return _timed_out(cause.reason)
    return _timed_out(exc) or (cause is not None and _timed_out(cause))


def _timed_out(exc: BaseException) -> bool:
    # urllib3's NewConnectionError (refused, unreachable…) derives from ConnectTimeoutError
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return False
    return isinstance(exc, TimeoutError | urllib3.exceptions.TimeoutError)


class _RemembersResponses:
    """Remembers the responses a urllib3 pool gave, for :func:`close_client`.

    dulwich's smart HTTP client leaves the response to ``info/refs`` open when it
    goes on with protocol v2, so its connection is neither pooled nor closed.
    """

    responses: list[urllib3.BaseHTTPResponse]

    def urlopen(self, method: str, url: str, *args: Any, **kw: Any) -> urllib3.BaseHTTPResponse:
        response: urllib3.BaseHTTPResponse = super().urlopen(method, url, *args, **kw)  # type: ignore[misc]
        self.responses.append(response)
        return response


class _ClosingPoolManager(_RemembersResponses, urllib3.PoolManager):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses = []


class _ClosingProxyManager(_RemembersResponses, urllib3.ProxyManager):
    """:class:`_ClosingPoolManager` through an HTTP(S) proxy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses = []
