"""The ``Host`` and ``Origin`` rules: what stops DNS rebinding and cross-origin pages.

* ``Host``: a daemon with no token configured trusts its local peers, so a page a
  local browser loads from ``attacker.test`` must not reach it by having that name
  resolve to 127.0.0.1.  Such a daemon answers only requests for a loopback name or
  address (``localhost``, ``*.localhost``, 127.0.0.0/8, ``::1``), for a listen
  URL's host, for the address the connection came in on, or for a name in
  ``web.allowedHosts``; on a unix socket any ``Host`` is fine (no browser gets there).
* ``Origin``: a browser names the page that makes a request; one from a page that
  is not this daemon's own (``scheme://host:port`` of the request, or a name in
  ``web.allowedHosts``) is refused, with or without tokens.  A request without
  ``Origin`` (curl, the CLI, Prometheus, GitHub) is not a cross-origin one.

Nothing here quotes the request back: the answers say what to configure.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}

HOST_REFUSED = (
    "this daemon has no API token configured, so it answers only requests addressed to "
    "localhost, a loopback address or its listen address; to reach it by this name, add the "
    "name to web.allowedHosts, or configure a token (web.authToken or web.authTokens)"
)
ORIGIN_REFUSED = (
    "a page from another origin may not call this API; open the dashboard at the daemon's own "
    "address, or add the name the page is served under (a reverse proxy's) to web.allowedHosts"
)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def split_host(header: str) -> tuple[str, int | None] | None:
    """(host in lower case without brackets or a final dot, port or None); None if malformed."""
    text = header.strip().lower()
    port_text = ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")) or _address(host) is None:
            return None
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        if not port_text:
            return None
    else:
        host = text
    if port_text and not (port_text.isdigit() and len(port_text) <= 5):
        return None
    host = host.rstrip(".")
    if not host or any(ch in host for ch in " /\\@?#\t"):
        return None
    return host, int(port_text) if port_text else None


def is_loopback(host: str) -> bool:
    """``localhost``, a name under ``.localhost``, or a loopback address."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    address = _address(host)
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _same_address(host: str, local: str) -> bool:
    one, other = _address(host), _address(local)
    return one is not None and one == other


def host_allowed(
    header: str | None,
    transport: Any,
    listen_hosts: frozenset[str],
    allowed_hosts: frozenset[str],
) -> bool:
    """Whether a daemon without tokens answers a request with this ``Host`` header."""
    if transport is None:
        return False
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == getattr(socket, "AF_UNIX", None):
        return True
    if header is None:
        return True  # HTTP/1.0 without Host: not a browser, so not a rebound page
    parts = split_host(header)
    if parts is None:
        return False
    host = parts[0]
    if is_loopback(host) or host in listen_hosts or host in allowed_hosts:
        return True
    local = transport.get_extra_info("sockname")
    return isinstance(local, tuple) and bool(local) and _same_address(host, str(local[0]))


def origin_allowed(
    origin: str | None, scheme: str, host_header: str | None, allowed_hosts: frozenset[str]
) -> bool:
    """Whether a request's ``Origin`` is the page's own (or absent, or an allowed host's)."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip().lower())
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path:
        return False
    name = parts.hostname.rstrip(".")
    if name in allowed_hosts:
        return True
    own = split_host(host_header) if host_header is not None else None
    if own is None:
        return False
    return (parts.scheme, name, origin_port or DEFAULT_PORTS[parts.scheme]) == (
        scheme,
        own[0],
        own[1] or DEFAULT_PORTS.get(scheme, 0),
    )
