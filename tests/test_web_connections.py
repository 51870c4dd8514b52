"""Connection limits over real sockets on loopback: the cap per listener, the idle and
header timeouts, /events streams, the pause at the descriptor reserve, and the answer
to a request aiohttp's parser refuses."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import trustme
from daemon_proc import until
from web_stack import Stack

from cronstable.platform import free_descriptors, open_descriptors
from cronstable.web.connections import ConnectionSlots
from cronstable.web.throttle import ThrottledLog

pytestmark = pytest.mark.timeout(60)

JOB = """\
jobs:
  - name: hello
    command: echo hi
    schedule: "@yearly"
"""


def config(limits: str, listen: str = "http://127.0.0.1:0", extra: str = "") -> str:
    return f"web:\n  listen: [{listen}]\n{extra}{limits}{JOB}"


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


async def applied(stack: Stack, text: str) -> str:
    record = await stack.apply(text)
    assert record.outcome == "applied", record.errors
    return stack.url()


def host_port(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*host_port(url))


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True when the server closes the connection within ``seconds`` (what it sent is read)."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def get(url: str, path: str) -> tuple[int, bytes]:
    reader, writer = await connect(url)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    async with asyncio.timeout(10):
        raw = await reader.read(-1)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def sample(stack: Stack, name: str, labels: dict[str, str] | None = None) -> float:
    value = stack.daemon.metrics.registry.get_sample_value(name, labels or {})
    return value or 0.0


def slots_of(stack: Stack) -> ConnectionSlots:
    """The open connections of the stack's one listener."""
    (only,) = stack.web.listeners.values()
    return only.slots


# ------------------------------------------------------------------ maxConnections


@pytest.mark.asyncio
async def test_past_max_connections_a_new_connection_is_closed_counted_and_logged_once(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cronstable")
    url = await applied(stack, config("  maxConnections: 2\n"))
    slots = slots_of(stack)
    held = [await connect(url) for _ in range(2)]
    await until(lambda: slots.open == 2, what="two connections open")
    labels = {"listener": slots.name}
    assert sample(stack, "cronstable_http_connections", labels) == 2

    for expected in (1, 2, 3):
        reader, writer = await connect(url)
        assert await closed_within(reader, 5), "a connection past the cap stays open"
        writer.close()
        assert sample(stack, "cronstable_http_connections_refused_total", labels) == expected
    lines = [r for r in caplog.records if "maxConnections (2)" in r.getMessage()]
    assert len(lines) == 1, "one line per minute, not one per refusal"
    assert lines[0].levelno == logging.WARNING and lines[0].exc_info is None

    held_reader, held_writer = held.pop()
    held_writer.close()
    await until(lambda: slots.open == 1, what="a held connection given back")
    status, body = await get(url, "/healthz")  # room again
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    for _, writer in held:
        writer.close()


# ------------------------------------------------------------------ timeouts


@pytest.mark.asyncio
async def test_an_idle_connection_is_closed_after_keep_alive_timeout(stack: Stack) -> None:
    url = await applied(stack, config("  keepAliveTimeout: 0.5\n  headerTimeout: 30\n"))
    silent, silent_writer = await connect(url)  # connects and sends nothing
    after_answer, writer = await connect(url)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")  # kept alive, then idle
    async with asyncio.timeout(5):
        assert (await after_answer.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    assert await closed_within(silent, 10)
    assert await closed_within(after_answer, 10)
    silent_writer.close()
    writer.close()
    await until(lambda: slots_of(stack).open == 0, what="slots given back")


@pytest.mark.asyncio
async def test_headers_sent_a_byte_at_a_time_are_cut_at_header_timeout(stack: Stack) -> None:
    url = await applied(stack, config("  keepAliveTimeout: 60\n  headerTimeout: 0.5\n"))
    reader, writer = await connect(url)
    began = time.monotonic()
    closed = False
    for byte in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200:
        writer.write(bytes([byte]))
        if await closed_within(reader, 0.1):
            closed = True
            break
    assert closed, "the trickling client is still connected"
    assert time.monotonic() - began < 30, "closed by keepAliveTimeout, not headerTimeout"
    assert sample(stack, "cronstable_http_header_timeouts_total") == 1
    writer.close()

    # the deadline is for a request's head only: a connection between requests keeps it off
    reader, writer = await connect(url)
    for _ in range(2):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        assert head.startswith(b"HTTP/1.1 200")
        assert not await closed_within(reader, 1.5)  # three header timeouts, idle
    writer.close()
    assert sample(stack, "cronstable_http_header_timeouts_total") == 1


@pytest.mark.asyncio
async def test_a_tls_handshake_gets_header_timeout(stack: Stack, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    tls = f"  tls: {{cert: {tmp_path / 'server.pem'}, key: {tmp_path / 'key.pem'}}}\n"
    url = await applied(
        stack,
        config("  keepAliveTimeout: 60\n  headerTimeout: 0.5\n", "https://127.0.0.1:0", tls),
    )
    silent, writer = await connect(url)  # TCP only, no ClientHello
    assert await closed_within(silent, 10)
    writer.close()
    client = ssl.create_default_context()
    ca.configure_trust(client)
    reader, writer = await asyncio.open_connection(*host_port(url), ssl=client)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    async with asyncio.timeout(5):
        assert (await reader.read(-1)).startswith(b"HTTP/1.1 200")
    writer.close()
    await until(lambda: slots_of(stack).open == 0, what="slots given back")


@pytest.mark.asyncio
async def test_an_event_stream_outlives_keep_alive_timeout_but_holds_a_slot(
    stack: Stack,
) -> None:
    url = await applied(stack, config("  keepAliveTimeout: 0.3\n  maxConnections: 1\n"))
    reader, writer = await connect(url)
    writer.write(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
    async with asyncio.timeout(5):
        assert b"200" in await reader.readuntil(b"\r\n\r\n")
        assert b": connected" in await reader.readuntil(b"\n\n")
    assert not await closed_within(reader, 1.5), "an /events stream was closed as idle"
    refused, refused_writer = await connect(url)
    assert await closed_within(refused, 5), "the stream's slot was free for another"
    refused_writer.close()
    slots = slots_of(stack)
    assert sample(stack, "cronstable_http_connections_refused_total", {"listener": slots.name}) == 1
    writer.close()
    await until(lambda: slots.open == 0, what="the stream's slot given back")


# ------------------------------------------------------------------ the descriptor reserve


@pytest.mark.asyncio
async def test_listeners_stop_accepting_at_the_reserve_and_resume_when_descriptors_free(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cronstable")
    url = await applied(stack, config("  fdReserve: 40\n"))
    slots = slots_of(stack)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened = open_descriptors()
    assert opened is not None
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 100, hard))
    clients: list[socket.socket] = []
    try:
        for _ in range(50):  # the kernel completes each handshake; the daemon accepts some
            client = socket.create_connection(host_port(url), timeout=5)
            clients.append(client)
        await until(lambda: sample(stack, "cronstable_http_accept_pauses_total") >= 1,
                    what="a pause")  # fmt: skip
        await asyncio.sleep(0.5)  # paused: the count stays
        accepted = slots.open
        assert 0 < accepted < 50
        free = free_descriptors()
        assert free is not None and free >= 40 - 1, "the listener took the jobs' reserve"
        assert sample(stack, "cronstable_http_accept_errors_total", {"error": "EMFILE"}) == 0
        for client in clients:
            client.close()
        clients = []
        await until(lambda: slots.open == 0, what="every connection closed")
        status, _ = await get(url, "/healthz")  # accepting again
        assert status == 200
    finally:
        for client in clients:
            client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    pauses = [r for r in caplog.records if "stopped accepting" in r.getMessage()]
    assert len(pauses) == 1 and pauses[0].exc_info is None
    assert "fdReserve 40" in pauses[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# ------------------------------------------------------------------ malformed requests

MARKER = b"SECRET-MARKER"
MALFORMED = {
    "request line": b"GARBAGE " + MARKER + b"\r\n\r\n",
    "method": MARKER + b"\x01 / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "header": b"GET / HTTP/1.1\r\nHost: localhost\r\nBad " + MARKER + b"\r\n\r\n",
    "line too long": b"GET /" + MARKER * 1000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "tls on http": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + MARKER + b"\r\n\r\n",
}


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_request_gets_a_quiet_json_400(
    stack: Stack, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    url = await applied(stack, config(""))
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    reader, writer = await connect(url)
    writer.write(MALFORMED[kind])
    async with asyncio.timeout(10):
        raw = await reader.read(-1)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:])}
    assert lines[0].split()[1] == "400"
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "cronstable"
    assert json.loads(body)["error"] == "malformed request"
    assert MARKER not in raw and b"SECRET" not in raw
    records = [r for r in caplog.records if r.name.startswith(("cronstable", "aiohttp"))]
    assert [(r.name, r.levelno) for r in records] == [("cronstable.web.protocol", logging.DEBUG)]
    assert records[0].exc_info is None and "SECRET" not in records[0].getMessage()


# ------------------------------------------------------------------ the throttled log


@pytest.mark.asyncio
async def test_a_throttled_log_writes_a_line_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="test.throttle")
    log = ThrottledLog(logging.getLogger("test.throttle"), logging.INFO,
                       "%(count)d (%(kinds)s)", interval=0.3)  # fmt: skip
    log.add("EMFILE")
    for _ in range(500):
        log.add("EMFILE")
    log.add("ECONNABORTED")
    assert [r.getMessage() for r in caplog.records] == ["1 (EMFILE)"]
    await until(lambda: len(caplog.records) == 2, what="the interval's line")
    assert caplog.records[1].getMessage() == "501 (EMFILE ×500, ECONNABORTED)"
    await asyncio.sleep(0.5)
    assert len(caplog.records) == 2 and log.total == 502
    log.add()
    assert caplog.records[-1].getMessage() == "1 (-)"  # a quiet interval passed: at once
    log.close()
