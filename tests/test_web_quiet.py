"""Quiet, typed answers: JSON errors quoting nothing, HEAD on every GET route, 405 with
Allow, and a Server header without versions, over real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from raw_http import Connection, exchange
from web_stack import Stack

from cronstable.web.answers import shown
from cronstable.web.routes import ROUTES

pytestmark = pytest.mark.timeout(60)

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authToken: {value: t0ken}
  webhooks: {github: {secret: {value: hook}}}
jobs:
  - {name: a, command: 'true', schedule: '@yearly'}
"""
TOKEN = {"Authorization": "Bearer t0ken"}
MARK = "EchoMark"


@pytest_asyncio.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    stack = Stack(tmp_path)
    await stack.start()
    assert (await stack.apply(CONFIG)).outcome == "applied"
    yield stack.url()
    await stack.stop()


def get_paths() -> list[str]:
    return [r.path.replace("{name}", "a") for r in ROUTES if r.method == "GET"]


@pytest.mark.asyncio
async def test_head_answers_every_get_route_like_get_without_a_body(base: str) -> None:
    host = {"Host": base.removeprefix("http://"), "Connection": "close"}
    for path in get_paths():
        connection = await Connection.open(base)
        try:
            await connection.request("HEAD", path, host | TOKEN)
            head = await connection.answer(head=True)
            assert await connection.rest() == b"", f"HEAD {path} sent a body"
        finally:
            await connection.close()
        if path == "/events":  # a GET would stream; HEAD names what it would be
            assert head.status == 200
            assert head.headers["content-type"] == "text/event-stream"
            continue
        got = await exchange(base, "GET", path, host | TOKEN)
        assert head.status == got.status, path
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.headers["server"] == "cronstable"
    # and without a token, HEAD is refused as GET is
    assert (await exchange(base, "HEAD", "/status", host)).status == 401
    assert (await exchange(base, "HEAD", "/healthz", host)).status == 200


@pytest.mark.asyncio
async def test_unknown_methods_get_405_with_allow(base: str) -> None:
    # (a method the parser does not know is a malformed request line: not this layer's)
    cases = {
        ("PUT", "/status"): "GET,HEAD",
        ("GET", "/reload"): "POST",
        ("OPTIONS", "/"): "GET,HEAD",
    }
    for (method, path), allow in cases.items():
        answer = await exchange(base, method, path, TOKEN | {"Content-Length": "0"})
        assert (answer.status, answer.headers["allow"]) == (405, allow), (method, path)
        body = answer.json()
        assert body["allowed"] == allow.split(",")
        assert method not in body["error"]


@pytest.mark.asyncio
async def test_every_answer_names_no_versions(base: str) -> None:
    requests = [
        ("GET", "/version", TOKEN),
        ("GET", "/status", {}),
        ("GET", "/", {}),
        ("GET", "/nowhere", {}),
        ("DELETE", "/status", TOKEN),
        ("POST", "/webhooks/github", {}),
        ("GET", "/status", TOKEN | {"Origin": "http://attacker.test"}),
    ]
    for method, path, headers in requests:
        answer = await exchange(base, method, path, headers | {"Content-Length": "0"})
        assert answer.headers["server"] == "cronstable", (method, path, answer.headers)
    connection = await Connection.open(base)
    try:
        await connection.request("GET", "/events", TOKEN)
        stream = await connection.answer(head=True)
        assert (stream.status, stream.headers["server"]) == (200, "cronstable")
    finally:
        await connection.close()


@pytest.mark.asyncio
async def test_errors_are_json_and_quote_nothing_of_the_request(base: str) -> None:
    odd = f"{MARK}\x1b]0;title\x07" + "x" * 200
    requests = [
        ("GET", f"/{MARK}", TOKEN, b""),
        ("GET", f"/jobs/a/next?hours={MARK}", TOKEN, b""),
        ("POST", f"/jobs/a/cancel?run={MARK}", TOKEN, b""),
        ("PATCH", f"/status?{MARK}", TOKEN, b""),
        ("GET", "/status", {"Authorization": f"Bearer {MARK}"}, b""),
        ("GET", "/status", TOKEN | {"Origin": f"http://{MARK}.test"}, b""),
        ("POST", "/webhooks/github", {"Content-Type": f"text/{MARK}"}, b"{}"),
        (
            "POST",
            "/webhooks/github",
            {"X-Hub-Signature-256": "sha256=" + "0" * 64, "Content-Type": "application/json"}
            | {"X-GitHub-Event": MARK},
            b"{}",
        ),
        (
            "POST",
            "/webhooks/github",
            {"X-Hub-Signature-256": f"sha256={MARK}", "Content-Type": "application/json"},
            b"{}",
        ),
        (
            "POST",
            "/webhooks/github",
            {"X-Hub-Signature-256": "sha256=" + "0" * 64, "Content-Type": "application/json"}
            | {"X-GitHub-Event": "push", "X-GitHub-Delivery": f"{MARK} 1"},
            b"{}",
        ),
        (
            "POST",
            "/webhooks/github",
            {"X-Hub-Signature-256": "sha256=" + "0" * 64, "Content-Type": "application/json"}
            | {"X-GitHub-Event": "push"},
            f'{{"{MARK}": 1}}'.encode(),
        ),
    ]
    for method, path, headers, body in requests:
        sent = headers | {"Content-Length": str(len(body))}
        answer = await exchange(base, method, path, sent, body)
        assert 400 <= answer.status < 500, (method, path, answer.status)
        assert answer.headers["content-type"].startswith("application/json"), (method, path)
        assert isinstance(answer.json()["error"], str)
        assert MARK.lower().encode() not in answer.body.lower(), (method, path, answer.body)
    # a job name from the URL is shown only escaped and cut short
    answer = await exchange(
        base, "GET", "/jobs/" + odd.replace("\x1b", "%1b").replace("\x07", "%07") + "/runs", TOKEN
    )
    assert answer.status == 404
    assert answer.json()["error"] == f"no job named '{shown(odd)}'"
    assert "\x1b" not in answer.json()["error"] and len(answer.json()["error"]) < 100


def test_shown_escapes_and_cuts() -> None:
    assert shown("nightly backup") == "nightly backup"
    assert shown("sauvegarde é") == "sauvegarde é"
    assert shown("a\nb\x1b[2J") == "a\\nb\\x1b[2J"
    assert shown("x" * 100) == "x" * 64 + "…"
