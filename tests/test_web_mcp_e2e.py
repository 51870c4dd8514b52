"""End to end: an MCP client (the official SDK's streamable-HTTP client and ClientSession)
against a real `cronstable run` following a git remote (`git daemon` on loopback).

One daemon serves the module: it follows ``main`` of a repository whose configuration
enables ``web.mcp`` with two sessions at most.  A last test starts a daemon whose MCP
SDK cannot be imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from daemon_proc import DaemonProcess, http, until, wait_for, write_config
from git_server import GitDaemon, WorkRepo
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authTokens:
    - {name: ops, value: ops-secret, scopes: [read, trigger]}
    - {name: reader, value: read-secret, scopes: [read]}
  mcp: {enabled: true, maxSessions: 2, sessionIdleTimeout: 120}
jobs:
  - name: greet
    command: echo hello from mcp
    schedule: "@yearly"
    captureStdout: true
"""
OPS, READER = "ops-secret", "read-secret"
ACCEPT = "application/json, text/event-stream"


class Served:
    def __init__(self, daemon: DaemonProcess, repo: WorkRepo, url: str) -> None:
        self.daemon, self.repo, self.url = daemon, repo, url
        self.mcp = f"{url}/mcp"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("mcp")
    origin = root / "origin"
    origin.mkdir()
    repo = WorkRepo.create(origin, "cron")
    repo.commit({"cronstable.yaml": CONFIG})
    repo.push("HEAD:refs/heads/main")
    with GitDaemon(origin) as server:
        spec = f"{server.url('cron.git')}?interval=0.5"
        daemon = DaemonProcess(
            None, root / "daemon.log", args=["--source", spec, "--cache-dir", str(root / "cache")]
        )
        daemon.start()
        try:
            yield Served(daemon, repo, daemon.url())
        finally:
            daemon.stop(20)


@contextlib.asynccontextmanager
async def session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(20)) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as opened:
                await opened.initialize()
                yield opened


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    return http(url, "POST", body=body, headers=headers)


def rpc(method: str, params: dict[str, Any] | None = None, id: int = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


INITIALIZE = rpc(
    "initialize",
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
)


@pytest.mark.asyncio
async def test_a_client_lists_tools_and_jobs_starts_one_and_reads_its_output(
    served: Served,
) -> None:
    async with session(served.mcp, OPS) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert sorted(tools) == sorted(
            ["list_jobs", "job_status", "job_runs", "next_fires", "explain_rejection",
             "diff_revision", "start_job", "cancel_run", "reload"]
        )  # fmt: skip
        assert tools["start_job"].input_schema["required"] == ["job"]
        listed = await mcp.call_tool("list_jobs", {})
        assert not listed.is_error
        [job] = listed.structured_content["jobs"]
        assert (job["name"], job["running"], job["lastRun"]) == ("greet", [], None)
        started = await mcp.call_tool("start_job", {"job": "greet"})
        assert not started.is_error, started.content
        run = started.structured_content["run"]

        async def finished() -> Any:
            result = await mcp.call_tool("job_runs", {"job": "greet"})
            runs = result.structured_content["runs"]
            return result.structured_content if runs and runs[0]["outcome"] != "running" else None

        answer = await until(finished, 20, "the run finished")
        [done] = answer["runs"]
        assert (done["id"], done["outcome"], done["stdout"]) == (run, "succeeded", "hello from mcp")
        # the tool's result is the route's answer
        status, _, body = http(f"{served.url}/jobs/greet/runs", headers=bearer(READER))
        assert (status, body) == (200, answer)
        fires = await mcp.call_tool("next_fires", {"job": "greet", "hours": 24})
        assert not fires.is_error and fires.structured_content["fires"] == []
    log = served.daemon.current()
    assert "MCP start_job (job greet) by ops from 127.0.0.1" in log


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.asyncio
async def test_scopes_are_those_of_the_http_api(served: Served) -> None:
    async with session(served.mcp, READER) as mcp:
        assert not (await mcp.call_tool("list_jobs", {})).is_error
        refused = await mcp.call_tool("start_job", {"job": "greet"})
        assert refused.is_error
        assert refused.structured_content == {
            "error": "the token 'reader' lacks scope 'trigger'",
            "missingScope": "trigger",
            "status": 403,
        }
    async with session(served.mcp, OPS) as mcp:
        refused = await mcp.call_tool("reload", {})
        assert refused.is_error and refused.structured_content["status"] == 403
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    status, got, body = post(served.mcp, INITIALIZE, headers)
    assert (status, body["missingScope"]) == (401, "read")
    assert got["WWW-Authenticate"] == 'Bearer realm="cronstable"'
    status, _, body = post(served.mcp, INITIALIZE, headers | bearer("wrong"))
    assert (status, body["error"]) == (401, "the token is not valid")
    runs = http(f"{served.url}/jobs/greet/runs", headers=bearer(READER))[2]["runs"]
    assert all(run["manual"] for run in runs)  # the refused start started nothing more
    assert len(runs) <= 1


@pytest.mark.asyncio
async def test_at_most_max_sessions_are_open(served: Served) -> None:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT} | bearer(READER)
    async with session(served.mcp, READER) as first, session(served.mcp, OPS) as second:
        status, _, body = post(served.mcp, INITIALIZE, headers)
        assert status == 503 and "Too many open sessions" in json.dumps(body)
        assert not (await first.call_tool("list_jobs", {})).is_error  # the open ones go on
        assert not (await second.call_tool("list_jobs", {})).is_error
    # both ended (the client deletes its session on the way out): room again
    status, got, _ = post(served.mcp, INITIALIZE, headers)
    assert status == 200
    session_id = next(v for k, v in got.items() if k.lower() == "mcp-session-id")
    # a session answers only the token that opened it
    other = headers | bearer(OPS) | {"Mcp-Session-Id": session_id}
    assert post(served.mcp, rpc("tools/list", id=2), other)[0] == 404
    ended = http(served.mcp, "DELETE", headers=bearer(READER) | {"Mcp-Session-Id": session_id})
    assert ended[0] == 200


@pytest.mark.asyncio
async def test_the_sessionless_protocol_revision_is_served_and_checked_alike(
    served: Served,
) -> None:
    headers = bearer(READER)
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(20)) as client:
        transport = streamable_http_client(served.mcp, http_client=client)
        async with Client(transport, mode="2026-07-28") as mcp:
            listed = await mcp.call_tool("list_jobs", {})
            assert not listed.is_error and listed.structured_content["jobs"][0]["name"] == "greet"
            refused = await mcp.call_tool("start_job", {"job": "greet"})
            assert refused.is_error and refused.structured_content["status"] == 403
            with pytest.raises(MCPError, match="Method not found"):  # no stream to hold open
                async with asyncio.timeout(20), mcp.listen(tools_list_changed=True):
                    pass


def test_malformed_requests_get_4xx_and_no_traceback(served: Served) -> None:
    json_headers = {"Content-Type": "application/json", "Accept": ACCEPT} | bearer(READER)
    cases: list[tuple[str, str, bytes | None, dict[str, str], int]] = [
        ("not JSON", "POST", b"{nope", json_headers, 400),
        ("not JSON-RPC", "POST", b'{"hello": 1}', json_headers, 400),
        ("an array of nonsense", "POST", b"[1, 2]", json_headers, 400),
        ("a text body", "POST", b"hi", json_headers | {"Content-Type": "text/plain"}, 400),
        ("no Accept", "POST", INITIALIZE, {"Content-Type": "application/json"}
         | bearer(READER), 406),
        ("an unknown session", "POST", rpc("tools/list"), json_headers
         | {"Mcp-Session-Id": "f" * 32}, 404),
        ("a body too large", "POST", b" " * (65 * 1024), json_headers, 413),
        ("an event stream", "GET", None, bearer(READER) | {"Accept": "text/event-stream"}, 405),
        ("another method", "PUT", b"{}", json_headers, 405),
    ]  # fmt: skip
    for what, method, body, headers, expected in cases:
        status, _, _ = http(served.mcp, method, body=body, headers=headers)
        assert status == expected, what
    status, got, _ = http(served.mcp, "GET", headers=bearer(READER))
    assert got["Allow"] == "DELETE, POST"
    assert http(f"{served.url}/healthz")[0] == 200
    assert "Traceback" not in served.daemon.current()


@pytest.mark.asyncio
async def test_diff_and_rejection_of_revisions_pushed_to_the_repository(served: Served) -> None:
    repo = served.repo
    repo.checkout("feature", create=True)
    changed = (
        CONFIG.replace("@yearly", "@hourly")
        + "  - {name: new, command: 'true', schedule: '@daily'}\n"
    )
    feature = repo.commit({"cronstable.yaml": changed})
    repo.push("HEAD:refs/heads/feature")
    repo.checkout("main")
    main_revision = repo.rev_parse("HEAD")
    async with session(served.mcp, READER) as mcp:
        result = await mcp.call_tool("diff_revision", {"ref": "feature"})
        assert not result.is_error, result.content
        diff = result.structured_content
        assert (diff["ref"], diff["revision"], diff["loads"]) == ("feature", feature, True)
        plan = diff["plan"]
        assert (plan["from"]["revision"], plan["to"]["revision"]) == (main_revision, feature)
        assert [(j["name"], j["change"]) for j in plan["jobs"]] == [
            ("new", "added"),
            ("greet", "changed"),
        ]
        # the daemon plans with what it knows itself: nothing is left unknown
        assert plan["timeEffects"]["facts"] == "this daemon"
        assert plan["timeEffects"]["unknown"] == []
        missing = await mcp.call_tool("diff_revision", {"ref": "no-such-branch"})
        assert missing.is_error and missing.structured_content["status"] == 409
        # a broken revision pushed to main: rejected, and the tool says why
        broken = repo.commit({"cronstable.yaml": CONFIG + "  - {name: bad, command: x}\n"})
        repo.push("HEAD:refs/heads/main")

        async def rejected() -> Any:
            result = await mcp.call_tool("explain_rejection", {})
            last = result.structured_content["lastRejected"]
            return result.structured_content if last and last["revision"] == broken else None

        why = await until(rejected, 20, "the broken revision was rejected")
        assert why["applied"]["revision"] == main_revision
        errors = why["lastRejected"]["errors"]
        assert any("jobs[1]" in error and "schedule" in error for error in errors), errors
    fixed = repo.commit({"cronstable.yaml": CONFIG})
    repo.push("HEAD:refs/heads/main")
    wait_for(
        lambda: (
            http(f"{served.url}/status", headers=bearer(READER))[2]["applied"]["revision"] == fixed
        ),
        20,
        "the fixed revision is applied",
    )


def test_a_daemon_without_the_sdk_rejects_a_revision_that_enables_mcp(
    tmp_path: Path, daemon_procs: list[DaemonProcess]
) -> None:
    stub = tmp_path / "stub" / "mcp"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'mcp\'", name="mcp")\n'
    )
    paths = [str(tmp_path / "stub"), *filter(None, [os.environ.get("PYTHONPATH")])]
    without = CONFIG.replace(
        "  mcp: {enabled: true, maxSessions: 2, sessionIdleTimeout: 120}\n", ""
    )
    conf = write_config(tmp_path / "conf", without)
    daemon = DaemonProcess(
        conf, tmp_path / "daemon.log", env=os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    )
    daemon_procs.append(daemon.start())
    url = daemon.url()
    applied = http(f"{url}/status", headers=bearer(READER))[2]["applied"]["revision"]
    time.sleep(0.05)  # a new modification time for the watch
    (conf / "cronstable.yaml").write_text(CONFIG)
    daemon.wait_log(r"rejected \(1 problem")
    status = http(f"{url}/status", headers=bearer(READER))[2]
    assert status["applied"]["revision"] == applied  # the last good revision runs on
    [problem] = status["lastRejected"]["errors"]
    assert "web.mcp.enabled" in problem and "cronstable.yaml" in problem
    assert "pip install 'cronstable[mcp]'" in problem
    assert http(f"{url}/mcp", "POST", body=INITIALIZE, headers=bearer(READER))[0] == 404
    assert daemon.stop() == 0
