"""The CLI client against hostile servers on loopback: a server that trickles its answer
a byte every 2 s (over TCP, TLS and a unix socket).  The real CLI runs as a subprocess."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 3
"""The --timeout given; a command must end within TIMEOUT + a margin."""
MARGIN = 5.0
"""Seconds past the timeout a command may take to end: the tests assert behaviour, not
precise timing (start-up on a loaded machine included), so 3 s + 5 s < 8 s."""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTABLE_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cronstable", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env or _env(),
    )


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _finish(proc: subprocess.Popen[bytes], began: float) -> Done:
    out, err = proc.communicate(timeout=60)
    return Done(
        proc.returncode,
        out.decode("utf-8", "surrogateescape"),
        err.decode("utf-8", "surrogateescape"),
        time.monotonic() - began,
    )


def run(*args: str, env: dict[str, str] | None = None) -> Done:
    began = time.monotonic()
    return _finish(_cli(*args, env=env), began)


def run_all(commands: list[list[str]]) -> list[Done]:
    """Every command at once (each is timed from its own start)."""
    started = [(time.monotonic(), _cli(*args)) for args in commands]
    return [_finish(proc, began) for began, proc in started]


# ------------------------------------------------------------ a server that trickles


@dataclass
class Trickler:
    """Reads a request, then sends its answer one byte every ``interval`` seconds, for
    ever; with ``head_at_once`` the status line and headers go at once, the body trickles."""

    listener: socket.socket
    head_at_once: bool
    tls: ssl.SSLContext | None = None
    interval: float = 2.0
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    connections: int = 0

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"

    def start(self) -> None:
        self.listener.settimeout(0.1)
        self._spawn(self._accept)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)
        self.listener.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            answer = self.HEAD + b"[" * 99999
            if self.head_at_once:
                conn.sendall(self.HEAD)
                answer = answer[len(self.HEAD) :]
            for byte in answer:
                conn.sendall(bytes([byte]))
                if self.stop.wait(self.interval):
                    return
        except OSError:
            return  # the client gave up: what it should do
        finally:
            conn.close()


@dataclass
class Trickling:
    url: str
    server: Trickler
    ca_file: Path | None = None


@pytest.fixture
def trickling(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Trickling]:
    """``request.param``: (transport, stage): tcp|tls|unix, head|body."""
    transport, stage = request.param
    ca_file = None
    tls = None
    if transport == "unix":
        path = tmp_path / "api.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        url = f"unix://{path}"
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        scheme = "https" if transport == "tls" else "http"
        url = f"{scheme}://deploy:hunter2@127.0.0.1:{listener.getsockname()[1]}"
        if transport == "tls":
            ca = trustme.CA()
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ca.issue_cert("127.0.0.1").configure_cert(tls)
            ca_file = tmp_path / "ca.pem"
            ca.cert_pem.write_to_path(str(ca_file))
    listener.listen(64)
    server = Trickler(listener, head_at_once=stage == "body", tls=tls)
    server.start()
    try:
        yield Trickling(url, server, ca_file)
    finally:
        server.close()


def _assert_gave_up(done: Done, url: str, timeout: float = TIMEOUT) -> None:
    assert done.returncode == 3, done
    assert done.seconds < timeout + MARGIN, done
    shown = url.replace(":hunter2@", ":***@")
    assert f"cannot reach {shown}: no complete answer within the timeout of {timeout:g} s" in (
        done.stderr
    ), done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize("trickling", [("tcp", "head")], indirect=True)
def test_every_client_command_gives_up_at_its_timeout(trickling: Trickling) -> None:
    # the issue's case: a byte every 2 s kept `status --timeout 3` waiting 40 s
    common = ["--url", trickling.url, "--timeout", str(TIMEOUT)]
    commands = [
        ["status", *common],
        ["status", "--json", *common],
        ["start", "a-job", *common],
        ["cancel", "a-job", *common],
        ["runs", "a-job", "--output", *common],
        ["reload", *common],
    ]
    for args, done in zip(commands, run_all(commands), strict=True):
        assert done.stdout == "", args
        _assert_gave_up(done, trickling.url)
    assert trickling.server.connections == len(commands)


@pytest.mark.parametrize(
    "trickling",
    [("tcp", "body"), ("unix", "head"), ("unix", "body"), ("tls", "head"), ("tls", "body")],
    indirect=True,
    ids=["tcp-body", "unix-head", "unix-body", "tls-head", "tls-body"],
)
def test_the_timeout_bounds_headers_and_body_on_every_transport(trickling: Trickling) -> None:
    args = ["status", "--url", trickling.url, "--timeout", str(TIMEOUT)]
    if trickling.ca_file is not None:
        args += ["--cacert", str(trickling.ca_file)]
    _assert_gave_up(run(*args), trickling.url)


@pytest.mark.parametrize("trickling", [("unix", "body")], indirect=True)
def test_diff_of_a_trickling_daemon_gives_up_at_the_default_timeout(
    trickling: Trickling, tmp_path: Path
) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("jobs: []\n")
    done = run("diff", trickling.url, str(conf))
    assert done.returncode == 2, done  # diff's exit status for a side it cannot read
    assert done.seconds < 10 + MARGIN, done
    assert f"cannot reach {trickling.url}: no complete answer within the timeout of 10 s" in (
        done.stderr
    )
