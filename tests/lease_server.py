"""A Kubernetes Lease API server for the tests: a *conformance double*, not Kubernetes.

No Kubernetes API server can be installed where these tests run, so the kubernetes
leadership backend is tested against this one.  It implements, over real HTTPS
(aiohttp, a certificate from a test CA made with trustme) and nothing else, the
documented semantics of ``coordination.k8s.io/v1`` Leases that the backend relies
on, as the Kubernetes API reference and the API conventions state them:

* ``GET``, ``POST`` (create), ``PUT`` (replace), ``DELETE`` of
  ``/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases[/{name}]``, and a
  list with ``?labelSelector=`` (equality-based terms: ``k=v``, ``k==v``,
  ``k!=v``, ``k``, ``!k``, joined by commas);
* every write gives the object a new ``metadata.resourceVersion`` (opaque text, here
  a counter shared by all objects); a ``PUT`` whose ``metadata.resourceVersion`` is
  not the stored one answers **409** ``Conflict``, one without any answers 422; a
  ``DELETE`` with ``preconditions.resourceVersion`` that does not match answers 409;
* a create of an existing name answers **409** ``AlreadyExists``; a read, replace
  or delete of a missing one **404** ``NotFound``; failures are ``Status`` objects
  (``kind: Status``, ``reason``, ``message``, ``code``);
* ``spec`` (``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``,
  ``renewTime``, ``leaseTransitions``) is **data only**: the server never expires,
  clears or compares a Lease by time, exactly as the real one does not;
* names must be DNS subdomains (422 ``Invalid`` otherwise), annotations at most
  256 KiB in all;
* authentication: a bearer token from :attr:`LeaseServer.tokens` (401
  ``Unauthorized`` otherwise), or a client certificate signed by the test CA;
  a token in :attr:`LeaseServer.forbidden` is known but may do nothing (403
  ``Forbidden``, as a missing RBAC rule answers).

Not modelled: namespaces (every name is one that exists), watches, PATCH,
server-side apply, ``generateName``, field selectors, pagination, admission,
and every other resource.  Faults for the tests: :attr:`LeaseServer.delay`
(every answer that late), :attr:`LeaseServer.fail` (every answer this status).

It runs in a thread of its own (an event loop of its own), so both async tests and
real daemon processes can use it.  Fixtures (``pytest_plugins`` in conftest):
``lease_server`` (one per session, never stop it) and ``kube_namespace`` (a
namespace no other test uses, like ``t-3f9c2a1b``).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
import ssl
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from etcd_server import TLSFiles, free_port

PREFIX = "/apis/coordination.k8s.io/v1/namespaces/"
TOKEN = "test-token-3b7e"
"""The token the session's kubeconfig carries."""
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ANNOTATIONS_LIMIT = 256 * 1024


def status(code: int, reason: str, message: str) -> web.Response:
    """A failure as the API server writes it: a ``Status`` object."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy an equality-based label ``selector``."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


class LeaseServer:
    """See the module docstring.  ``start()`` serves on a free port of 127.0.0.1."""

    def __init__(self, tls: TLSFiles) -> None:
        self.tls = tls
        self.port = free_port()
        self.tokens: set[str] = {TOKEN}
        self.forbidden: set[str] = set()
        self.delay = 0.0
        self.fail: int | None = None
        self.requests: Counter[str] = Counter()
        """``METHOD kind`` (``GET lease``, ``GET list``, ``PUT lease`` …) → count."""
        self.conflicts = 0
        """Replaces and deletes answered 409 for a stale resourceVersion."""
        self.seen_tokens: list[str] = []
        """Bearer tokens in the order requests carried them (the rotation tests read it)."""
        self._leases: dict[tuple[str, str], dict[str, Any]] = {}
        self._version = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ what tests read and do

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the stored Lease (None when there is none)."""
        with self._lock:
            found = self._leases.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def names(self, namespace: str) -> list[str]:
        with self._lock:
            return sorted(name for ns, name in self._leases if ns == namespace)

    def put_lease(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as is (a new resourceVersion), as another client's write would."""
        with self._lock:
            return copy.deepcopy(self._store(namespace, copy.deepcopy(obj)))

    def kubeconfig(
        self,
        path: Path,
        *,
        token: str | None = TOKEN,
        token_file: Path | None = None,
        namespace: str | None = None,
        client_cert: bool = False,
        inline_ca: bool = False,
    ) -> Path:
        """Write a kubeconfig for this server at ``path`` (its current context)."""
        import base64

        cluster: dict[str, Any] = {"server": self.endpoint}
        if inline_ca:
            cluster["certificate-authority-data"] = base64.b64encode(
                self.tls.ca.read_bytes()
            ).decode()
        else:
            cluster["certificate-authority"] = str(self.tls.ca)
        user: dict[str, Any] = {}
        if token is not None:
            user["token"] = token
        if token_file is not None:
            user["tokenFile"] = str(token_file)
        if client_cert:
            user["client-certificate-data"] = base64.b64encode(
                self.tls.client_cert.read_bytes()
            ).decode()
            user["client-key-data"] = base64.b64encode(self.tls.client_key.read_bytes()).decode()
        context: dict[str, Any] = {"cluster": "double", "user": "tester"}
        if namespace is not None:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "double", "cluster": cluster}],
            "users": [{"name": "tester", "user": user}],
            "contexts": [{"name": "test", "context": context}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    # ------------------------------------------------------------ life

    def start(self) -> None:
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # reported to start()
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="lease-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failed:
            raise failed[0]

    async def _open(self) -> None:
        app = web.Application()
        app.router.add_route("*", PREFIX + "{namespace}/leases", self._collection)
        app.router.add_route("*", PREFIX + "{namespace}/leases/{name}", self._one)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.tls.server_cert), str(self.tls.server_key))
        context.load_verify_locations(str(self.tls.ca))
        context.verify_mode = ssl.CERT_OPTIONAL
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._loop = self._thread = None

    # ------------------------------------------------------------ the API

    async def _admitted(self, request: web.Request, kind: str) -> web.Response | None:
        """None when the request may go on; else the answer (401, 403, a fault)."""
        self.requests[f"{request.method} {kind}"] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            return status(self.fail, "InternalError", "a fault the test asked for")
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if token:
            self.seen_tokens.append(token)
        if token in self.forbidden:
            verb = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}
            return status(
                403,
                "Forbidden",
                f'leases.coordination.k8s.io is forbidden: User "tester" cannot '
                f'{verb.get(request.method, "?")} resource "leases" in API group '
                f'"coordination.k8s.io" in the namespace "{request.match_info["namespace"]}"',
            )
        if token in self.tokens:
            return None
        transport = request.transport
        certificate = transport.get_extra_info("peercert") if transport is not None else None
        if not token and certificate:
            return None  # verified by the TLS layer against the test CA
        return status(401, "Unauthorized", "Unauthorized")

    async def _collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        if request.method == "GET":
            refused = await self._admitted(request, "list")
            if refused is not None:
                return refused
            selector = request.query.get("labelSelector", "")
            with self._lock:
                items = [
                    copy.deepcopy(obj)
                    for (ns, _), obj in sorted(self._leases.items())
                    if ns == namespace and matches(selector, obj["metadata"].get("labels") or {})
                ]
                version = str(self._version)
            return web.json_response(
                {
                    "kind": "LeaseList",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"resourceVersion": version},
                    "items": items,
                }
            )
        if request.method != "POST":
            return status(405, "MethodNotAllowed", f"{request.method} is not supported")
        refused = await self._admitted(request, "lease")
        if refused is not None:
            return refused
        obj = await self._body(request)
        if isinstance(obj, web.Response):
            return obj
        name = str(obj.get("metadata", {}).get("name", ""))
        invalid = self._invalid(name, obj)
        if invalid is not None:
            return invalid
        with self._lock:
            if (namespace, name) in self._leases:
                return status(
                    409,
                    "AlreadyExists",
                    f'leases.coordination.k8s.io "{name}" already exists',
                )
            meta = obj["metadata"]
            meta.pop("resourceVersion", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            stored = copy.deepcopy(self._store(namespace, obj))
        return web.json_response(stored, status=201)

    async def _one(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        refused = await self._admitted(request, "lease")
        if refused is not None:
            return refused
        missing = status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        if request.method == "GET":
            found = self.lease(namespace, name)
            return web.json_response(found) if found is not None else missing
        if request.method == "PUT":
            obj = await self._body(request)
            if isinstance(obj, web.Response):
                return obj
            if obj.get("metadata", {}).get("name") != name:
                return status(400, "BadRequest", "the name of the object does not match the URL")
            invalid = self._invalid(name, obj)
            if invalid is not None:
                return invalid
            with self._lock:
                held = self._leases.get((namespace, name))
                if held is None:
                    return missing
                wanted = obj["metadata"].get("resourceVersion")
                if not wanted:
                    return status(
                        422, "Invalid", "metadata.resourceVersion: must be specified for an update"
                    )
                if wanted != held["metadata"]["resourceVersion"]:
                    self.conflicts += 1
                    return status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                        "the object has been modified; please apply your changes to the latest "
                        "version and try again",
                    )
                for kept in ("uid", "creationTimestamp"):
                    obj["metadata"][kept] = held["metadata"].get(kept)
                stored = copy.deepcopy(self._store(namespace, obj))
            return web.json_response(stored)
        if request.method == "DELETE":
            options: dict[str, Any] = {}
            if request.can_read_body:
                body = await self._body(request)
                if isinstance(body, web.Response):
                    return body
                options = body
            wanted = (options.get("preconditions") or {}).get("resourceVersion")
            with self._lock:
                held = self._leases.get((namespace, name))
                if held is None:
                    return missing
                if wanted is not None and wanted != held["metadata"]["resourceVersion"]:
                    self.conflicts += 1
                    return status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                        "Precondition failed: ResourceVersion in precondition: "
                        f"{wanted}, ResourceVersion in object meta: "
                        f"{held['metadata']['resourceVersion']}",
                    )
                del self._leases[(namespace, name)]
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Success",
                    "details": {"name": name},
                }
            )
        return status(405, "MethodNotAllowed", f"{request.method} is not supported")

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            obj = json.loads(await request.read())
        except ValueError:
            return status(400, "BadRequest", "the body is not JSON")
        if not isinstance(obj, dict):
            return status(400, "BadRequest", "the body is not an object")
        obj.setdefault("metadata", {})
        return obj

    def _invalid(self, name: str, obj: dict[str, Any]) -> web.Response | None:
        if obj.get("kind", "Lease") != "Lease":
            return status(400, "BadRequest", f"kind {obj.get('kind')!r} is not Lease")
        if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            return status(422, "Invalid", f'Lease "{name}" is invalid: metadata.name')
        annotations = obj["metadata"].get("annotations") or {}
        if sum(len(k) + len(str(v)) for k, v in annotations.items()) > ANNOTATIONS_LIMIT:
            return status(
                422, "Invalid", "metadata.annotations: Too long: must have at most 262144 bytes"
            )
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            return status(422, "Invalid", "spec.leaseDurationSeconds: must be greater than 0")
        return None

    def _store(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Under the lock: keep ``obj`` with a new resourceVersion."""
        self._version += 1
        obj["apiVersion"] = "coordination.k8s.io/v1"
        obj["kind"] = "Lease"
        obj["metadata"]["namespace"] = namespace
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._leases[(namespace, obj["metadata"]["name"])] = obj
        return obj


@pytest.fixture(scope="session")
def lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeaseServer]:
    """One Lease server for the session: use your own ``kube_namespace``, never stop it,
    and put back any fault you set."""
    server = LeaseServer(TLSFiles.make(tmp_path_factory.mktemp("lease-tls")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_namespace(request: pytest.FixtureRequest) -> str:
    """A namespace that belongs to this test alone."""
    return "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]


@pytest.fixture
def own_lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeaseServer]:
    """A Lease server of the test's own: free to set faults on, or to stop."""
    server = LeaseServer(TLSFiles.make(tmp_path_factory.mktemp("lease-tls")))
    server.start()
    try:
        yield server
    finally:
        server.stop()
