"""How the git source reaches a remote: its credentials, one dulwich client per fetch with
every wait on it bounded, and what a failed fetch means.

:class:`Remote` is one remote as a source reaches it.  Credentials never appear in
logs, errors or descriptions (:meth:`Remote.scrub`):

* HTTP(S): basic credentials from the URL's userinfo
  (``https://USER:TOKEN@host/repo.git``) or, when the URL has none, from
  ``CRONSTABLE_GIT_USERNAME`` with ``CRONSTABLE_GIT_PASSWORD`` or
  ``CRONSTABLE_GIT_PASSWORD_FILE`` (a file holding the password or token, read
  at every fetch so it can be rotated; surrounding whitespace is stripped).
* SSH (``ssh://[USER@]HOST[:PORT]/PATH``): dulwich runs the ``ssh`` program, so
  keys, ``known_hosts`` and ``~/.ssh/config`` apply as for ``git``.  The command
  is ``$GIT_SSH_COMMAND`` (else ``$GIT_SSH``) when set, for example
  ``GIT_SSH_COMMAND="ssh -i /etc/cronstable/deploy_key -o IdentitiesOnly=yes"``
  for a deploy key; otherwise :data:`DEFAULT_SSH_COMMAND`, which never prompts
  (``BatchMode``), so an unknown host key or a missing key is an error in the
  log rather than a hung fetch.  Passwords in ssh URLs are not supported.
* ``git://`` and ``file://`` take no credentials.

Every wait is bounded:

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
the quick retry a dropped connection gets (:func:`is_transient`);
:meth:`Remote.failure` says what went wrong in words.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

import urllib3
from dulwich.client import (
    GitClient,
    HTTPUnauthorized,
    TCPGitClient,
    default_urllib3_manager,
    get_transport_and_path,
)
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.protocol import (
    DEFAULT_GIT_PROTOCOL_VERSION_FETCH,
    DEFAULT_GIT_PROTOCOL_VERSION_SEND,
    Protocol,
)
from dulwich.repo import Repo

from cronstable.redact import redact, without_userinfo
from cronstable.sources.base import SourceError

ENV_USERNAME = "CRONSTABLE_GIT_USERNAME"
ENV_PASSWORD = "CRONSTABLE_GIT_PASSWORD"
ENV_PASSWORD_FILE = "CRONSTABLE_GIT_PASSWORD_FILE"
DEFAULT_SSH_COMMAND = (
    "ssh -o BatchMode=yes -o ConnectTimeout=30 -o ServerAliveInterval=15 -o ServerAliveCountMax=4"
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


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True, slots=True)
class HttpCredentials:
    username: str | None
    password: str | None
    password_file: Path | None

    @property
    def configured(self) -> bool:
        return self.username is not None

    def resolve(self) -> tuple[str | None, str | None]:
        if self.password_file is None:
            return self.username, self.password
        try:
            password = self.password_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError(
                f"cannot read {ENV_PASSWORD_FILE} {str(self.password_file)!r}: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from exc
        return self.username, password


def http_credentials(url: str) -> HttpCredentials:
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return HttpCredentials(
            unquote(parts.username or ""),
            unquote(parts.password) if parts.password is not None else None,
            None,
        )
    username = os.environ.get(ENV_USERNAME) or None
    password = os.environ.get(ENV_PASSWORD) or None
    password_file = os.environ.get(ENV_PASSWORD_FILE) or None
    if password is not None and password_file is not None:
        raise SourceError(f"set {ENV_PASSWORD} or {ENV_PASSWORD_FILE}, not both")
    if (password is not None or password_file is not None) and username is None:
        raise SourceError(f"{ENV_USERNAME} must be set with {ENV_PASSWORD}/{ENV_PASSWORD_FILE}")
    return HttpCredentials(username, password, Path(password_file) if password_file else None)


# --------------------------------------------------------------------------- the remote


class Remote:
    """One remote as a source reaches it: its URL, credentials and timeout, and every
    secret learned about it (see the module documentation).

    ``description`` names the source in the one error raised here (a password in an
    ssh URL); a bad credentials setting raises :class:`SourceError` as well.
    """

    def __init__(self, url: str, *, timeout: float, description: str) -> None:
        parts = urlsplit(url)
        self.url = url
        self.scheme = parts.scheme
        self.safe_url = without_userinfo(url)
        """The URL without its userinfo: what logs, errors and the cache key show."""
        self.timeout = timeout
        self.secrets: set[str] = set()
        """The credentials known (the URL's, the password file's as last read)."""
        self.http: HttpCredentials | None = None
        self.ssh_command: str | None = None
        self._transport_url = url
        if self.scheme in ("http", "https"):
            self.http = http_credentials(url)
            self._transport_url = self.safe_url
            if self.http.password:
                self.secrets.add(self.http.password)
        elif self.scheme == "ssh":
            if parts.password is not None:
                raise SourceError(f"{description}: passwords in ssh URLs are not supported")
            self.ssh_command = (
                os.environ.get("GIT_SSH_COMMAND")
                or os.environ.get("GIT_SSH")
                or DEFAULT_SSH_COMMAND
            )
        if parts.password:
            self.secrets |= {parts.password, unquote(parts.password)}
        elif parts.username and self.http is not None:
            # https://TOKEN@host/…: the user name is the secret
            self.secrets |= {parts.username, unquote(parts.username)}

    @property
    def credentials_in_clear(self) -> bool:
        """Credentials go over unencrypted ``http://``."""
        return self.http is not None and self.http.configured and self.scheme == "http"

    def scrub(self, text: str) -> str:
        """``text`` without any credential of this remote, then :func:`redact`-ed."""
        text = text.replace(self.url, self.safe_url)
        return redact(text, [secret for secret in self.secrets if len(secret) >= 4])

    def fetch_once(self, repo: Repo, determine_wants: Any) -> Any:
        """One fetch into ``repo`` on a new client, closed after it (dulwich's result)."""
        username = password = None
        if self.http is not None:
            username, password = self.http.resolve()
            if password:
                self.secrets.add(password)
        try:
            client, path, pool = open_client(
                self._transport_url,
                timeout=self.timeout,
                username=username,
                password=password,
                ssh_command=self.ssh_command,
            )
        except ValueError as exc:
            raise SourceError(f"unsupported git URL {self.safe_url}: {exc}") from exc
        try:
            return client.fetch(path, repo, determine_wants=determine_wants)
        finally:
            close_client(client, pool)

    def failure(self, exc: Exception) -> str:
        """Why a fetch failed, in words naming the remote (not yet scrubbed)."""
        where = self.safe_url
        if is_timeout(exc):
            return f"cannot fetch {where}: no answer within {self.timeout:g} s (timeout)"
        if isinstance(exc, HTTPUnauthorized):
            if self.http is not None and self.http.configured:
                return f"{where} rejected the credentials (HTTP 401)"
            return (
                f"{where} requires credentials (HTTP 401): set {ENV_USERNAME} and "
                f"{ENV_PASSWORD} or {ENV_PASSWORD_FILE}"
            )
        if isinstance(exc, HangupException):
            detail = b" ".join(exc.stderr_lines or ()).decode("utf-8", "replace").strip()
            return f"{where} hung up{': ' + detail if detail else ''}"
        if isinstance(exc, NotGitRepository):
            return f"{where} is not a git repository"
        if isinstance(exc, OSError):
            return f"cannot fetch {where}: {exc.strerror or exc}"
        cause = exc.__cause__
        if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
            return f"cannot fetch {where}: {cause.reason}"
        if isinstance(exc, GitProtocolError):
            return f"cannot fetch {where}: {exc}"
        return f"cannot fetch {where}: {type(exc).__name__}: {exc}"


def is_transient(exc: BaseException) -> bool:
    """A failure worth a quick retry: the connection, not the remote's answer."""
    if isinstance(exc, HTTPUnauthorized | NotGitRepository | SourceError) or is_timeout(exc):
        return False  # a remote that does not answer in time is not retried at once
    if isinstance(exc, OSError | HangupException):
        return True
    return isinstance(exc.__cause__, urllib3.exceptions.MaxRetryError)
