"""Issue 15's attacks on the application layer, against a real ``cronstable run``.

One daemon for the module, with no API token (so the Host rule applies) and a
GitHub webhook secret (so the webhook route is there):

* 16 unsigned 24 MiB deliveries at once leave its resident set near idle: the
  body is not read before the signature header is looked at;
* HEAD answers on GET routes; a foreign Host gets 421; a page of another origin
  gets 403; no answer names a version.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from daemon_proc import DaemonProcess, http, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  webhooks:
    github: {secret: {value: e2e-hook-secret}}
jobs:
  - {name: hello, command: echo hi, schedule: '@yearly'}
"""
ATTACKERS = 16
BODY = 24 << 20
MiB = 1 << 20


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, str]]:
    root = tmp_path_factory.mktemp("attacks")
    proc = DaemonProcess(write_config(root / "conf", CONFIG), root / "daemon.log").start()
    try:
        url = proc.url()
        wait_for(lambda: http(f"{url}/readyz")[0] == 200, what="the daemon is ready")
        yield proc, url
    finally:
        proc.kill9()


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def raw(url: str, request: str) -> tuple[str, bytes]:
    """(status line and headers, every byte after them) of one Connection: close request."""
    with socket.create_connection(address(url), timeout=10) as sock:
        sock.sendall(request.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def unsigned_delivery(url: str, body: memoryview, statuses: list[str]) -> None:
    """Headers, then the whole body from a second thread; the answer is read meanwhile."""
    host, port = address(url)
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(
            (
                "POST /webhooks/github HTTP/1.1\r\n"
                f"Host: {host}:{port}\r\n"
                "Content-Type: application/json\r\n"
                "X-GitHub-Event: push\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
        )

        def send_body() -> None:
            try:
                sock.sendall(body)
            except OSError:
                pass  # refused and closed: what the daemon may do with the rest

        sender = threading.Thread(target=send_body)
        sender.start()
        answer = b""
        try:
            while b"\r\n" not in answer and (chunk := sock.recv(4096)):
                answer += chunk
        except OSError as exc:
            answer = f"no answer: {exc}".encode()
        sender.join(60)
        statuses.append(answer.split(b"\r\n", 1)[0].decode("latin-1"))


def test_unsigned_24_mib_deliveries_are_not_read(daemon: tuple[DaemonProcess, str]) -> None:
    proc, url = daemon
    idle = proc.rss_bytes()
    body = memoryview(bytes(BODY))
    statuses: list[str] = []
    threads = [
        threading.Thread(target=unsigned_delivery, args=(url, body, statuses))
        for _ in range(ATTACKERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    peak = proc.peak_rss_bytes()
    print(
        f"\n{ATTACKERS} x {BODY // MiB} MiB unsigned deliveries: idle RSS {idle / MiB:.1f} MiB, "
        f"peak {peak / MiB:.1f} MiB, after {proc.rss_bytes() / MiB:.1f} MiB"
    )
    assert statuses == ["HTTP/1.1 401 Unauthorized"] * ATTACKERS
    assert peak < idle + 64 * MiB
    assert http(f"{url}/healthz")[0] == 200


def test_head_answers_the_get_routes_without_a_body(daemon: tuple[DaemonProcess, str]) -> None:
    _, url = daemon
    host = url.removeprefix("http://")
    for path in ("/healthz", "/status", "/"):
        head, rest = raw(url, f"HEAD {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        assert head.startswith("HTTP/1.1 200 "), (path, head)
        assert rest == b"", path
    _, headers, _ = http(f"{url}/status", method="HEAD")
    assert headers["Content-Type"].startswith("application/json")


def test_a_foreign_host_gets_421_without_a_token(daemon: tuple[DaemonProcess, str]) -> None:
    _, url = daemon
    for path in ("/status", "/jobs/hello/runs", "/events"):
        status, headers, body = http(f"{url}{path}", headers={"Host": "attacker.test"})
        assert status == 421, path
        assert headers["Content-Type"].startswith("application/json")
        assert "web.allowedHosts" in body["error"] and "attacker" not in body["error"]
    assert http(f"{url}/jobs/hello/runs")[0] == 200  # the daemon's own address still reads


def test_a_page_of_another_origin_gets_403(daemon: tuple[DaemonProcess, str]) -> None:
    _, url = daemon
    for path in ("/status", "/events"):
        status, _, body = http(f"{url}{path}", headers={"Origin": "http://attacker.test"})
        assert status == 403, path
        assert "another origin" in body["error"]
    assert http(f"{url}/status", headers={"Origin": url})[0] == 200


def test_no_answer_names_a_version(daemon: tuple[DaemonProcess, str]) -> None:
    _, url = daemon
    answers = [
        http(f"{url}/healthz"),
        http(f"{url}/"),
        http(f"{url}/nowhere"),
        http(f"{url}/status", method="DELETE"),
        http(f"{url}/webhooks/github", method="POST", body=b"{}"),
        http(f"{url}/status", headers={"Host": "attacker.test"}),
        http(f"{url}/status", headers={"Origin": "http://attacker.test"}),
    ]
    assert [status for status, _, _ in answers] == [200, 200, 404, 405, 401, 421, 403]
    for _, headers, _ in answers:
        assert headers["Server"] == "cronstable"
        assert not any("aiohttp" in value or "Python" in value for value in headers.values())
