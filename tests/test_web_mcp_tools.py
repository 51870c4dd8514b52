"""The MCP tools without the protocol (cronstable.web.mcp.tools and .schemas): scopes,
arguments, and each result checked against its tool's output schema, asked of a real
daemon core (tests/web_stack.py)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import pytest_asyncio
from daemon_proc import until
from web_stack import Stack

from cronstable.web import calls
from cronstable.web.auth import Token
from cronstable.web.calls import Refused
from cronstable.web.mcp import tools
from cronstable.web.mcp.schemas import BY_NAME, TOOLS

pytestmark = pytest.mark.timeout(60)

CONFIG = """\
jobs:
  - name: greet
    command: echo hello
    schedule: "*/5 * * * *"
    captureStdout: true
  - name: nap
    command: sleep 30
    schedule: "@yearly"
    killTimeout: 1
"""
OPS = Token("ops", b"x", frozenset({"read", "trigger"}))
READER = Token("reader", b"y", frozenset({"read"}))
ADMIN = Token("admin", b"z", frozenset({"admin"}))


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    assert (await s.apply(CONFIG)).outcome == "applied"
    yield s
    await s.stop()


def checked(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result``, after checking it against the tool's output schema (as a client does)."""
    jsonschema.validate(result, BY_NAME[name].output)
    return result


def test_every_schema_is_a_json_schema_and_every_tool_names_a_scope() -> None:
    assert [tool.name for tool in TOOLS] == [
        "list_jobs", "job_status", "job_runs", "next_fires", "explain_rejection",
        "diff_revision", "start_job", "cancel_run", "reload",
    ]  # fmt: skip
    for tool in TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool.input_schema())
        jsonschema.Draft202012Validator.check_schema(tool.output)
        assert tool.output["type"] == "object"  # MCP's structured content is an object
        assert tool.scope in ("read", "trigger", "reload")
        assert tool.read_only == (tool.scope == "read")
    scopes = {tool.name: tool.scope for tool in TOOLS if tool.scope != "read"}
    assert scopes == {"start_job": "trigger", "cancel_run": "trigger", "reload": "reload"}


def test_scopes_as_on_the_http_api() -> None:
    start, reload, runs = BY_NAME["start_job"], BY_NAME["reload"], BY_NAME["job_runs"]
    assert tools.scope_refusal(runs, None) is None  # a local peer, no token configured
    refusal = tools.scope_refusal(start, None)
    assert refusal is not None and (refusal.status, refusal.extra) == (
        401,
        {"missingScope": "trigger"},
    )
    refusal = tools.scope_refusal(start, READER)
    assert refusal is not None and refusal.status == 403
    assert refusal.message == "the token 'reader' lacks scope 'trigger'"
    assert tools.scope_refusal(start, OPS) is None
    assert tools.scope_refusal(reload, OPS) is not None
    assert all(tools.scope_refusal(tool, ADMIN) is None for tool in TOOLS)


def test_arguments_are_checked_and_defaulted() -> None:
    fires = BY_NAME["next_fires"]
    assert tools.arguments(fires, {"job": "a"}) == {"job": "a", "hours": calls.DEFAULT_HOURS}
    assert tools.arguments(fires, {"job": "a", "hours": 2}) == {"job": "a", "hours": 2}
    assert tools.arguments(BY_NAME["list_jobs"], None) == {
        "limit": calls.JOBS_PAGE,
        "cursor": None,
    }
    for given, message in [
        ({}, "next_fires needs the argument 'job'"),
        ({"job": 1}, "the argument 'job' must be a string"),
        ({"job": "a", "hours": "2"}, "the argument 'hours' must be a number"),
        ({"job": "a", "hours": True}, "the argument 'hours' must be a number"),
        ({"job": "a", "hours": math.inf}, "the argument 'hours' must be a number"),
        ({"job": "a", "days": 2}, "next_fires takes no argument 'days'"),
    ]:
        with pytest.raises(Refused) as caught:
            tools.arguments(fires, given)
        assert (caught.value.status, caught.value.message) == (400, message)
    assert tools.arguments(BY_NAME["cancel_run"], {"job": "a"}) == {"job": "a", "run": None}


@pytest.mark.asyncio
async def test_each_tool_answers_what_its_route_answers(stack: Stack) -> None:
    daemon = stack.daemon.control
    listed = checked("list_jobs", await tools.call(daemon, "list_jobs", {}, READER))
    assert listed == {"jobs": calls.status(daemon)["jobs"], "jobCount": 2, "nextCursor": None}
    one = checked("job_status", await tools.call(daemon, "job_status", {"job": "nap"}, READER))
    assert one == listed["jobs"][1]
    fires = await tools.call(daemon, "next_fires", {"job": "greet", "hours": 1}, None)
    assert len(checked("next_fires", fires)["fires"]) == 12
    started = await tools.call(daemon, "start_job", {"job": "greet"}, OPS)
    assert checked("start_job", started)["run"].startswith("greet@")

    async def ended() -> Any:
        answer = await tools.call(daemon, "job_runs", {"job": "greet"}, READER)
        runs = answer["runs"]
        return answer if runs and runs[0]["outcome"] != "running" else None

    answer = checked("job_runs", await until(ended, what="the run ended"))
    assert answer == calls.runs(daemon, "greet")
    assert answer["runs"][0]["stdout"] == "hello"
    nap = (await tools.call(daemon, "start_job", {"job": "nap"}, ADMIN))["run"]

    async def going() -> Any:
        answer = await tools.call(daemon, "job_runs", {"job": "nap"}, READER)
        return answer if answer["runs"] else None

    answer = checked("job_runs", await until(going, what="the nap is running"))
    assert answer["runs"][0]["outcome"] == "running"
    cancelled = await tools.call(daemon, "cancel_run", {"job": "nap", "run": nap}, OPS)
    assert checked("cancel_run", cancelled) == {"job": "nap", "cancelled": [nap]}
    assert checked("reload", await tools.call(daemon, "reload", None, ADMIN)) == {
        "reload": "requested"
    }
    assert (await stack.apply(CONFIG + "  - {name: bad, command: x}\n")).outcome == "rejected"
    why = checked("explain_rejection", await tools.call(daemon, "explain_rejection", {}, None))
    assert why == calls.rejection(daemon) and why["lastRejected"]["errors"]
    with pytest.raises(Refused) as caught:
        await tools.call(daemon, "diff_revision", {"ref": "main"}, READER)
    assert caught.value.status == 409  # a directory source has no other revisions


@pytest.mark.asyncio
async def test_refusals(stack: Stack) -> None:
    daemon = stack.daemon.control
    cases: list[tuple[str, dict[str, Any], Token | None, int]] = [
        ("no_such_tool", {}, ADMIN, 404),
        ("start_job", {"job": "greet"}, READER, 403),
        ("start_job", {"job": "greet"}, None, 401),
        ("reload", {}, OPS, 403),
        ("job_runs", {"job": "nope"}, READER, 404),
        ("job_runs", {}, READER, 400),
        ("next_fires", {"job": "greet", "hours": 1000}, READER, 400),
        ("job_status", {"job": "nope"}, READER, 404),
        ("list_jobs", {"limit": 0}, READER, 400),
        ("list_jobs", {"limit": 1.5}, READER, 400),
        ("list_jobs", {"limit": calls.JOBS_MAX_PAGE + 1}, READER, 400),
        ("list_jobs", {"cursor": "not a cursor"}, READER, 400),
        ("list_jobs", {"cursor": "x" * (calls.MAX_CURSOR_LENGTH + 1)}, READER, 400),
        ("cancel_run", {"job": "greet", "run": "greet@x#1"}, OPS, 404),
    ]
    for name, given, token, status in cases:
        with pytest.raises(Refused) as caught:
            await tools.call(daemon, name, given, token)
        assert caught.value.status == status, (name, caught.value.message)
    assert calls.runs(daemon, "greet")["runs"] == []  # nothing was started by a refused call


@pytest.mark.asyncio
async def test_list_jobs_pages_as_status_does(stack: Stack) -> None:
    """A page at a time, in configuration order, each page the /status page of the same
    limit and cursor; the pages together are every job once."""
    daemon = stack.daemon.control
    names = [f"job-{i:02d}" for i in range(7)]
    config = "jobs:\n" + "".join(
        f'  - {{name: {name}, command: "true", schedule: "@yearly"}}\n' for name in names
    )
    assert (await stack.apply(config)).outcome == "applied"
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        given: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = checked("list_jobs", await tools.call(daemon, "list_jobs", given, READER))
        status = calls.status(daemon) if cursor is None else None
        assert page["jobCount"] == 7 and len(page["jobs"]) <= 3
        if status is not None:  # the first page is the start of /status's job list
            assert page["jobs"] == status["jobs"][:3]
        seen += [job["name"] for job in page["jobs"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == names and pages == 3
    one = checked("job_status", await tools.call(daemon, "job_status", {"job": "job-05"}, READER))
    assert one["name"] == "job-05"
