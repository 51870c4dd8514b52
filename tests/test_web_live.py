"""The dashboard's data routes and page over real sockets: /jobs/{name}/next, /events, /."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from web_stack import Stack

from cronstable.runtime import events as runtime_events
from cronstable.runtime.events import Event
from cronstable.web import events as web_events

pytestmark = pytest.mark.timeout(60)

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {name: viewer, value: read-secret, scopes: [read]}
    - {name: ci, value: ci-secret, scopes: [read, trigger]}
jobs:
  - name: every six hours
    command: echo tick
    schedule: "0 */6 * * *"
    timezone: UTC
  - name: hello
    command: echo hi
    schedule: "@yearly"
"""
READ = {"Authorization": "Bearer read-secret"}
CI = {"Authorization": "Bearer ci-secret"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    assert (await s.apply(CONFIG)).outcome == "applied"
    yield s
    await s.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with http.get(url, **kwargs) as response:
        return response.status, await response.json()


# ------------------------------------------------------------ GET /jobs/{name}/next


@pytest.mark.asyncio
async def test_next_lists_the_fires_of_the_coming_hours(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    base = stack.url()
    status, body = await get(http, f"{base}/jobs/every%20six%20hours/next", headers=READ)
    assert status == 200
    assert body["job"] == "every six hours" and body["bands"] is None and body["complete"]
    assert len(body["fires"]) == 4
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT(00|06|12|18):00:00Z", f) for f in body["fires"])
    status, body = await get(http, f"{base}/jobs/every%20six%20hours/next?hours=6.5", headers=READ)
    assert status == 200 and 1 <= len(body["fires"]) <= 2
    assert (await get(http, f"{base}/jobs/hello/next?hours=1", headers=READ))[1]["fires"] == []
    disabled = CONFIG.replace(
        'schedule: "0 */6 * * *"', 'schedule: "0 */6 * * *"\n    enabled: false'
    )
    assert (await stack.apply(disabled)).outcome == "applied"
    status, body = await get(http, f"{base}/jobs/every%20six%20hours/next", headers=READ)
    assert (status, body["enabled"], body["fires"]) == (200, False, [])


@pytest.mark.asyncio
async def test_next_refuses_a_bad_window_an_unknown_job_and_no_token(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    base = stack.url()
    for hours in ("0", "-1", "abc", "nan", "169", "inf"):
        status, body = await get(http, f"{base}/jobs/hello/next?hours={hours}", headers=READ)
        assert status == 400 and "hours must be a number" in body["error"], hours
    status, body = await get(http, f"{base}/jobs/nobody/next", headers=READ)
    assert (status, body["error"]) == (404, "no job named 'nobody'")
    status, body = await get(http, f"{base}/jobs/hello/next")
    assert (status, body["missingScope"]) == (401, "read")


# ------------------------------------------------------------ GET /events


class Reader:
    """An /events client that collects what it reads."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.comments: list[str] = []
        self.ended = asyncio.Event()
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        kind = "message"
        try:
            async for raw in self.response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    self.changed.set()
                elif line.startswith("event: "):
                    kind = line[len("event: ") :]
                elif line.startswith("data: "):
                    self.events.append((kind, json.loads(line[len("data: ") :])))
                    self.changed.set()
        except aiohttp.ClientPayloadError:
            pass
        finally:
            self.ended.set()
            self.changed.set()

    async def wait_for(self, predicate: Any, timeout: float = 15) -> None:
        async with asyncio.timeout(timeout):
            while not predicate(self):
                self.changed.clear()
                await self.changed.wait()


@pytest.mark.asyncio
async def test_events_tell_of_runs_and_revisions(stack: Stack, http: aiohttp.ClientSession) -> None:
    base = stack.url()
    async with http.get(f"{base}/events", headers=READ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        reader = Reader(response)
        await reader.wait_for(lambda r: "connected" in r.comments)
        async with http.post(f"{base}/jobs/hello/start", headers=CI) as started:
            run = (await started.json())["run"]
        await reader.wait_for(lambda r: any(kind == "run-ended" for kind, _ in r.events))
        [(first, began), (second, ended)] = reader.events
        assert (first, began["id"], began["job"], began["manual"]) == (
            "run-started",
            run,
            "hello",
            True,
        )
        assert (second, ended["id"], ended["outcome"], ended["exitCode"]) == (
            "run-ended",
            run,
            "succeeded",
            0,
        )
        assert (await stack.apply(CONFIG.replace("echo hi", "echo hello"))).outcome == "applied"
        assert (await stack.apply(CONFIG + "  - nonsense\n")).outcome == "rejected"
        await reader.wait_for(lambda r: len(r.events) == 4)
        (applied, data), (rejected, problem) = reader.events[2:]
        assert applied == "revision-applied" and data["jobSetId"].startswith("v1:")
        assert rejected == "revision-rejected" and problem["errors"]
        # the daemon stopping ends the stream (no wait for the shutdown timeout)
        await stack.web.close()
        async with asyncio.timeout(3):
            await reader.ended.wait()


@pytest.mark.asyncio
async def test_events_send_a_heartbeat(
    stack: Stack, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_events, "HEARTBEAT", 0.05)
    async with http.get(f"{stack.url()}/events", headers=READ) as response:
        reader = Reader(response)
        await reader.wait_for(lambda r: r.comments.count("heartbeat") >= 2)
        reader.task.cancel()


@pytest.mark.asyncio
async def test_a_slow_client_is_dropped_and_never_holds_up_the_daemon(
    stack: Stack, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_events, "QUEUE_SIZE", 8)
    hub = stack.daemon.events
    host, port = stack.url().removeprefix("http://").split(":")
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(slow, (host, int(port)))
    request = "GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer read-secret\r\n\r\n"
    await loop.sock_sendall(slow, request.encode())
    try:
        async with http.get(f"{stack.url()}/events", headers=READ) as response:
            fast = Reader(response)
            await fast.wait_for(lambda r: "connected" in r.comments)
            async with asyncio.timeout(15):
                while len(hub._subscribers) < 2:
                    await asyncio.sleep(0.01)
            payload = "x" * 65536
            sent = 0
            # the slow client never reads: its socket buffers fill, then its queue, and the
            # hub drops it; the fast client, awaited after each event, gets every one
            while len(hub._subscribers) == 2:
                assert sent < 2000, "the slow client was never dropped"
                hub.publish(Event("test", {"n": sent, "pad": payload}))
                sent += 1
                await fast.wait_for(lambda r, n=sent: len(r.events) == n)
            for n in range(sent, sent + 5):
                hub.publish(Event("test", {"n": n, "pad": payload}))
            await fast.wait_for(lambda r: len(r.events) == sent + 5)
            assert [data["n"] for _, data in fast.events] == list(range(sent + 5))
            assert not fast.ended.is_set()
            fast.task.cancel()
    finally:
        slow.close()


@pytest.mark.asyncio
async def test_event_streams_are_bounded(stack: Stack, http: aiohttp.ClientSession) -> None:
    stack.daemon.events.max_subscribers = 1
    async with http.get(f"{stack.url()}/events", headers=READ) as first:
        reader = Reader(first)
        await reader.wait_for(lambda r: "connected" in r.comments)
        status, body = await get(http, f"{stack.url()}/events", headers=READ)
        assert status == 429 and "too many event streams" in body["error"]
        reader.task.cancel()


# ------------------------------------------------------------ GET /


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@pytest.mark.asyncio
async def test_the_page_is_static_and_allows_only_its_own_inline_code(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    # no token: the page holds no data, while the routes it reads need one
    async with http.get(f"{stack.url()}/") as response:
        assert response.status == 200 and response.content_type == "text/html"
        html = await response.text()
        csp = response.headers["Content-Security-Policy"]
    [script] = re.findall(r"<script>(.*?)</script>", html, re.S)
    [style] = re.findall(r"<style>(.*?)</style>", html, re.S)
    directives = dict(part.strip().split(" ", 1) for part in csp.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == _sha256(script)
    assert directives["style-src"] == _sha256(style)
    assert directives["connect-src"] == "'self'"
    assert "unsafe" not in csp
    assert not re.search(r"\ssrc=|\shref=\"http|style=\"|\son\w+=", html)  # nothing fetched
    assert "every six hours" not in html  # no data in the page
    assert (await get(http, f"{stack.url()}/status"))[0] == 401


def _function(script: str, name: str) -> str:
    """The text of the page script's function ``name`` (up to the next top-level one)."""
    match = re.search(rf"^(?:async )?function {name}\(.*?(?=^(?:async )?function |^// |\Z)",
                      script, re.S | re.M)  # fmt: skip
    assert match, f"no function {name} in the dashboard's script"
    return match.group(0)


@pytest.mark.asyncio
async def test_the_audit_tab_reads_the_fields_get_audit_answers(
    stack: Stack, http: aiohttp.ClientSession
) -> None:
    """The Audit tab shows GET /audit's newest entries: every field its script reads is one
    the route answers (an applied and a rejected revision), and it builds the rows from
    text nodes only, so an entry's text (an error quoting the file) is never markup."""
    bad = CONFIG + "  - {name: x, command: 'true', schedule: '<img src=x>'}\n"
    assert (await stack.apply(bad)).outcome == "rejected"
    async with http.get(f"{stack.url()}/") as response:
        html = await response.text()
    [script] = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert 'id="tab-audit"' in html and 'data-tab="audit"' in html
    assert 'api("/audit" + query)' in script
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", script)
    status, page = await get(http, f"{stack.url()}/audit?limit=1000", headers=READ)
    assert status == 200  # the dashboard's reads need the read scope only
    entries = {entry["outcome"]: entry for entry in page["entries"]}
    assert set(entries) == {"applied", "rejected"}
    assert "<img src=x>" in " ".join(entries["rejected"]["errors"])
    code = "".join(_function(script, name) for name in ("refreshAudit", "renderAudit"))
    for field in set(re.findall(r"\bentry\.(\w+)", code)):
        assert all(field in entry for entry in page["entries"]), field
    for field in set(re.findall(r"\baudit\.(\w+)", code)) | set(
        re.findall(r"\bstate\.audit\.(\w+)", code)
    ):
        assert field in page, field
    for field in set(re.findall(r"\bentry\.changes\.(\w+)", code)):
        assert field in entries["applied"]["changes"], field
    assert set(re.findall(r"\bentry\.(\w+)", code)) >= {
        "time", "outcome", "revision", "trigger", "jobSetId", "errors",
    }  # fmt: skip
    assert "nextCursor" in code and "cursor=" in code  # older pages through the cursor
