"""A real etcd server for the tests: ``/usr/bin/etcd`` on free loopback ports.

:class:`EtcdServer` runs one single-member etcd with its own data directory,
on a client port and a peer port picked free on 127.0.0.1.  It can be stopped
and started again on the same ports and data directory, to test outages::

    server = EtcdServer(tmp_path / "etcd")
    server.start()           # returns once /health answers
    server.endpoint          # "http://127.0.0.1:PORT"
    server.stop()            # SIGTERM, then SIGKILL; the data directory stays
    server.kill()            # SIGKILL at once, as a crash
    server.start()           # same ports, same data: revisions go on

With ``tls=TLSFiles.make(directory)`` it serves its clients over TLS only
(``https://``), with a certificate for 127.0.0.1 signed by a CA made for the test
(trustme), and requires a client certificate from that CA
(``--client-cert-auth``)::

    server = EtcdServer(tmp_path / "etcd", tls=TLSFiles.make(tmp_path / "tls"))
    server.endpoint          # "https://127.0.0.1:PORT"
    server.tls.ca, server.tls.client_cert, server.tls.client_key

Fixtures (register this module with ``pytest_plugins = ["etcd_server"]`` in
``tests/conftest.py``):

* ``etcd_server``: a fresh server for one test, free to stop and restart;
* ``shared_etcd_server``: one server for the whole session; tests that use it
  keep to their own key prefix (``etcd_prefix``) and never stop it;
* ``etcd_prefix``: a key prefix no other test uses, like ``/t/3f9c2a1b/``;
* ``tls_etcd_server``: a fresh TLS-only server (client certificates required).

Without an ``etcd`` binary the tests that need one fail (``make deps`` installs
Debian's etcd-server); they never skip, since CI always has it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ETCD_ENV = "CRONSTABLE_TEST_ETCD"
"""Names another etcd binary than the one on PATH."""

START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0


def etcd_binary() -> str:
    """The etcd executable; fails the calling test when there is none."""
    name = os.environ.get(ETCD_ENV) or "etcd"
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name!r} is not installed: `make deps` installs Debian's etcd-server "
            "(the etcd tests need a real server)",
            pytrace=False,
        )
    return found


def free_port() -> int:
    """A TCP port nothing listens on right now on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a test CA, a server certificate for 127.0.0.1 and a client one."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed none of them (a client trusting it must refuse the server)."""

    @classmethod
    def make(cls, directory: Path) -> TLSFiles:
        import trustme

        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("cronstable-test-client")
        files = cls(
            ca=directory / "ca.pem",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            client_cert=directory / "client.pem",
            client_key=directory / "client.key",
            other_ca=directory / "other-ca.pem",
        )
        ca.cert_pem.write_to_path(str(files.ca))
        server.cert_chain_pems[0].write_to_path(str(files.server_cert))
        server.private_key_pem.write_to_path(str(files.server_key))
        client.cert_chain_pems[0].write_to_path(str(files.client_cert))
        client.private_key_pem.write_to_path(str(files.client_key))
        trustme.CA().cert_pem.write_to_path(str(files.other_ca))
        return files

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


class EtcdServer:
    """One single-member etcd process on loopback; restartable on the same ports and data."""

    def __init__(self, data_dir: Path, *, name: str = "test", tls: TLSFiles | None = None) -> None:
        self.data_dir = data_dir
        self.name = name
        self.tls = tls
        self.client_port = free_port()
        self.peer_port = free_port()
        while self.peer_port == self.client_port:
            self.peer_port = free_port()
        self.log_path = data_dir.with_name(data_dir.name + ".log")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with TLS), the client URL."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        client = self.endpoint
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            etcd_binary(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            # A lone member: elect it within a quarter second, and let leases be as short
            # as 1 s (etcd's floor is 1.5 election timeouts, rounded up to whole seconds).
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "250",
            # As docs/clustering.md asks of a production etcd: keep an hour of history.
            # Nothing is compacted within a test session shorter than that; the tests
            # that need a compaction ask for one (EtcdClient.compact).
            "--auto-compaction-mode",
            "periodic",
            "--auto-compaction-retention",
            "1h",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "warn",
            *self._tls_options(),
        ]

    def _tls_options(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            "--cert-file",
            str(self.tls.server_cert),
            "--key-file",
            str(self.tls.server_key),
            "--trusted-ca-file",
            str(self.tls.ca),
            "--client-cert-auth",
        ]

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start etcd (again) and wait until it answers ``/health``."""
        if self.running:
            return
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with status {self._proc.returncode}:\n{self.log_tail()}"
                )
            if self._healthy():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"etcd did not become healthy in {timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def _healthy(self) -> bool:
        try:
            context = self.tls.client_context() if self.tls is not None else None
            url = f"{self.endpoint}/health"
            with urllib.request.urlopen(url, timeout=1, context=context) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        """Stop etcd (SIGTERM, SIGKILL after a grace period); the data directory stays."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """Kill etcd at once (SIGKILL, as a crash would); the data directory stays."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A fresh etcd for one test; the test may stop and restart it."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data")
    with server:
        yield server


@pytest.fixture(scope="session")
def shared_etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for the session: use your own ``etcd_prefix`` and never stop it."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd-shared") / "data")
    with server:
        yield server


@pytest.fixture
def etcd_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix that belongs to this test alone."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    return f"/t/{digest}/"


@pytest.fixture
def tls_etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A fresh etcd serving clients over TLS only, requiring a client certificate."""
    base = tmp_path_factory.mktemp("etcd-tls")
    server = EtcdServer(base / "data", tls=TLSFiles.make(base / "tls"))
    with server:
        yield server
