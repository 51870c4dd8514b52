"""Request bodies over real sockets: the webhook refuses on its headers before reading a
byte, shares one byte budget, and every route reads a body within web.bodyTimeout."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from raw_http import Connection, exchange
from web_stack import Stack

from cronstable.web import encode

pytestmark = pytest.mark.timeout(60)

SECRET = "hook-secret"
CONFIG = f"""\
web:
  listen: [http://127.0.0.1:0]
  authToken: {{value: t0ken}}
  bodyTimeout: 1.5
  webhookMaxBodyBytes: 1K
  webhookBodyBudgetBytes: 2K
  webhooks: {{github: {{secret: {{value: {SECRET}}}}}}}
jobs:
  - {{name: a, command: 'true', schedule: '@yearly', enabled: false}}
"""
SIGNED = {
    "Content-Type": "application/json",
    "X-GitHub-Event": "ping",
    "X-GitHub-Delivery": "d-1",
    "X-Hub-Signature-256": "sha256=" + "0" * 64,
}


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    assert (await s.apply(CONFIG)).outcome == "applied"
    yield s
    await s.stop()


async def headers_only(base: str, headers: dict[str, str], declared: int = 1000) -> Connection:
    """A webhook request whose body never comes."""
    connection = await Connection.open(base)
    await connection.request(
        "POST", "/webhooks/github", headers | {"Content-Length": str(declared)}
    )
    return connection


@pytest.mark.asyncio
async def test_the_webhook_refuses_on_its_headers_without_waiting_for_the_body(
    stack: Stack,
) -> None:
    """No body byte is sent: an answer well before bodyTimeout shows none was waited for."""
    base = stack.url()
    cases = [
        ({k: v for k, v in SIGNED.items() if k != "X-Hub-Signature-256"}, 1000, 401, "missing"),
        (SIGNED | {"X-Hub-Signature-256": "sha256=abc"}, 1000, 401, "64 hex digits"),
        (SIGNED | {"X-Hub-Signature-256": "sha1=" + "0" * 40}, 1000, 401, "64 hex digits"),
        (SIGNED | {"Content-Type": "text/plain"}, 1000, 415, "application/json"),
        ({k: v for k, v in SIGNED.items() if k != "Content-Type"}, 1000, 415, "application/json"),
        ({k: v for k, v in SIGNED.items() if k != "X-GitHub-Event"}, 1000, 400, "missing"),
        (SIGNED | {"X-GitHub-Event": "push<script>"}, 1000, 400, "not a GitHub event"),
        (SIGNED | {"X-GitHub-Event": "not_an_event"}, 1000, 400, "not a GitHub event"),
        (SIGNED | {"X-GitHub-Delivery": "a b"}, 1000, 400, "X-GitHub-Delivery"),
        (SIGNED, 1025, 413, "larger than 1024 bytes"),
    ]
    for headers, declared, status, words in cases:
        started = time.monotonic()
        connection = await headers_only(base, headers, declared)
        try:
            answer = await connection.answer(timeout=1.0)
        finally:
            await connection.close()
        assert time.monotonic() - started < 1.0
        assert (answer.status, answer.headers["connection"]) == (status, "close"), headers
        assert words in answer.json()["error"], (headers, answer.json())


@pytest.mark.asyncio
async def test_in_flight_bodies_share_one_budget_then_503_with_retry_after(
    stack: Stack,
) -> None:
    base = stack.url()
    first = await headers_only(base, SIGNED, 1024)  # holds 1024 of the 2048 bytes
    chunked = await Connection.open(base)  # no length: it holds the whole limit, 1024
    await chunked.request("POST", "/webhooks/github", SIGNED | {"Transfer-Encoding": "chunked"})
    try:
        await first.send(b"{")  # both are being read now: their handlers hold the budget
        await chunked.send(b"1\r\n{\r\n")

        async def refused() -> bool:
            answer = await exchange(base, "POST", "/webhooks/github", SIGNED, b"{}")
            if answer.status != 503:
                return False
            assert answer.headers["retry-after"] == "5"
            assert "retry later" in answer.json()["error"]
            return True

        async with asyncio.timeout(10):
            while not await refused():
                await asyncio.sleep(0.05)
        # the first one ends (a wrong signature): its bytes are free again
        await first.send(b" " * 1022 + b"}")
        assert (await first.answer()).status == 401
        body = b'{"zen": "ok"}'
        answer = await exchange(
            base, "POST", "/webhooks/github", SIGNED | {"X-Hub-Signature-256": sign(body)}, body
        )
        assert (answer.status, answer.json()) == (200, {"action": "pong"})
        # a chunked body is counted as it arrives: past the limit, 413
        await chunked.send(b"400\r\n" + b" " * 1024 + b"\r\n")
        answer = await chunked.answer()
        assert answer.status == 413 and "1024" in answer.json()["error"]
    finally:
        await first.close()
        await chunked.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/webhooks/github", SIGNED),
        ("/jobs/a/start", {"Authorization": "Bearer t0ken", "Content-Type": "application/json"}),
    ],
)
async def test_a_body_trickled_past_body_timeout_gets_408_and_the_connection_closes(
    stack: Stack, path: str, headers: dict[str, str]
) -> None:
    connection = await Connection.open(stack.url())
    try:
        started = time.monotonic()
        await connection.request("POST", path, headers | {"Content-Length": "100"}, b"{")
        for _ in range(3):
            await asyncio.sleep(0.2)
            await connection.send(b" ")
        answer = await connection.answer(timeout=10)
        elapsed = time.monotonic() - started
        assert answer.status == 408 and "1.5 s" in answer.json()["error"]
        assert answer.headers["connection"] == "close"
        assert await connection.rest() == b""  # closed by the daemon
        assert elapsed >= 1.4
    finally:
        await connection.close()
    # the route never ran: the job was not started
    status = encode.status(stack.daemon.control.status())
    assert [job["lastRun"] for job in status["jobs"]] == [None]
    assert not encode.job_runs(stack.daemon.control.runs("a"))


@pytest.mark.asyncio
async def test_a_refused_request_whose_body_keeps_coming_is_closed_within_body_timeout(
    stack: Stack,
) -> None:
    """aiohttp drains the unread rest of a refused body before it closes, 10 s by default:
    here never longer than bodyTimeout (1.5 s), however long the sender keeps trickling."""
    unsigned = {k: v for k, v in SIGNED.items() if k != "X-Hub-Signature-256"}
    connection = await headers_only(stack.url(), unsigned, 1000)
    try:
        answer = await connection.answer(timeout=5)
        assert answer.status == 401
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 8:
            try:
                await connection.send(b" ")
            except ConnectionError:
                closed = True
                break
            if connection.reader.at_eof():
                closed = True
                break
            await asyncio.sleep(0.1)
        assert closed, "the daemon kept reading a refused body for 8 s"
    finally:
        await connection.close()


@pytest.mark.asyncio
async def test_other_routes_read_small_bodies_and_refuse_big_ones(stack: Stack) -> None:
    base = stack.url()
    token = {"Authorization": "Bearer t0ken"}
    answer = await exchange(base, "POST", "/reload", token, b"x" * 100)
    assert answer.status == 202
    connection = await Connection.open(base)
    try:
        await connection.request("POST", "/reload", token | {"Content-Length": str(1 << 20)})
        answer = await connection.answer(timeout=1.0)  # declared too big: refused unread
        assert (answer.status, answer.headers["connection"]) == (413, "close")
        assert "65536" in answer.json()["error"]
    finally:
        await connection.close()
    connection = await Connection.open(base)
    try:  # chunked, no length: counted as read
        await connection.request("POST", "/reload", token | {"Transfer-Encoding": "chunked"})
        await connection.send(b"10000\r\n" + b"x" * 0x10000 + b"\r\n1\r\nx\r\n0\r\n\r\n")
        assert (await connection.answer()).status == 413
    finally:
        await connection.close()
