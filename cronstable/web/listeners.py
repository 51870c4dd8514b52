"""Listen addresses: parsing, binding sockets, TLS contexts.

Sockets are bound while a revision is prepared, so a port in use or an
unreadable certificate rejects the revision before anything changes.  An
address is identified by where it binds (host and port, or socket path), so
``http://h:1`` and ``https://h:1`` share one bound socket across revisions.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import stat
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from cronstable.config.models import TlsFiles
from cronstable.platform import ensure_socket_dir, expand_runtime_dir

BACKLOG = 128
CONNECT_PROBE_TIMEOUT = 1.0
"""Seconds to wait when checking whether a leftover unix socket is still served."""


@dataclass(frozen=True, slots=True)
class Address:
    scheme: Literal["http", "https", "unix"]
    host: str
    """Host for TCP, socket path for unix."""
    port: int

    @property
    def key(self) -> tuple[str, str, int]:
        """Where it binds: the same for http:// and https:// on one host and port."""
        return ("unix" if self.scheme == "unix" else "tcp", self.host, self.port)


def parse_listen(url: str) -> Address:
    """A validated listen URL (see :class:`~cronstable.config.models.WebConfig`).

    A unix path starting with ``${XDG_RUNTIME_DIR}`` is expanded here, on the
    node (the configuration stays the same text on every node)."""
    if url.startswith("unix://"):
        return Address("unix", expand_runtime_dir(url[len("unix://") :]), 0)
    parts = urlsplit(url)
    scheme: Literal["http", "https"] = "https" if parts.scheme == "https" else "http"
    return Address(scheme, parts.hostname or "", parts.port or 0)


class BindError(Exception):
    """An address cannot be bound; the message says why."""


def bind(address: Address) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``address`` (blocking: run in a thread)."""
    if address.scheme == "unix":
        return [_bind_unix(address.host)]
    try:
        infos = socket.getaddrinfo(
            address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise BindError(f"cannot resolve {address.host!r}: {exc.strerror}") from exc
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, sockaddr in infos:
            if (family, sockaddr) in seen:
                continue
            seen.add((family, sockaddr))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                raise BindError(
                    f"cannot bind {address.host} port {address.port}: {exc.strerror}"
                ) from exc
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind_unix(path: str) -> socket.socket:
    try:
        ensure_socket_dir(path)
    except OSError as exc:
        raise BindError(f"cannot use {path}: {exc.strerror or exc}") from exc
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise BindError(f"cannot use {path}: {exc.strerror}") from exc
    else:
        if not stat.S_ISSOCK(mode):
            raise BindError(f"{path} exists and is not a socket")
        if _served(path):
            raise BindError(f"{path} is in use by another process")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left behind by a daemon that died
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot bind {path}: {exc.strerror}") from exc
    return sock


def _served(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(CONNECT_PROBE_TIMEOUT)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def unlink_socket(path: str) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


def server_context(tls: TlsFiles) -> ssl.SSLContext:
    """A server TLS context from the cert and key files (blocking: run in a thread).

    Raises OSError or ssl.SSLError for missing, unreadable or mismatched files.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert, tls.key)
    return context


def bound_url(address: Address, sock: socket.socket) -> str:
    """The URL a bound socket answers on (the real port when the config said 0)."""
    if address.scheme == "unix":
        return f"unix://{address.host}"
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{address.scheme}://{shown}:{port}"
