"""Issue 15's connection rows against real daemon processes, now passing:

(a) 1,000 idle TCP connections: the daemon holds at most ``maxConnections`` of
    them, closes the rest after ``keepAliveTimeout``, and its descriptors come
    back to the idle count;
(b) headers sent at 1 byte/s: the connection is closed at ``headerTimeout``;
(c) 150 idle connections against a daemon with ``ulimit -n 128`` and a job every
    second: no run ends ``spawn_failed`` and accept problems take a line or two
    of log, not thousands of tracebacks;
(d) a malformed request line: a JSON 400 that quotes nothing of it, no traceback.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_proc import DaemonProcess, http, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KEEP_ALIVE = 3
HEADERS = 1
MAX_CONNECTIONS = 512

CONFIG = f"""\
web:
  listen: [http://127.0.0.1:0]
  keepAliveTimeout: {KEEP_ALIVE}
  headerTimeout: {HEADERS}
jobs:
  - name: idle
    command: "true"
    schedule: "@yearly"
"""

LOW_NOFILE = """\
web:
  listen: [http://127.0.0.1:0]
jobs:
  - name: tick
    command: "true"
    schedule: "* * * * * * *"
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, str]]:
    root = tmp_path_factory.mktemp("conn")
    proc = DaemonProcess(write_config(root / "conf", CONFIG), root / "daemon.log",
                         args=["--log-level", "debug"])  # fmt: skip
    proc.start()
    try:
        yield proc, proc.url()
    finally:
        proc.kill9()


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def metric(url: str, name: str) -> float:
    status, _, text = http(url + "/metrics")
    assert status == 200
    found = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return sum(float(value) for value in found)  # over every label


def closed_by_server(sock: socket.socket, timeout: float = 0.5) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_flood_of_idle_connections_is_capped_and_closed(
    daemon: tuple[DaemonProcess, str],
) -> None:
    proc, url = daemon
    idle = proc.open_fds()
    peak = idle
    clients: list[socket.socket] = []
    try:
        for _ in range(1000):
            clients.append(socket.create_connection(address(url), timeout=30))
            if len(clients) % 50 == 0:
                peak = max(peak, proc.open_fds())
        began = time.monotonic()
        while time.monotonic() - began < 1:
            peak = max(peak, proc.open_fds())
            time.sleep(0.05)
        wait_for(lambda: proc.open_fds() <= idle + 3, KEEP_ALIVE * 5,
                 "the daemon's descriptors back to idle")  # fmt: skip
        after = proc.open_fds()
        still_open = [c for c in clients if not closed_by_server(c, 0.05)]
    finally:
        for client in clients:
            client.close()
    refused = metric(url, "cronstable_http_connections_refused_total")
    print(f"\n(a) daemon fds: idle {idle}, peak {peak} during 1,000 connections, {after} after;"
          f" {refused:.0f} refused at maxConnections")  # fmt: skip
    assert peak <= idle + MAX_CONNECTIONS + 16, "more connections held than maxConnections"
    assert not still_open, f"{len(still_open)} connections left open by the server"


def test_headers_at_one_byte_a_second_are_cut_at_header_timeout(
    daemon: tuple[DaemonProcess, str],
) -> None:
    proc, url = daemon
    before = metric(url, "cronstable_http_header_timeouts_total")
    client = socket.create_connection(address(url), timeout=5)
    began = time.monotonic()
    try:
        for byte in b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow":
            try:
                client.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if closed_by_server(client, 1.0):  # one byte a second
                break
        else:
            pytest.fail("the connection outlived the whole request head")
        elapsed = time.monotonic() - began
    finally:
        client.close()
    print(f"\n(b) closed {elapsed:.1f} s after the first byte (headerTimeout {HEADERS} s)")
    assert metric(url, "cronstable_http_header_timeouts_total") == before + 1
    assert "Traceback" not in proc.current()


def test_a_malformed_request_line_gets_a_json_400_quoting_nothing(
    daemon: tuple[DaemonProcess, str],
) -> None:
    proc, url = daemon
    sent = b"EVIL\x01REQUEST-LINE <script>alert(1)</script>\r\n\r\n"
    with socket.create_connection(address(url), timeout=5) as client:
        client.sendall(sent)
        raw = b""
        while chunk := client.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split()[1] == b"400"
    assert b"application/json" in head and b"\r\nServer: cronstable" in head
    assert json.loads(body)["error"] == "malformed request"
    assert b"EVIL" not in raw and b"script" not in raw
    proc.wait_log(r"DEBUG cronstable\.web\.protocol: Malformed request")
    log = proc.current()
    assert "Traceback" not in log and " ERROR " not in log
    assert "EVIL" not in log


def test_a_flood_on_a_low_ulimit_never_fails_a_spawn(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    proc = DaemonProcess(write_config(tmp_path / "conf", LOW_NOFILE), tmp_path / "daemon.log",
                         nofile=128)  # fmt: skip
    daemon_procs.append(proc.start())
    url = proc.url()
    proc.wait_log(r"Open files limit: 128 \(the hard limit\)")
    clients = []
    try:
        for _ in range(150):
            clients.append(socket.create_connection(address(url), timeout=10))
        ticks = proc.current().count("Job tick finished")
        wait_for(lambda: proc.current().count("Job tick finished") >= ticks + 8, 30,
                 "eight seconds of runs during the flood")  # fmt: skip
        fds_during = proc.open_fds()
    finally:
        for client in clients:
            client.close()
    wait_for(lambda: http(url + "/healthz", timeout=2)[0] == 200, 30, "HTTP answering again")
    status, _, body = http(url + "/jobs/tick/runs")
    assert status == 200
    outcomes = [run["outcome"] for run in body["runs"] if "outcome" in run]
    log = proc.current()
    accept_lines = [
        line for line in log.splitlines() if "stopped accepting" in line or "accept()" in line
    ]
    print(f"\n(c) {len(outcomes)} runs {sorted(set(outcomes))}, {fds_during} fds during the "
          f"flood, {len(accept_lines)} accept lines, {len(log)} bytes of log")  # fmt: skip
    assert outcomes.count("succeeded") >= 5 and "spawn_failed" not in outcomes
    assert "could not start the command" not in log
    assert "Traceback" not in log
    assert len(accept_lines) <= 3, accept_lines
    assert fds_during <= 128 - 48, "the listener took the descriptors kept for the jobs"
