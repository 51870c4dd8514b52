"""A small asyncio client for etcd's v3 API, over its JSON gateway.

cronstable talks to etcd in one place: here.  The configuration source
(:mod:`cronstable.sources.etcd`) reads and watches a key prefix with it; durable
state and leadership build on its transactions and leases.

Why the JSON gateway: every etcd since 3.3 serves the v3 API as JSON over plain
HTTP on its client port (``POST /v3/kv/range`` …), so aiohttp — already a
dependency — is all it takes; no gRPC stack, no generated code.

The gateway's conventions, which this module hides:

* keys and values are base64 in JSON; here they are :class:`bytes` (a
  :class:`str` key is encoded as UTF-8);
* int64 fields are JSON strings; here they are :class:`int`;
* fields at their default value are left out (no ``count`` means 0, no
  ``kvs`` means none, no ``type`` on an event means PUT);
* an error is a JSON object with a gRPC status code (``{"error": "...",
  "code": 11}``, or ``{"error": {"grpc_code": 14, ...}}`` inside a stream).

Errors are translated at this edge, chained with ``from``::

    EtcdError              any failure talking to etcd (bad request, auth, …); ``code``
    ├── EtcdUnavailable    etcd cannot be reached or cannot serve now: worth retrying
    ├── EtcdCompacted      the revision asked for was compacted away
    └── EtcdLeaseNotFound  the lease expired or never existed

:func:`etcd_fault` sorts a failure into *unreachable* (an outage to ride out) or
*refused* (etcd, or its TLS, will not have what was asked: a configuration to fix);
it is the one place that draws that line for etcd.

Nothing here logs or puts in an exception message a value or a credential;
keys do appear (they name things, they do not hold secrets).

Usage::

    async with EtcdClient("http://127.0.0.1:2379") as etcd:
        revision = await etcd.put("/cron/a.yaml", b"jobs: []\\n")
        result = await etcd.range("/cron/", prefix=True)
        created = await etcd.txn(
            [compare("/lock", "version", "==", 0)],
            [request_put("/lock", b"me", lease=lease_id)],
        )
        async for event in etcd.watch("/cron/", prefix=True, start_revision=result.revision + 1):
            ...
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import enum
import json
import logging
import os
import random
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import parse_qs, urlsplit

import aiohttp

from cronstable.errors import CronstableError

logger = logging.getLogger(__name__)

JSON: TypeAlias = dict[str, Any]
"""One JSON object, as the gateway takes and gives it."""
Key: TypeAlias = str | bytes
"""A key: bytes, or text encoded as UTF-8."""

# gRPC status codes etcd answers with (google.golang.org/grpc/codes).
GRPC_CANCELLED = 1
"""A stopping etcd ends a watch stream with it as often as with UNAVAILABLE (the gateway's
context canceled before its transport closed): an outage, not a refusal."""
GRPC_DEADLINE_EXCEEDED = 4
GRPC_NOT_FOUND = 5
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_OUT_OF_RANGE = 11
GRPC_UNAVAILABLE = 14
GRPC_UNAUTHENTICATED = 16
_RETRYABLE_CODES = frozenset(
    {GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED, GRPC_RESOURCE_EXHAUSTED, GRPC_UNAVAILABLE}
)


def _retryable_status(status: int | None) -> bool:
    """An HTTP answer without a gRPC code that says etcd (or a proxy before it) cannot
    serve now: any 5xx."""
    return status is not None and 500 <= status < 600


DEFAULT_TIMEOUT = 5.0
DEFAULT_BACKOFF_INITIAL = 0.1
DEFAULT_BACKOFF_MAX = 5.0
DEFAULT_WATCH_PROBE = 15.0
"""Seconds between two liveness reads beside a watch (see :meth:`EtcdClient.watch`)."""

ENV_USERNAME = "CRONSTABLE_ETCD_USERNAME"
ENV_PASSWORD = "CRONSTABLE_ETCD_PASSWORD"
ENV_PASSWORD_FILE = "CRONSTABLE_ETCD_PASSWORD_FILE"
LOGIN_HINT = (
    f"give cronstable an etcd login in its environment: {ENV_USERNAME} with "
    f"{ENV_PASSWORD} or {ENV_PASSWORD_FILE}"
)
"""Where an etcd login comes from (every user of this client: sources, state, cluster)."""


class EtcdError(CronstableError):
    """A request to etcd failed.

    ``code`` is etcd's gRPC status code when it gave one (3 invalid argument,
    9 failed precondition, 16 unauthenticated, …), else ``None``.
    """

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """etcd could not be reached, timed out, or said it cannot serve now (no leader, …).

    Transient by nature: retry with back-off.
    """


class EtcdCompacted(EtcdError):
    """A read or a watch asked for a revision that etcd has compacted away.

    ``compact_revision`` is the oldest revision still available when etcd said
    so (a watch does; a range does not, and leaves it ``None``).  Re-read the
    current state with a range, then watch from its revision + 1.
    """

    def __init__(self, compact_revision: int | None, message: str | None = None) -> None:
        if message is None:
            message = (
                f"etcd has compacted its history up to revision {compact_revision}"
                if compact_revision is not None
                else "etcd has compacted the revision asked for"
            )
        super().__init__(message, code=GRPC_OUT_OF_RANGE)
        self.compact_revision = compact_revision


class EtcdLeaseNotFound(EtcdError):
    """The lease has expired (or was revoked, or never existed)."""


# --------------------------------------------------------------------------- endpoints


@dataclass(frozen=True, slots=True)
class EtcdTLS:
    """How to talk TLS to etcd (``https://``): the CA bundle that signs its certificate
    (default: the system's), and a client certificate and key when etcd asks for one
    (``--client-cert-auth``).  Paths to PEM files."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """A verifying client context; :class:`EtcdError` naming the file that is wrong."""
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise EtcdError(f"etcd TLS: cannot use ca={self.ca}: {_os_reason(exc)}") from exc
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                files = self.cert if self.key is None else f"{self.cert} and key={self.key}"
                raise EtcdError(f"etcd TLS: cannot use cert={files}: {_os_reason(exc)}") from exc
        return context


class TlsFiles(Protocol):
    """Where a configuration names etcd's TLS files (the cluster section's ``etcd``)."""

    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...


def etcd_tls(files: TlsFiles | None) -> EtcdTLS | None:
    """The TLS files of a configured etcd (the cluster's, also the state store's and the
    slots'); None when it names none."""
    if files is None or (files.ca_file is None and files.cert_file is None):
        return None
    return EtcdTLS(ca=files.ca_file, cert=files.cert_file, key=files.key_file)


@dataclass(frozen=True, slots=True)
class EtcdURL:
    """``etcd://HOST:PORT/PATH`` or ``etcds://HOST:PORT/PATH?ca=&cert=&key=``, parsed."""

    endpoint: str
    """``http://HOST:PORT`` or ``https://HOST:PORT``: what :class:`EtcdClient` takes."""
    path: str
    tls: EtcdTLS | None
    """Set for ``etcds://``."""
    options: Mapping[str, str]
    """The query's other options, for the caller to judge."""


ETCD_SCHEMES = ("etcd", "etcds")
TLS_OPTIONS = ("ca", "cert", "key")


def parse_etcd_url(url: str) -> EtcdURL:
    """Parse an etcd URL; :class:`ValueError` saying what is wrong (never echoing a password).

    ``etcds://`` is TLS, with ``ca=`` (a CA bundle; default the system's), ``cert=``
    and ``key=`` (a client certificate and its key).  A login in the URL
    (``etcd://USER:PASSWORD@…``) is refused: it belongs in the environment
    (:data:`LOGIN_HINT`), where it is neither logged nor shown in ``ps``.
    """
    parts = urlsplit(url)
    if parts.scheme not in ETCD_SCHEMES:
        raise ValueError("an etcd URL starts with etcd:// or etcds:// (TLS)")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"an etcd URL takes no login (USER:PASSWORD@); {LOGIN_HINT}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"bad etcd address {parts.netloc!r}: {exc}") from None
    if not host or port is None:
        raise ValueError("an etcd URL names HOST:PORT")
    query = parse_qs(parts.query, keep_blank_values=True)
    options: dict[str, str] = {}
    for name, values in query.items():
        if len(values) > 1:
            raise ValueError(f"etcd option {name!r} given twice")
        options[name] = values[0]
    tls: EtcdTLS | None = None
    given = {name: options.pop(name) for name in TLS_OPTIONS if name in options}
    if any(not value for value in given.values()):
        raise ValueError(f"etcd option(s) {', '.join(n for n, v in given.items() if not v)} empty")
    if parts.scheme == "etcds":
        tls = EtcdTLS(ca=given.get("ca"), cert=given.get("cert"), key=given.get("key"))
        if tls.key is not None and tls.cert is None:
            raise ValueError("etcd option key= needs cert= (the client certificate)")
    elif given:
        raise ValueError(
            f"etcd option(s) {', '.join(sorted(given))} are for TLS: use etcds://{parts.netloc}"
        )
    address = f"[{host}]" if ":" in host else host
    scheme = "https" if tls is not None else "http"
    return EtcdURL(
        endpoint=f"{scheme}://{address}:{port}", path=parts.path, tls=tls, options=options
    )


def show_key(key: Key) -> str:
    """A key as text for messages (``/cron/a.yaml``; bytes that are not UTF-8 escaped)."""
    return key_bytes(key).decode("utf-8", "backslashreplace")


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- data


def login_from_environment() -> tuple[str | None, str | None]:
    """etcd's (username, password) from the daemon's environment (:data:`LOGIN_HINT`);
    (None, None) without one.  :class:`EtcdError` when it is incomplete or unreadable;
    the password is never in a message."""
    username = os.environ.get(ENV_USERNAME) or None
    password = os.environ.get(ENV_PASSWORD) or None
    password_file = os.environ.get(ENV_PASSWORD_FILE) or None
    if password is not None and password_file is not None:
        raise EtcdError(f"set {ENV_PASSWORD} or {ENV_PASSWORD_FILE}, not both")
    if password_file is not None:
        try:
            with open(password_file, encoding="utf-8") as file:
                password = file.read().strip()
        except OSError as exc:
            raise EtcdError(f"cannot read {ENV_PASSWORD_FILE}: {exc.strerror or exc}") from exc
    if (username is None) != (password is None):
        raise EtcdError(
            f"etcd authentication needs both {ENV_USERNAME} and {ENV_PASSWORD} "
            f"(or {ENV_PASSWORD_FILE})"
        )
    return username, password


class EventType(enum.Enum):
    """What a watch event did to its key."""

    PUT = "PUT"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd stores it.

    In a DELETE watch event only ``key`` and ``mod_revision`` (the revision of
    the deletion) are set; the rest are 0 and ``value`` is empty.
    """

    key: bytes
    value: bytes
    create_revision: int
    """Revision of the put that created the key (since its last deletion)."""
    mod_revision: int
    """Revision of the last put (or, in a DELETE event, of the deletion)."""
    version: int
    """Puts since creation: 1 after the first."""
    lease: int
    """The lease the key is attached to; 0 for none."""

    def __repr__(self) -> str:  # never show a value
        return (
            f"KeyValue(key={self.key!r}, value=<{len(self.value)} bytes>, "
            f"create_revision={self.create_revision}, mod_revision={self.mod_revision}, "
            f"version={self.version}, lease={self.lease})"
        )


@dataclass(frozen=True, slots=True)
class RangeResult:
    """The keys of one read, all as of one revision."""

    revision: int
    """The store's revision the read was served at (the header revision)."""
    kvs: list[KeyValue]
    """The keys found, in key order."""
    count: int = 0
    """How many keys matched (more than ``len(kvs)`` when a limit cut the list)."""
    more: bool = False
    """Whether a limit left keys out."""


@dataclass(frozen=True, slots=True)
class PutResult:
    """A put inside a transaction."""

    revision: int


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """A delete: the revision after it, and how many keys it removed."""

    revision: int
    deleted: int


TxnResponse: TypeAlias = RangeResult | PutResult | DeleteResult


@dataclass(frozen=True, slots=True)
class TxnResult:
    """A transaction's outcome.

    ``responses`` has one entry per request of the branch that ran (success if
    ``succeeded``, else failure), in order; a nested transaction's answer is a
    :class:`TxnResult` too.
    """

    succeeded: bool
    revision: int
    """The store's revision after the transaction (unchanged if it wrote nothing)."""
    responses: list[TxnResponse | TxnResult]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change to one key.  All events of one transaction share a revision."""

    type: EventType
    kv: KeyValue
    revision: int
    """The revision of the change (``kv.mod_revision``)."""


# --------------------------------------------------------------------------- builders

CompareTarget: TypeAlias = Literal["version", "create_revision", "mod_revision", "value", "lease"]
CompareOp: TypeAlias = Literal["==", "!=", "<", ">"]

_TARGETS: Mapping[str, str] = {
    "version": "VERSION",
    "create_revision": "CREATE",
    "mod_revision": "MOD",
    "value": "VALUE",
    "lease": "LEASE",
}
_OPS: Mapping[str, str] = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}


def key_bytes(key: Key) -> bytes:
    """``key`` as bytes (text is encoded as UTF-8)."""
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def prefix_range_end(prefix: Key) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``.

    That is the prefix with its last byte below 0xff incremented (and what
    follows it dropped); ``b"\\0"`` (every key from ``prefix`` on) when there
    is no such byte.
    """
    end = bytearray(key_bytes(prefix))
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _range_fields(key: Key, prefix: bool) -> JSON:
    raw = key_bytes(key)
    fields: JSON = {"key": _b64(raw)}
    if prefix:
        fields["range_end"] = _b64(prefix_range_end(raw))
    return fields


def compare(key: Key, target: CompareTarget, op: CompareOp, value: int | bytes) -> JSON:
    """One condition of a transaction: ``key``'s ``target`` ``op`` ``value``.

    ``compare(k, "version", "==", 0)`` holds when ``k`` does not exist;
    ``compare(k, "mod_revision", "==", r)`` when nobody wrote ``k`` since ``r``;
    ``compare(k, "value", "==", b"…")`` compares bytes; ``"lease"`` a lease id.
    """
    if target not in _TARGETS:
        raise ValueError(f"unknown compare target {target!r}")
    if op not in _OPS:
        raise ValueError(f"unknown compare operator {op!r}")
    condition: JSON = {
        "key": _b64(key_bytes(key)),
        "target": _TARGETS[target],
        "result": _OPS[op],
    }
    if target == "value":
        if not isinstance(value, bytes):
            raise TypeError("a value comparison takes bytes")
        condition["value"] = _b64(value)
    else:
        if isinstance(value, bytes):
            raise TypeError(f"a {target} comparison takes an int")
        condition[target] = str(value)
    return condition


def first_kv(response: object) -> KeyValue | None:
    """The first key of a transaction's range answer; None when it found none (or the
    answer is not a range)."""
    if isinstance(response, RangeResult) and response.kvs:
        return response.kvs[0]
    return None


def request_range(key: Key, *, prefix: bool = False) -> JSON:
    """A read inside a transaction (answered by a :class:`RangeResult`)."""
    return {"request_range": _range_fields(key, prefix)}


def request_put(key: Key, value: bytes, *, lease: int | None = None) -> JSON:
    """A put inside a transaction, attached to ``lease`` when given."""
    put: JSON = {"key": _b64(key_bytes(key)), "value": _b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def request_delete(key: Key, *, prefix: bool = False) -> JSON:
    """A delete inside a transaction.

    etcd refuses a transaction whose delete range covers a key that another
    request of the same branch puts ("duplicate key given in txn request"):
    to replace a prefix's content in one transaction, delete the keys that go
    one by one and put the others.
    """
    return {"request_delete_range": _range_fields(key, prefix)}


# --------------------------------------------------------------------------- parsing


def _int(fields: Mapping[str, Any], name: str) -> int:
    value = fields.get(name)
    return int(value) if value is not None else 0


def _bytes(fields: Mapping[str, Any], name: str) -> bytes:
    value = fields.get(name)
    return base64.b64decode(value) if value else b""


def _header_revision(payload: Mapping[str, Any]) -> int:
    header = payload.get("header")
    return _int(header, "revision") if isinstance(header, Mapping) else 0


def _key_value(fields: Mapping[str, Any]) -> KeyValue:
    return KeyValue(
        key=_bytes(fields, "key"),
        value=_bytes(fields, "value"),
        create_revision=_int(fields, "create_revision"),
        mod_revision=_int(fields, "mod_revision"),
        version=_int(fields, "version"),
        lease=_int(fields, "lease"),
    )


def _range_result(payload: Mapping[str, Any], revision: int | None = None) -> RangeResult:
    return RangeResult(
        revision=_header_revision(payload) or (revision or 0),
        kvs=[_key_value(kv) for kv in payload.get("kvs") or ()],
        count=_int(payload, "count"),
        more=bool(payload.get("more", False)),
    )


def _txn_result(payload: Mapping[str, Any], revision: int | None = None) -> TxnResult:
    rev = _header_revision(payload) or (revision or 0)
    responses: list[TxnResponse | TxnResult] = []
    for item in payload.get("responses") or ():
        if "response_range" in item:
            responses.append(_range_result(item["response_range"], rev))
        elif "response_put" in item:
            responses.append(PutResult(revision=rev))
        elif "response_delete_range" in item:
            responses.append(
                DeleteResult(revision=rev, deleted=_int(item["response_delete_range"], "deleted"))
            )
        elif "response_txn" in item:
            responses.append(_txn_result(item["response_txn"], rev))
        else:
            raise EtcdError(f"etcd answered a transaction with an unknown response {sorted(item)}")
    return TxnResult(
        succeeded=bool(payload.get("succeeded", False)), revision=rev, responses=responses
    )


def _decode(data: bytes) -> JSON:
    """The first JSON object of ``data`` (the gateway may append trailer text to errors)."""
    text = data.decode("utf-8", "replace").lstrip()
    value, _ = json.JSONDecoder().raw_decode(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _error(payload: Mapping[str, Any], *, status: int | None, what: str) -> EtcdError:
    """The exception for an error answer (``{"error": "...", "code": N}`` or a stream's
    ``{"error": {"grpc_code": N, "message": "..."}}``)."""
    raw = payload.get("error")
    code: int | None
    if isinstance(raw, Mapping):
        code = raw.get("grpc_code")
        message = str(raw.get("message") or raw.get("http_status") or "error")
    else:
        code = payload.get("code")
        message = str(payload.get("message") or raw or "error")
    code = int(code) if code is not None else None
    text = f"etcd {what}: {message}"
    if code == GRPC_OUT_OF_RANGE and "compacted" in message:
        return EtcdCompacted(None, text)
    if code == GRPC_NOT_FOUND and "lease" in message:
        return EtcdLeaseNotFound(text, code=code)
    if code in _RETRYABLE_CODES or (code is None and _retryable_status(status)):
        return EtcdUnavailable(text, code=code)
    return EtcdError(text, code=code)


def _describe(exc: BaseException) -> str:
    """Why a connection failed, in words (aiohttp's own text says ``ssl:default`` even on
    plain HTTP)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        reason = getattr(cert_error, "verify_message", None) or _os_reason(cert_error)
        return f"TLS: etcd's certificate is not trusted ({reason}); give its CA with ca="
    if isinstance(exc, aiohttp.ClientConnectorSSLError | aiohttp.ClientSSLError):
        os_error = getattr(exc, "os_error", exc)
        return f"TLS handshake failed ({_os_reason(os_error)})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port} ({_os_reason(exc.os_error)})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "etcd closed the connection (is it TLS? then use etcds://)"
    tls_error = _ssl_error(exc)
    if tls_error is not None:
        reason = tls_error.reason or str(tls_error)
        if "CERTIFICATE" in reason.upper():  # bad / required / unknown: about ours
            return (
                f"etcd refused the TLS connection ({reason}): it wants a client certificate "
                f"from a CA it trusts (cert=, key=)"
            )
        return f"TLS failed ({reason})"
    return str(exc) or type(exc).__name__


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc``, if one is (aiohttp wraps it in a ClientOSError)."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


_TRANSPORT_TLS_ERRORS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
"""TLS errors that say the connection broke, not that a certificate or protocol was refused."""


def etcd_fault(exc: EtcdError) -> Literal["unreachable", "refused"]:
    """Whether ``exc`` means etcd is *unreachable* (no answer, a timeout, a refused or
    reset connection, a name that does not resolve, gRPC ``unavailable`` (14),
    ``deadline exceeded`` or ``resource exhausted``, an HTTP 5xx) or *refused* what was
    asked (a login or permission it does not accept, a certificate that does not verify
    or that it does not accept, any other error it answers with).  Decided by the error
    alone, never by how long it took; a wrong scheme gives no error of its own to tell
    it by (etcd closes or resets the connection), so it counts as unreachable."""
    if not isinstance(exc, EtcdUnavailable):
        return "refused"
    tls = _ssl_error(exc)
    if tls is not None and not isinstance(tls, _TRANSPORT_TLS_ERRORS):
        return "refused"
    return "unreachable"


def _needs_login(exc: EtcdError) -> bool:
    """etcd refused a request for want of (valid) authentication."""
    text = str(exc)
    return exc.code == GRPC_UNAUTHENTICATED or any(
        marker in text
        for marker in ("user name is empty", "authentication failed", "invalid auth token")
    )


# --------------------------------------------------------------------------- client


class _Connection:
    """What the clients of one endpoint share (:meth:`EtcdClient.sharing`): the TLS
    context, the aiohttp session and the login token."""

    __slots__ = ("auth_lock", "closed", "owns_session", "session", "ssl", "token")

    def __init__(
        self, context: ssl.SSLContext | None, session: aiohttp.ClientSession | None
    ) -> None:
        self.ssl = context
        self.session = session
        self.owns_session = session is None
        self.token: str | None = None
        self.auth_lock = asyncio.Lock()
        self.closed = False


class EtcdClient:
    """An asyncio client of one etcd endpoint (``http://HOST:PORT`` or ``https://…``).

    ``session``: an aiohttp session to share (left open by :meth:`close`; give
    one with an SSL context for client certificates); by default the client
    makes its own, on first use.  ``tls``: the CA and client certificate of an
    ``https://`` endpoint (:class:`EtcdTLS`; :func:`parse_etcd_url` reads them from an
    ``etcds://`` URL); without it the system's CAs are trusted.  ``timeout`` bounds
    each request, and the connection of a watch, in seconds.  ``username`` and
    ``password``: etcd authentication (:data:`LOGIN_HINT`); the client fetches a token
    (``/v3/auth/authenticate``), sends it with every request and fetches a
    new one when etcd says it expired.  ``backoff_initial``/``backoff_max``:
    the capped exponential delays of :meth:`watch` between reconnections.

    Reads are linearizable (served by the leader, never stale).  The client is
    an async context manager: ``async with EtcdClient(...) as etcd:`` closes it.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        username: str | None = None,
        password: str | None = None,
        backoff_initial: float = DEFAULT_BACKOFF_INITIAL,
        backoff_max: float = DEFAULT_BACKOFF_MAX,
        tls: EtcdTLS | None = None,
        watch_probe: float = DEFAULT_WATCH_PROBE,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"etcd endpoint {endpoint!r} is not an http:// or https:// URL")
        if (username is None) != (password is None):
            raise ValueError("etcd authentication needs both a username and a password")
        if tls is not None and not endpoint.startswith("https://"):
            raise ValueError("etcd TLS settings need an https:// endpoint")
        self.endpoint = endpoint.rstrip("/")
        # built now, so that a wrong CA or certificate file fails at once, naming it
        self._conn = _Connection(tls.ssl_context() if tls is not None else None, session)
        self._owner = True
        """Whether :meth:`close` closes the connection (False for a :meth:`sharing` one)."""
        self.timeout = timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.watch_probe = watch_probe
        self._username = username
        self._password = password
        self._closed = False
        self._streams: set[aiohttp.ClientResponse] = set()
        """The responses of running watches, closed by :meth:`close` to end them."""

    def sharing(self, *, timeout: float) -> EtcdClient:
        """A client of the same endpoint on this one's session and login token, each of
        its requests bounded by ``timeout``; closing it ends its own watches only, the
        connection stays this client's to close."""
        twin = copy.copy(self)
        twin.timeout = timeout
        twin._owner = False
        twin._closed = False
        twin._streams = set()
        return twin

    def __repr__(self) -> str:  # never the password
        user = f", username={self._username!r}" if self._username else ""
        return f"EtcdClient({self.endpoint!r}{user})"

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (on this client, or on the one it shares)."""
        return self._closed or self._conn.closed

    async def close(self) -> None:
        """Close the client (and its own session); running watches end."""
        self._closed = True
        for stream in list(self._streams):
            _drop_connection(stream)
        if not self._owner:
            return
        conn = self._conn
        conn.closed = True
        session, conn.session = conn.session, None
        if session is not None and conn.owns_session:
            await session.close()

    # ----------------------------------------------------------------- transport

    def _get_session(self) -> aiohttp.ClientSession:
        if self.closed:
            raise EtcdError("the etcd client is closed")
        conn = self._conn
        if conn.session is None:
            connector = aiohttp.TCPConnector(ssl=conn.ssl) if conn.ssl is not None else None
            conn.session = aiohttp.ClientSession(connector=connector)
        return conn.session

    async def _headers(self) -> dict[str, str]:
        """The headers of a request: the auth token, fetched first if there is none yet."""
        if self._username is None:
            return {}
        conn = self._conn
        token = conn.token
        if token is None:
            async with conn.auth_lock:
                if conn.token is None:
                    payload = await self._post(
                        "/v3/auth/authenticate",
                        {"name": self._username, "password": self._password},
                        what=f"authentication of user {self._username!r}",
                        headers={},
                    )
                    if not payload.get("token"):
                        raise EtcdError("etcd authentication returned no token")
                    conn.token = str(payload["token"])
                token = conn.token
        return {"Authorization": token}

    async def _post(self, path: str, body: JSON, *, what: str, headers: dict[str, str]) -> JSON:
        """One request/answer exchange; raises the translated error."""
        session = self._get_session()
        try:
            async with session.post(
                self.endpoint + path,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as response:
                status = response.status
                data = await response.read()
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            raise EtcdUnavailable(f"etcd {what}: {self.endpoint}: {_describe(exc)}") from exc
        except aiohttp.ClientError as exc:
            raise EtcdError(f"etcd {what}: {self.endpoint}: {_describe(exc)}") from exc
        try:
            payload = _decode(data)
        except ValueError as exc:
            cls = EtcdUnavailable if _retryable_status(status) else EtcdError
            raise cls(f"etcd {what}: HTTP {status} with no JSON answer") from exc
        if status != 200 or "error" in payload:
            raise _error(payload, status=status, what=what)
        return payload

    async def _call(self, path: str, body: JSON, *, what: str) -> JSON:
        """:meth:`_post` with the auth token, fetching a new one once if it expired."""
        for attempt in range(2):
            try:
                headers = await self._headers()
                return await self._post(path, body, what=what, headers=headers)
            except EtcdError as exc:
                if exc.code == GRPC_UNAUTHENTICATED and self._username and attempt == 0:
                    self._conn.token = None
                    continue
                raise self._with_login_hint(exc) from exc.__cause__
        raise AssertionError("unreachable")  # pragma: no cover

    def _with_login_hint(self, exc: EtcdError) -> EtcdError:
        """``exc``, saying where a login comes from when etcd wants one."""
        if not _needs_login(exc):
            return exc
        if self._username is None:
            hint = f"etcd requires a login: {LOGIN_HINT}"
        else:
            hint = f"check the login {ENV_USERNAME}={self._username} and its password"
        hinted = type(exc)(f"{exc}; {hint}", code=exc.code)
        return hinted

    # ----------------------------------------------------------------- key-value

    async def range(
        self,
        key: Key,
        *,
        prefix: bool = False,
        revision: int | None = None,
        keys_only: bool = False,
        limit: int = 0,
    ) -> RangeResult:
        """Read ``key`` (or every key starting with it, if ``prefix``) at one revision.

        ``revision``: read the store as it was then (:class:`EtcdCompacted` if
        that was compacted away, :class:`EtcdError` if it is in the future);
        the latest by default.  ``keys_only`` leaves values out; ``limit``
        caps the number of keys (0: no cap).
        """
        body = _range_fields(key, prefix)
        if revision is not None:
            if revision <= 0:
                raise ValueError("a revision is a positive integer")
            body["revision"] = str(revision)
        if keys_only:
            body["keys_only"] = True
        if limit:
            body["limit"] = str(limit)
        payload = await self._call("/v3/kv/range", body, what=f"range {show_key(key)}")
        return _range_result(payload)

    async def put(self, key: Key, value: bytes, *, lease: int | None = None) -> int:
        """Set ``key`` to ``value`` (attached to ``lease`` when given); the new revision."""
        body: JSON = {"key": _b64(key_bytes(key)), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        payload = await self._call("/v3/kv/put", body, what=f"put {show_key(key)}")
        return _header_revision(payload)

    async def delete(self, key: Key, *, prefix: bool = False) -> DeleteResult:
        """Delete ``key`` (or every key starting with it, if ``prefix``)."""
        payload = await self._call(
            "/v3/kv/deleterange", _range_fields(key, prefix), what=f"delete {show_key(key)}"
        )
        return DeleteResult(revision=_header_revision(payload), deleted=_int(payload, "deleted"))

    async def txn(
        self,
        compare: Sequence[JSON],
        success: Sequence[JSON] = (),
        failure: Sequence[JSON] = (),
    ) -> TxnResult:
        """If every condition of ``compare`` holds, run ``success``, else ``failure``: atomically,
        at one new revision.

        Build the lists with :func:`compare`, :func:`request_put`,
        :func:`request_delete`, :func:`request_range`.
        """
        body: JSON = {"compare": list(compare), "success": list(success), "failure": list(failure)}
        payload = await self._call("/v3/kv/txn", body, what="txn")
        return _txn_result(payload)

    async def compact(self, revision: int, *, physical: bool = False) -> None:
        """Drop the history before ``revision`` (``physical``: wait until it is freed)."""
        body: JSON = {"revision": str(revision), "physical": physical}
        await self._call("/v3/kv/compaction", body, what=f"compact to {revision}")

    # ----------------------------------------------------------------- leases

    async def lease_grant(self, ttl: int, *, lease_id: int = 0) -> tuple[int, int]:
        """A new lease of ``ttl`` seconds: ``(lease id, granted ttl)``.

        etcd may grant more than asked (it has a minimum TTL).  ``lease_id``
        asks for that id (0: etcd chooses).
        """
        body: JSON = {"TTL": str(ttl)}
        if lease_id:
            body["ID"] = str(lease_id)
        payload = await self._call("/v3/lease/grant", body, what="lease grant")
        return _int(payload, "ID"), _int(payload, "TTL")

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease once; its TTL from now, in seconds.

        Raises :class:`EtcdLeaseNotFound` when the lease has already expired.
        Call it well within the TTL (a third of it is customary).
        """
        body: JSON = {"ID": str(lease_id)}
        payload = await self._call("/v3/lease/keepalive", body, what=f"lease keepalive {lease_id}")
        result = payload.get("result", payload)
        if not isinstance(result, Mapping):
            raise EtcdError("etcd answered a lease keepalive with no result")
        ttl = _int(result, "TTL")
        if ttl <= 0:
            raise EtcdLeaseNotFound(f"etcd lease {lease_id} has expired", code=GRPC_NOT_FOUND)
        return ttl

    async def lease_time_to_live(self, lease_id: int) -> int | None:
        """The lease's remaining time to live, in whole seconds (rounded down); ``None``
        when etcd knows no such lease (it expired, was revoked, or never existed).

        A read: it renews nothing.  After an etcd restart etcd starts every surviving
        lease's time again from its full granted TTL.
        """
        body: JSON = {"ID": str(lease_id)}
        try:
            payload = await self._call(
                "/v3/lease/timetolive", body, what=f"lease time-to-live {lease_id}"
            )
        except EtcdLeaseNotFound:  # etcd 3.4 answers TTL -1 instead; either means gone
            return None
        ttl = _int(payload, "TTL")
        return None if ttl < 0 else ttl

    async def lease_revoke(self, lease_id: int) -> None:
        """End the lease now, deleting its keys.  An expired or unknown lease is no error."""
        try:
            await self._call(
                "/v3/lease/revoke", {"ID": str(lease_id)}, what=f"lease revoke {lease_id}"
            )
        except EtcdLeaseNotFound:
            pass

    # ----------------------------------------------------------------- watch

    async def _probe(self, key: Key, stream: aiohttp.ClientResponse) -> EtcdUnavailable | None:
        """Read ``key`` every :attr:`watch_probe` seconds beside a watch ``stream``; when
        a read cannot reach etcd, end the stream (the watch reconnects) and say why."""
        while True:
            await asyncio.sleep(self.watch_probe)
            try:
                await self.range(key, keys_only=True, limit=1)
            except EtcdUnavailable as exc:
                _drop_connection(stream)
                return EtcdUnavailable(f"{exc} (beside a silent watch)")
            except EtcdError:
                continue  # etcd answers: the stream's own messages will say what is wrong

    def _backoff(self, failures: int) -> float:
        delay = min(self.backoff_max, self.backoff_initial * 2.0 ** max(0, failures - 1))
        return delay * random.uniform(0.5, 1.0)

    async def watch(
        self,
        key: Key,
        *,
        prefix: bool = False,
        start_revision: int,
        on_status: Callable[[EtcdUnavailable | None], None] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Every change to ``key`` (or the keys starting with it) from ``start_revision`` on.

        Events come in revision order, those of one transaction together.  Pass
        the revision of a read + 1 to see every change after it.

        When the stream breaks (etcd stopped, network down, no leader), the
        watch reconnects by itself with capped exponential back-off and resumes
        after the last revision it delivered, so no event is lost or repeated.
        A stream can also go silent without breaking (etcd frozen, a network
        path that drops packets): every ``watch_probe`` seconds a small read of
        ``key`` goes beside it, and one that fails to reach etcd in time counts
        as a break.
        ``on_status`` is told of it: called with the :class:`EtcdUnavailable`
        once when the stream breaks and with ``None`` once a new stream is up.

        Raises :class:`EtcdCompacted` when the revision to start (or resume)
        from has been compacted away: re-read with :meth:`range` and watch
        again from its revision + 1.  Raises :class:`EtcdError` when etcd
        refuses the watch for good (bad request, permission).  Ends when the
        client is closed.
        """
        what = f"watch {show_key(key)}"
        next_revision = start_revision
        failures = 0
        reauthenticated = False
        outage: EtcdUnavailable | None = None
        probe: asyncio.Task[EtcdUnavailable | None] | None = None
        while not self.closed:
            probe = None
            create: JSON = _range_fields(key, prefix)
            create["start_revision"] = str(next_revision)
            try:
                headers = await self._headers()
                session = self._get_session()
                async with session.post(
                    self.endpoint + "/v3/watch",
                    json={"create_request": create},
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(
                        total=None, sock_connect=self.timeout, sock_read=None
                    ),
                ) as response:
                    if response.status != 200:
                        data = await response.read()
                        try:
                            payload = _decode(data)
                        except ValueError:
                            payload = {"error": f"HTTP {response.status}"}
                        raise _error(payload, status=response.status, what=what)
                    self._streams.add(response)
                    probe = asyncio.create_task(self._probe(key, response))
                    try:
                        async with contextlib.aclosing(_stream_messages(response)) as messages:
                            async for message in messages:
                                created, events = _watch_message(message, what, next_revision)
                                if created:
                                    failures = 0
                                    reauthenticated = False
                                    if outage is not None:
                                        outage = None
                                        logger.debug("etcd %s: stream re-established", what)
                                        if on_status is not None:
                                            on_status(None)
                                for event in events:
                                    yield event
                                    next_revision = max(next_revision, event.revision + 1)
                    finally:
                        probe.cancel()
                        self._streams.discard(response)
                        _drop_connection(response)
                raise _silenced(probe) or EtcdUnavailable(f"etcd {what}: the stream ended")
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if self.closed:
                    return
                error = _silenced(probe) or EtcdUnavailable(
                    f"etcd {what}: {self.endpoint}: {_describe(exc)}"
                )
                error.__cause__ = exc
            except EtcdUnavailable as exc:
                error = exc
            except EtcdError as exc:
                if self.closed:
                    return
                if exc.code == GRPC_UNAUTHENTICATED and self._username and not reauthenticated:
                    self._conn.token = None  # expired token: fetch a new one and go again at once
                    reauthenticated = True
                    continue
                hinted = self._with_login_hint(exc)
                if hinted is exc:
                    raise
                raise hinted from exc
            if self.closed:
                return
            failures += 1
            if outage is None:
                outage = error
                if on_status is not None:
                    on_status(error)
            delay = self._backoff(failures)
            logger.debug("%s; reconnecting in %.2f s", error, delay)
            await asyncio.sleep(delay)


def _silenced(probe: asyncio.Task[EtcdUnavailable | None] | None) -> EtcdUnavailable | None:
    """Why a watch's probe ended its stream, if it did."""
    if probe is None or not probe.done() or probe.cancelled() or probe.exception() is not None:
        return None
    return probe.result()


def _watch_message(message: JSON, what: str, resume: int) -> tuple[bool, list[WatchEvent]]:
    """One message of a watch stream: whether it says the watch was created, and its events.

    Raises the error it carries, :class:`EtcdCompacted` if ``resume`` was
    compacted, :class:`EtcdError` if etcd canceled the watch.
    """
    if "error" in message:
        raise _error(message, status=None, what=what)
    result = message.get("result")
    if not isinstance(result, Mapping):
        return False, []
    compact_revision = _int(result, "compact_revision")
    if compact_revision:
        raise EtcdCompacted(
            compact_revision,
            f"etcd {what}: revision {resume} is compacted (oldest kept: {compact_revision})",
        )
    if result.get("canceled"):
        reason = str(result.get("cancel_reason") or "no reason given")
        code = GRPC_UNAUTHENTICATED if "Unauthenticated" in reason else None
        raise EtcdError(f"etcd {what}: canceled: {reason}", code=code)
    events: list[WatchEvent] = []
    for raw in result.get("events") or ():
        kv = _key_value(raw.get("kv") or {})
        kind = EventType(raw.get("type") or "PUT")
        events.append(WatchEvent(type=kind, kv=kv, revision=kv.mod_revision))
    return bool(result.get("created")), events


async def _stream_messages(response: aiohttp.ClientResponse) -> AsyncGenerator[JSON, None]:
    """The JSON objects of a watch stream, in order, until it ends.

    The last one may lack its newline: when etcd shuts down, the gateway ends the
    stream with ``{"error": {"grpc_code": 14, "message": "transport is closing"}}``
    (or code 1, its context canceled first) and no newline after it.
    """
    lines = _Lines()
    async for chunk in response.content.iter_any():
        for message in lines.feed(chunk):
            yield message
    last = lines.rest()
    if last is not None:
        yield last


class _Lines:
    """Splits a streamed body into its newline-delimited JSON objects."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[JSON]:
        self._buffer += chunk
        messages: list[JSON] = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if line.strip():
                try:
                    messages.append(_decode(line))
                except ValueError as exc:
                    raise EtcdError("etcd sent a watch message that is not JSON") from exc
        return messages

    def rest(self) -> JSON | None:
        """The message left without its newline when the stream ended; ``None`` when there
        is none, or only a cut-off piece of one."""
        line, self._buffer = bytes(self._buffer), bytearray()
        if not line.strip():
            return None
        try:
            return _decode(line)
        except ValueError:
            return None


def _drop_connection(response: aiohttp.ClientResponse) -> None:
    """End a watch stream's connection at once: it is never reused, and a TLS one closed
    politely would wait for the server's close_notify past the loop's end (a leaked socket)."""
    connection = response.connection
    if connection is not None and connection.transport is not None:
        connection.transport.abort()
    response.close()


_T = TypeVar("_T")


@dataclass(slots=True)
class _InUse:
    """The endpoint of a pool (and of the pools sharing it) that answered last."""

    index: int = 0


class EtcdPool:
    """Clients of the endpoints of one etcd cluster, used in order.

    A request goes to the endpoint that answered last; one that cannot be reached
    (:class:`EtcdUnavailable`) passes it to the next, in the configured order.  Any
    other error is etcd's answer and is raised at once.  ``tls`` is used for the
    ``https://`` endpoints; the other arguments are :class:`EtcdClient`'s.

    :meth:`sharing` gives a pool on the same connections with a timeout of its own
    (:class:`EtcdPools` hands those out, one cluster's to each part of the daemon).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        username: str | None = None,
        password: str | None = None,
        tls: EtcdTLS | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self.clients = [
            EtcdClient(
                endpoint,
                timeout=timeout,
                username=username,
                password=password,
                tls=tls if endpoint.startswith("https://") else None,
            )
            for endpoint in endpoints
        ]
        self._in_use = _InUse()
        self._on_close: Callable[[], Awaitable[None]] | None = None
        self._closed = False

    def sharing(
        self, *, timeout: float, on_close: Callable[[], Awaitable[None]] | None = None
    ) -> EtcdPool:
        """A pool on this one's connections (sessions, login tokens, the endpoint in use)
        whose requests are each bounded by ``timeout``.  Closing it leaves the connections
        open (they are this pool's to close) and calls ``on_close``, once."""
        twin = copy.copy(self)
        twin.clients = [client.sharing(timeout=timeout) for client in self.clients]
        twin._on_close = on_close
        twin._closed = False
        return twin

    @property
    def endpoints(self) -> list[str]:
        return [client.endpoint for client in self.clients]

    async def call(self, request: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
        """``request`` on the current endpoint, failing over to the next ones in order;
        raises the last :class:`EtcdUnavailable` when none answers."""
        last: EtcdUnavailable | None = None
        for step in range(len(self.clients)):
            index = (self._in_use.index + step) % len(self.clients)
            try:
                result = await request(self.clients[index])
            except EtcdUnavailable as exc:
                last = exc
                continue
            self._in_use.index = index
            return result
        assert last is not None
        raise last

    async def call_as(
        self, error: Callable[[str], Exception], request: Callable[[EtcdClient], Awaitable[_T]]
    ) -> _T:
        """:meth:`call`, with an etcd error raised as ``error(message)`` (chained)."""
        try:
            return await self.call(request)
        except EtcdError as exc:
            raise error(str(exc)) from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for client in self.clients:
            await client.close()
        if self._on_close is not None:
            await self._on_close()


@dataclass(eq=False, slots=True)
class _Shared:
    pool: EtcdPool
    users: int = 0


class EtcdPools:
    """One :class:`EtcdPool` per etcd cluster (its endpoints, TLS files and login) for
    every part of a daemon that talks to it: leadership, cluster slots and durable
    state share the connections to the cluster's etcd, and its login token.

    :meth:`pool` gives each user a pool of its own timeout on the shared connections;
    closing it gives them back, and the last one back closes them.  :meth:`close` (at
    the daemon's stop) closes whatever a user did not give back.
    """

    def __init__(self) -> None:
        self._shared: dict[tuple[object, ...], _Shared] = {}

    def pool(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float,
        username: str | None = None,
        password: str | None = None,
        tls: EtcdTLS | None = None,
    ) -> EtcdPool:
        """A pool of the etcd cluster at ``endpoints``, each request bounded by ``timeout``;
        the user closes it when done.  Raises as :class:`EtcdPool` does."""
        key: tuple[object, ...] = (tuple(endpoints), username, password, tls)
        shared = self._shared.get(key)
        if shared is None:
            made = EtcdPool(
                endpoints, timeout=timeout, username=username, password=password, tls=tls
            )
            shared = self._shared[key] = _Shared(made)
        shared.users += 1

        async def given_back() -> None:
            shared.users -= 1
            if shared.users == 0 and self._shared.get(key) is shared:
                del self._shared[key]
                await shared.pool.close()

        return shared.pool.sharing(timeout=timeout, on_close=given_back)

    def __len__(self) -> int:
        """How many etcd clusters have connections open."""
        return len(self._shared)

    async def close(self) -> None:
        shared, self._shared = list(self._shared.values()), {}
        for each in shared:
            await each.pool.close()
