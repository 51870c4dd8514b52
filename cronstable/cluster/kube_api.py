"""A small client of the Kubernetes API for Leases, over aiohttp.

Where the API server and the credentials come from (:class:`KubeCredentials`):

* **in a pod** (:func:`in_cluster`): ``KUBERNETES_SERVICE_HOST`` and
  ``KUBERNETES_SERVICE_PORT``, and the service account's files under
  ``/var/run/secrets/kubernetes.io/serviceaccount``: ``token`` (a bearer token),
  ``ca.crt`` (the CA that signs the API server's certificate) and ``namespace``;
* **a kubeconfig file** (:func:`from_kubeconfig`): its current context's cluster
  (``server``, ``certificate-authority`` or ``-data``) and user (``token``,
  ``tokenFile``, ``client-certificate``/``client-key`` or their ``-data``).  Exec and
  auth-provider plugins, basic auth and ``insecure-skip-tls-verify`` are refused.

A token file is read again whenever it changed (its inode, size or modification
time): the kubelet rotates a projected service-account token by swapping the
files under the directory, and a daemon must use the new one without a restart.
An answer 401 also makes the client read the file again and try once more.

Every request has a time limit (``timeout``).  Failures are :class:`KubeError`
(a :class:`~cronstable.store_errors.StoreFailure`): *unreachable* when the API
server does not answer (connection refused or reset, a timeout, a name that does
not resolve) or answers 5xx or 429; *refused* for 401 and 403, any other error it
answers with, a server certificate that does not verify, and credentials that
cannot be read.  404 is :class:`KubeNotFound`, 409 :class:`KubeConflict` (a
replace whose ``resourceVersion`` is no longer the Lease's, or a create of a name
that exists).  The token is never part of a message: every message goes through
:func:`~cronstable.redact.redact` with the token as a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import ssl
import tempfile
from base64 import b64decode
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import yaml

from cronstable.cluster.kube_leases import Lease
from cronstable.redact import redact
from cronstable.store_errors import Fault, StoreFailure

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod's service account token, CA and namespace are mounted."""


class KubeError(StoreFailure):
    """The API server did not answer, or refused what was asked; ``status`` is the HTTP
    status it answered with (None: no answer)."""

    def __init__(self, message: str, *, fault: Fault, status: int | None = None) -> None:
        super().__init__(message, fault=fault)
        self.status = status


class KubeNotFound(KubeError):
    """404: no such Lease."""


class KubeConflict(KubeError):
    """409: the Lease changed since it was read (or a create found it exists)."""


@dataclass(frozen=True, slots=True)
class KubeCredentials:
    """How to reach one API server, and who to be there."""

    server: str
    """``https://HOST:PORT`` (a path after it is kept: some proxies serve the API below one)."""
    source: str
    """Where these came from, for messages (no secret in it)."""
    namespace: str | None = None
    """The service account's namespace, or the kubeconfig context's."""
    ca_file: str | None = None
    ca_data: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)


def _refused(message: str) -> KubeError:
    return KubeError(message, fault="refused")


def in_cluster(
    root: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] | None = None
) -> KubeCredentials:
    """The pod's service account (see the module docstring); raises :class:`KubeError`
    (refused) outside a pod or without the account's files."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port:
        raise _refused(
            "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
            "are not set); set cluster.kubernetes.kubeconfig to reach the API server "
            "from outside the cluster"
        )
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    token = root / "token"
    if not token.is_file():
        raise _refused(
            f"no service account token at {token} (is automountServiceAccountToken off?)"
        )
    ca = root / "ca.crt"
    namespace = None
    with contextlib.suppress(OSError):
        namespace = (root / "namespace").read_text().strip() or None
    return KubeCredentials(
        server=f"https://{host}:{port}",
        source=f"the pod's service account ({root})",
        namespace=namespace,
        ca_file=str(ca) if ca.is_file() else None,
        token_file=str(token),
    )


def from_kubeconfig(path: str | Path) -> KubeCredentials:
    """The current context of the kubeconfig file at ``path`` (relative file names in it
    are relative to its directory); raises :class:`KubeError` (refused)."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise _refused(f"cannot read the kubeconfig {file}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise _refused(f"the kubeconfig {file} is not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise _refused(f"the kubeconfig {file} is not a mapping")
    current = data.get("current-context")
    if not current:
        raise _refused(f"the kubeconfig {file} has no current-context")
    context = _named(data, "contexts", "context", str(current), file)
    cluster = _named(data, "clusters", "cluster", str(context.get("cluster", "")), file)
    user = (
        _named(data, "users", "user", str(context.get("user", "")), file)
        if (context.get("user"))
        else {}
    )
    where = f"the kubeconfig {file} (context {current})"
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise _refused(f"{where}: the cluster's server {server!r} is not an http(s) URL")
    if cluster.get("insecure-skip-tls-verify"):
        raise _refused(f"{where}: insecure-skip-tls-verify is not supported; give the CA")
    for plugin in ("exec", "auth-provider", "username", "password"):
        if user.get(plugin):
            raise _refused(
                f"{where}: the user's {plugin} is not supported; use a token, a tokenFile "
                "or a client certificate"
            )
    base = file.parent

    def relative(key: str, section: Mapping[str, Any]) -> str | None:
        value = section.get(key)
        return None if not value else str(base / str(value))

    def decoded(key: str, section: Mapping[str, Any]) -> bytes | None:
        value = section.get(key)
        if not value:
            return None
        try:
            return b64decode(str(value), validate=True)
        except ValueError as exc:
            raise _refused(f"{where}: {key} is not base64") from exc

    ca_data = decoded("certificate-authority-data", cluster)
    token = user.get("token")
    return KubeCredentials(
        server=server,
        source=where,
        namespace=str(context["namespace"]) if context.get("namespace") else None,
        ca_file=relative("certificate-authority", cluster),
        ca_data=ca_data.decode("ascii", "replace") if ca_data else None,
        token=str(token) if token else None,
        token_file=relative("tokenFile", user),
        cert_file=relative("client-certificate", user),
        key_file=relative("client-key", user),
        cert_data=decoded("client-certificate-data", user),
        key_data=decoded("client-key-data", user),
    )


def _named(data: Mapping[str, Any], group: str, key: str, name: str, file: Path) -> dict[str, Any]:
    for entry in data.get(group) or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(key)
            if isinstance(found, dict):
                return found
    raise _refused(f"the kubeconfig {file} has no {key} named {name!r}")


def tls_context(credentials: KubeCredentials) -> ssl.SSLContext | None:
    """The TLS context for ``credentials``' server (None for ``http://``); raises
    :class:`KubeError` (refused) when a file cannot be read or a certificate loaded."""
    if not credentials.server.startswith("https://"):
        return None
    try:
        context = ssl.create_default_context(
            cafile=credentials.ca_file, cadata=credentials.ca_data or None
        )
        if credentials.cert_file:
            context.load_cert_chain(credentials.cert_file, credentials.key_file)
        elif credentials.cert_data:
            _load_chain_data(context, credentials.cert_data, credentials.key_data)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise _refused(
            f"{credentials.source}: cannot load the CA or client certificate: {exc}"
        ) from exc
    return context


def _load_chain_data(context: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """``load_cert_chain`` reads files only: write the PEMs to a private directory that
    lives for the call alone."""
    with tempfile.TemporaryDirectory(prefix="cronstable-kube-") as directory:
        cert_path = Path(directory, "client.crt")
        cert_path.write_bytes(cert)
        key_path = None
        if key is not None:
            key_path = Path(directory, "client.key")
            descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(key)
        context.load_cert_chain(str(cert_path), str(key_path) if key_path else None)


class _Token:
    """A bearer token: fixed, or a file read again whenever it changed."""

    def __init__(self, credentials: KubeCredentials) -> None:
        self.fixed = credentials.token
        self.file = credentials.token_file
        self._seen: tuple[int, int, int, int] | None = None
        self._value: str | None = None
        self.reads = 0
        """Times the file was read (the tests count rotations)."""

    def current(self, *, again: bool = False) -> str | None:
        if self.file is None:
            return self.fixed
        try:
            stat = os.stat(self.file)
            signature = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if again or signature != self._seen or self._value is None:
                self._value = Path(self.file).read_text().strip()
                self._seen = signature
                self.reads += 1
        except OSError as exc:
            raise _refused(
                f"cannot read the token file {self.file}: {exc.strerror or exc}"
            ) from exc
        return self._value or None


Method = Literal["GET", "POST", "PUT", "DELETE"]


class KubeClient:
    """Leases in one namespace of one API server.  ``load`` gives the credentials (it
    runs once, in a thread, at the first request); ``namespace``: the configured one
    (None: the credentials', else ``default``); ``timeout``: seconds per request."""

    def __init__(
        self,
        load: Callable[[], KubeCredentials],
        *,
        namespace: str | None,
        timeout: float,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._load = load
        self._namespace = namespace
        self.timeout = timeout
        self._session = session
        self._owns_session = session is None
        self._ready: tuple[KubeCredentials, _Token, ssl.SSLContext | None] | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        where = self._ready[0].server if self._ready else "?"
        return f"KubeClient({where}, namespace {self.namespace!r})"

    @property
    def namespace(self) -> str:
        if self._namespace is not None:
            return self._namespace
        if self._ready is not None and self._ready[0].namespace:
            return self._ready[0].namespace
        return "default"

    @property
    def token_reads(self) -> int:
        return self._ready[1].reads if self._ready is not None else 0

    async def _prepared(self) -> tuple[KubeCredentials, _Token, ssl.SSLContext | None]:
        if self._ready is None:
            async with self._lock:
                if self._ready is None:
                    self._ready = await asyncio.to_thread(self._prepare)
        return self._ready

    def _prepare(self) -> tuple[KubeCredentials, _Token, ssl.SSLContext | None]:
        credentials = self._load()
        token = _Token(credentials)
        token.current()  # unreadable: refused now, not at every round
        return credentials, token, tls_context(credentials)

    async def _path(self, name: str | None = None) -> str:
        await self._prepared()  # the namespace may be the credentials'
        path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases"
        return path if name is None else f"{path}/{quote(name, safe='')}"

    async def request(
        self,
        method: Method,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request (a 401 once more with the token read again); the answer's JSON."""
        credentials, token, context = await self._prepared()
        secret = token.current()
        status, answer = await self._send(credentials, context, secret, method, path, body, params)
        if status == 401 and token.file is not None:
            secret = token.current(again=True)
            status, answer = await self._send(
                credentials, context, secret, method, path, body, params
            )
        if 200 <= status < 300:
            return answer
        raise self._failure(credentials, secret, method, path, status, answer)

    async def _send(
        self,
        credentials: KubeCredentials,
        context: ssl.SSLContext | None,
        token: str | None,
        method: Method,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> tuple[int, dict[str, Any]]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = credentials.server + path
        what = f"{method} {path}"
        try:
            async with self._session.request(
                method,
                url,
                json=body,
                params=params,
                headers=headers,
                ssl=context if context is not None else True,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                allow_redirects=False,
            ) as response:
                raw = await response.read()
                status = response.status
        except aiohttp.ClientConnectorCertificateError as exc:
            raise _refused(
                self._say(token, f"{credentials.server}: its certificate does not verify ({exc})")
            ) from exc
        except aiohttp.ClientSSLError as exc:
            raise KubeError(
                self._say(token, f"{credentials.server}: TLS failed ({exc})"),
                fault="unreachable" if isinstance(exc, ssl.SSLEOFError) else "refused",
            ) from exc
        except TimeoutError as exc:
            raise KubeError(
                f"{credentials.server}: {what}: no answer within {self.timeout:g} s",
                fault="unreachable",
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise KubeError(
                self._say(token, f"{credentials.server}: {what}: {exc or type(exc).__name__}"),
                fault="unreachable",
            ) from exc
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if 200 <= status < 300 and not answer and method != "DELETE":
            raise _refused(f"{credentials.server}: {what}: the answer is not a Kubernetes object")
        return status, answer

    def _say(self, token: str | None, text: str) -> str:
        return redact(text, secrets=[token] if token else ())

    def _failure(
        self,
        credentials: KubeCredentials,
        token: str | None,
        method: Method,
        path: str,
        status: int,
        answer: Mapping[str, Any],
    ) -> KubeError:
        message = str(answer.get("message") or answer.get("reason") or "")
        text = self._say(
            token,
            f"{credentials.server}: {method} {path}: {status}{': ' if message else ''}{message}",
        )
        if status == 404:
            return KubeNotFound(text, fault="refused", status=status)
        if status == 409:
            return KubeConflict(text, fault="refused", status=status)
        if status == 401:
            return KubeError(
                f"{text} (the token of {credentials.source} is not accepted)",
                fault="refused",
                status=status,
            )
        if status == 403:
            return KubeError(
                f"{text} (the Role must allow get, list, create, update and delete on "
                f"leases in namespace {self.namespace})",
                fault="refused",
                status=status,
            )
        fault: Fault = "unreachable" if status >= 500 or status == 429 else "refused"
        return KubeError(text, fault=fault, status=status)

    # ------------------------------------------------------------ Leases

    async def get(self, name: str) -> Lease | None:
        """The Lease ``name``; None when there is none."""
        try:
            return Lease.parse(await self.request("GET", await self._path(name)))
        except KubeNotFound:
            return None

    async def create(self, body: Mapping[str, Any]) -> Lease:
        """Create a Lease; :class:`KubeConflict` when one of that name exists."""
        return Lease.parse(await self.request("POST", await self._path(), body=body))

    async def replace(self, lease: Lease, body: Mapping[str, Any]) -> Lease:
        """Replace ``lease`` with ``body`` (made by :meth:`Lease.changed`, so it carries the
        ``resourceVersion`` read); :class:`KubeConflict` when it changed meanwhile."""
        return Lease.parse(await self.request("PUT", await self._path(lease.name), body=body))

    async def list(self, selector: str) -> list[Lease]:
        """The Leases whose labels match ``selector``."""
        answer = await self.request("GET", await self._path(), params={"labelSelector": selector})
        items = answer.get("items") or []
        return [Lease.parse(item) for item in items if isinstance(item, dict)]

    async def delete(self, lease: Lease) -> bool:
        """Delete ``lease`` if it is still as read (a ``resourceVersion`` precondition);
        False when it changed or is gone."""
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"resourceVersion": lease.resource_version},
        }
        try:
            await self.request("DELETE", await self._path(lease.name), body=body)
        except (KubeNotFound, KubeConflict):
            return False
        return True

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()
