"""``/mcp`` across revisions, on a real daemon core serving real HTTP (tests/web_stack.py):
turned on and off by revisions, its limits changed by one, idle sessions closed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from web_stack import Stack

pytestmark = pytest.mark.timeout(60)

WEB = """\
web:
  listen: [http://127.0.0.1:0]
  authToken: {value: admin-secret}
"""
JOBS = """\
jobs:
  - {name: greet, command: echo hi, schedule: "@yearly"}
"""
HEADERS = {
    "Authorization": "Bearer admin-secret",
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}


def config(mcp: str | None) -> str:
    return WEB + (f"  mcp: {mcp}\n" if mcp is not None else "") + JOBS


def rpc(method: str, params: dict[str, Any] | None = None, id: int | None = 1) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    return json.dumps(message)


INITIALIZE = rpc(
    "initialize",
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
)


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    await s.stop()


@pytest_asyncio.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def post(
    client: aiohttp.ClientSession, url: str, body: str, session: str | None = None
) -> tuple[int, str | None, Any]:
    headers = HEADERS | ({"Mcp-Session-Id": session} if session else {})
    async with client.post(f"{url}/mcp", data=body, headers=headers) as response:
        text = await response.text()
        try:
            answer = json.loads(text) if text else None
        except ValueError:
            answer = text
        return response.status, response.headers.get("Mcp-Session-Id"), answer


async def open_session(client: aiohttp.ClientSession, url: str) -> str:
    status, session, answer = await post(client, url, INITIALIZE)
    assert status == 200 and session, answer
    assert answer["result"]["serverInfo"]["name"] == "cronstable"
    status, _, _ = await post(client, url, rpc("notifications/initialized", id=None), session)
    assert status == 202
    return session


@pytest.mark.asyncio
async def test_revisions_turn_mcp_on_and_off_and_set_its_limits(
    stack: Stack, client: aiohttp.ClientSession
) -> None:
    assert (await stack.apply(config(None))).outcome == "applied"
    url = stack.url()
    assert (await post(client, url, INITIALIZE))[0] == 404
    assert (await stack.apply(config("{enabled: true, maxSessions: 1}"))).outcome == "applied"
    first = await open_session(client, url)
    status, _, answer = await post(client, url, rpc("tools/list", id=2), first)
    assert status == 200 and len(answer["result"]["tools"]) == 9
    status, _, answer = await post(client, url, INITIALIZE)
    assert status == 503 and answer["error"]["message"] == "Too many open sessions"
    # a revision that allows two: the open session stays, one more fits
    assert (await stack.apply(config("{enabled: true, maxSessions: 2}"))).outcome == "applied"
    await open_session(client, url)
    status, _, answer = await post(client, url, rpc("tools/call", {"name": "list_jobs"}, 3), first)
    assert status == 200 and answer["result"]["structuredContent"]["jobs"][0]["name"] == "greet"
    # off: /mcp is gone with its sessions; on again: a new server, the old ids unknown
    assert (await stack.apply(config("{enabled: false}"))).outcome == "applied"
    assert (await post(client, url, rpc("tools/list"), first))[0] == 404
    assert (await stack.apply(config("{enabled: true}"))).outcome == "applied"
    assert (await post(client, url, rpc("tools/list"), first))[0] == 404
    fresh = await open_session(client, url)
    assert stack.web.mcp.server is not None and stack.web.mcp.server.sessions == 1
    status, _, answer = await post(client, url, rpc("tools/call", {"name": "nope"}, 4), fresh)
    assert status == 200 and answer["result"]["isError"] is True
    metrics = stack.daemon.control.metrics_text()[0].decode()
    assert "cronstable_mcp_sessions 1.0" in metrics
    assert 'cronstable_mcp_tool_calls_total{outcome="ok",tool="list_jobs"} 1.0' in metrics
    assert 'cronstable_mcp_tool_calls_total{outcome="refused",tool="unknown"} 1.0' in metrics


@pytest.mark.asyncio
async def test_an_idle_session_is_closed(stack: Stack, client: aiohttp.ClientSession) -> None:
    assert (await stack.apply(config("{enabled: true, sessionIdleTimeout: 0.5}"))).outcome == (
        "applied"
    )
    url = stack.url()
    session = await open_session(client, url)

    async def gone() -> bool:
        return stack.web.mcp.server.sessions == 0  # type: ignore[no-any-return]

    await until(gone, 10, "the idle session was closed")
    status, _, answer = await post(client, url, rpc("tools/list"), session)
    assert status == 404 and answer["error"]["message"] == "Session not found"
    await open_session(client, url)  # its client starts a new one
