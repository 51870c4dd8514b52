"""The Host and Origin rules over real sockets: DNS rebinding and cross-origin pages refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from raw_http import exchange
from web_stack import Stack

from cronstable.web.hosts import is_loopback, origin_allowed, split_host

pytestmark = pytest.mark.timeout(60)

JOBS = """\
jobs:
  - {name: a, command: 'true', schedule: '@yearly'}
"""
SECRET = "hook-secret"


def config(extra: str = "") -> str:
    return f"web:\n  listen: [http://127.0.0.1:0]\n{extra}" + JOBS


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


def host_of(url: str) -> str:
    return url.removeprefix("http://")


@pytest.mark.asyncio
async def test_without_tokens_a_foreign_host_gets_421_on_every_route(stack: Stack) -> None:
    assert (await stack.apply(config())).outcome == "applied"
    base = stack.url()
    for path in ("/status", "/jobs/a/runs", "/events", "/", "/healthz", "/nowhere"):
        answer = await exchange(base, "GET", path, {"Host": "attacker.test"})
        assert answer.status == 421, path
        assert answer.headers["content-type"].startswith("application/json")
        error = answer.json()["error"]
        assert "web.allowedHosts" in error and "token" in error
        assert b"attacker" not in answer.body
    port = base.rsplit(":", 1)[1]
    for host in (
        host_of(base),
        f"localhost:{port}",
        "LOCALHOST",
        f"dash.localhost:{port}",
        "127.0.0.2",
        f"[::1]:{port}",
        "localhost.",
    ):
        answer = await exchange(base, "GET", "/status", {"Host": host})
        assert answer.status == 200, host
    for host in ("attacker.test:80", "localhost.attacker.test", "127.0.0.1.nip.io", "a b", "[x]"):
        assert (await exchange(base, "GET", "/status", {"Host": host})).status == 421, host


@pytest.mark.asyncio
async def test_allowed_hosts_and_the_listen_name_are_answered(stack: Stack) -> None:
    extra = "  allowedHosts: [cron.example.com, 'Ops.Example.com:8443']\n"
    assert (await stack.apply(config(extra))).outcome == "applied"
    base = stack.url()
    for host in (
        "cron.example.com",
        "cron.example.com:1234",
        "ops.example.com",
        "OPS.example.com.",
    ):
        assert (await exchange(base, "GET", "/status", {"Host": host})).status == 200, host
    assert (await exchange(base, "GET", "/status", {"Host": "example.com"})).status == 421
    # a listen URL naming a host: that name is the daemon's own
    listen = "web:\n  listen: [http://localhost:0]\n"
    assert (await stack.apply(listen + JOBS)).outcome == "applied"
    assert (await exchange(stack.url(), "GET", "/status", {"Host": "localhost"})).status == 200


@pytest.mark.asyncio
async def test_with_a_token_the_host_rule_does_not_apply(stack: Stack) -> None:
    assert (await stack.apply(config("  authToken: {value: t0ken}\n"))).outcome == "applied"
    base = stack.url()
    headers = {"Host": "cron.example.com"}
    assert (await exchange(base, "GET", "/status", headers)).status == 401
    headers["Authorization"] = "Bearer t0ken"
    assert (await exchange(base, "GET", "/status", headers)).status == 200


@pytest.mark.asyncio
async def test_a_unix_socket_takes_any_host(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    assert (await stack.apply(f"web:\n  listen: ['unix://{path}']\n" + JOBS)).outcome == "applied"
    connector = aiohttp.UnixConnector(path=str(path))
    async with aiohttp.ClientSession(connector=connector) as uds:
        async with uds.get("http://attacker.test/status") as response:
            assert response.status == 200


@pytest.mark.asyncio
async def test_the_signed_webhook_is_not_held_to_the_host_rule(stack: Stack) -> None:
    """GitHub reaches the daemon by its public name; the signature is what counts there."""
    extra = f"  webhooks: {{github: {{secret: {{value: {SECRET}}}}}}}\n"
    assert (await stack.apply(config(extra))).outcome == "applied"
    answer = await exchange(
        stack.url(),
        "POST",
        "/webhooks/github",
        {"Host": "cron.example.com", "Content-Type": "application/json", "Content-Length": "2"},
        b"{}",
    )
    assert (answer.status, answer.json()["error"]) == (401, "missing or wrong X-Hub-Signature-256")


@pytest.mark.asyncio
@pytest.mark.parametrize("tokens", ["", "  authToken: {value: t0ken}\n"])
async def test_a_page_of_another_origin_gets_403_on_every_route(stack: Stack, tokens: str) -> None:
    assert (await stack.apply(config(tokens))).outcome == "applied"
    base = stack.url()
    own = {"Host": host_of(base)} | ({"Authorization": "Bearer t0ken"} if tokens else {})
    for origin in ("http://attacker.test", "null", f"https://{host_of(base)}", "http://127.0.0.1"):
        for method, path in (("GET", "/status"), ("GET", "/events"), ("POST", "/jobs/a/start")):
            answer = await exchange(base, method, path, own | {"Origin": origin})
            assert answer.status == 403, (origin, path)
            error = answer.json()["error"]
            assert "another origin" in error and "web.allowedHosts" in error
            assert b"attacker" not in answer.body
    # the page's own origin, and no Origin at all, are answered
    same = own | {"Origin": base}
    assert (await exchange(base, "GET", "/status", same)).status == 200
    assert (await exchange(base, "GET", "/status", own)).status == 200
    if tokens:
        assert (await exchange(base, "POST", "/jobs/a/start", same)).status == 202


@pytest.mark.asyncio
async def test_an_allowed_host_may_be_the_origin_of_a_proxied_page(stack: Stack) -> None:
    extra = "  allowedHosts: [cron.example.com]\n  authToken: {value: t0ken}\n"
    assert (await stack.apply(config(extra))).outcome == "applied"
    headers = {
        "Host": host_of(stack.url()),
        "Origin": "https://cron.example.com",
        "Authorization": "Bearer t0ken",
    }
    assert (await exchange(stack.url(), "GET", "/status", headers)).status == 200


def test_host_headers_split() -> None:
    assert split_host("Example.COM:8080") == ("example.com", 8080)
    assert split_host("[::1]:80") == ("::1", 80)
    assert split_host("[::1]") == ("::1", None)
    assert split_host("host.") == ("host", None)
    for bad in ("", "a:b", "[::1", "[nothost]:1", "a b", "x:123456", "a/b", "u@h", ":80"):
        assert split_host(bad) is None, bad
    assert [
        h
        for h in ("localhost", "x.localhost", "127.9.9.9", "::1", "::ffff:127.0.0.1")
        if is_loopback(h)
    ] == ["localhost", "x.localhost", "127.9.9.9", "::1", "::ffff:127.0.0.1"]
    assert not any(is_loopback(h) for h in ("localhost.test", "128.0.0.1", "::2", "0.0.0.0"))
    none: frozenset[str] = frozenset()
    assert origin_allowed(None, "http", "h:1", none)
    assert origin_allowed("http://h:1", "http", "H:1", none)
    assert origin_allowed("http://h", "http", "h:80", none)
    assert origin_allowed("https://h", "https", "h:443", none)
    assert not origin_allowed("http://h:2", "http", "h:1", none)
    assert not origin_allowed("https://h:1", "http", "h:1", none)
    assert not origin_allowed("http://h:1", "http", None, none)
    assert not origin_allowed("http://h:x", "http", "h:1", none)
    assert not origin_allowed("http://h:1/path", "http", "h:1", none)
    assert origin_allowed("https://proxy.example", "http", "h:1", frozenset({"proxy.example"}))
