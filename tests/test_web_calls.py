"""The questions the HTTP routes and the MCP tools share (cronstable.web.calls), asked of a
real daemon core: its scheduler runs real processes, its web section serves real HTTP,
and each answer is the route's JSON."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from git_server import GitDaemon, WorkRepo
from web_stack import Stack

from cronstable.daemon.build import NodeFacts, build_daemon
from cronstable.snapshot import Snapshot
from cronstable.sources.git.source import GitSource
from cronstable.sources.git.spec import GitSpec
from cronstable.web import calls
from cronstable.web.calls import Refused

pytestmark = pytest.mark.timeout(60)

CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authToken: {value: admin-secret}
jobs:
  - name: greet
    command: echo hello
    schedule: "0 3 * * *"
    timezone: UTC
    captureStdout: true
  - name: nap
    command: sleep 30
    schedule: "@yearly"
    killTimeout: 1
"""
ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    assert (await s.apply(CONFIG)).outcome == "applied"
    yield s
    await s.stop()


async def http_get(url: str) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(url, headers=ADMIN) as response:
            assert response.status == 200, await response.text()
            return await response.json()


def refusal(call: Any) -> tuple[int, str]:
    with pytest.raises(Refused) as caught:
        call()
    return caught.value.status, caught.value.message


@pytest.mark.asyncio
async def test_reads_are_the_routes_answers(stack: Stack) -> None:
    daemon = stack.daemon.control
    base = stack.url()
    status = calls.status(daemon)
    assert status == await http_get(f"{base}/status")
    assert calls.list_jobs(daemon) == {"jobs": status["jobs"], "jobCount": 2, "nextCursor": None}
    assert calls.job_status(daemon, "nap") == status["jobs"][1]
    assert calls.runs(daemon, "greet") == await http_get(f"{base}/jobs/greet/runs")
    fires = calls.next_fires(daemon, "greet", 48)
    assert fires["job"] == "greet" and len(fires["fires"]) == 2
    assert all(fire.endswith("T03:00:00Z") for fire in fires["fires"])
    assert calls.rejection(daemon) == {"applied": status["applied"], "lastRejected": None}


@pytest.mark.asyncio
async def test_refusals_carry_the_routes_status_and_message(stack: Stack) -> None:
    daemon = stack.daemon.control
    assert refusal(lambda: calls.runs(daemon, "nope\x1b")) == (404, "no job named 'nope\\x1b'")
    assert refusal(lambda: calls.job_status(daemon, "x" * 100))[1].endswith("…'")
    assert refusal(lambda: calls.cancel(daemon, "greet", "greet@1#1"))[0] == 404
    for hours in (0, -1, math.nan, calls.MAX_HOURS + 1):
        assert refusal(lambda h=hours: calls.next_fires(daemon, "greet", h))[0] == 400
    assert calls.hours_of(None) == calls.DEFAULT_HOURS
    assert math.isnan(calls.hours_of("soon"))
    assert refusal(lambda: calls.next_fires(daemon, "nope", 1))[0] == 404
    with pytest.raises(Refused) as caught:
        await calls.start(daemon, "nope")
    assert caught.value.body() == {"error": "no job named 'nope'"}
    for ref in ("", "   ", "a\nb", "x" * (calls.MAX_REF_LENGTH + 1)):
        with pytest.raises(Refused) as caught:
            await calls.diff(daemon, ref)
        assert caught.value.status == 400
    with pytest.raises(Refused) as caught:  # a directory source has no other revisions
        await calls.diff(daemon, "main")
    assert caught.value.status == 409
    assert "only a git source can read another revision" in caught.value.message


@pytest.mark.asyncio
async def test_start_cancel_reload_and_a_rejection(stack: Stack) -> None:
    daemon = stack.daemon.control
    started = await calls.start(daemon, "greet")
    assert started["job"] == "greet" and started["run"].startswith("greet@")

    async def finished() -> Any:
        runs = calls.runs(daemon, "greet")["runs"]
        return runs if runs and runs[0]["outcome"] != "running" else None

    [run] = await until(finished, what="the run ended")
    assert (run["id"], run["outcome"], run["stdout"]) == (started["run"], "succeeded", "hello")
    nap = (await calls.start(daemon, "nap"))["run"]
    assert calls.cancel(daemon, "nap", nap) == {"job": "nap", "cancelled": [nap]}
    assert calls.reload(daemon) == {"reload": "requested"}
    record = await stack.apply(CONFIG + "  - {name: broken, command: x, schedule: nonsense}\n")
    assert record.outcome == "rejected"
    answer = calls.rejection(daemon)
    assert answer["applied"]["revision"] != answer["lastRejected"]["revision"]
    [problem] = answer["lastRejected"]["errors"]
    assert "c.yaml" in problem and "schedule" in problem
    assert answer == {k: calls.status(daemon)[k] for k in ("applied", "lastRejected")}


# --------------------------------------------------------------------------- diff


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[WorkRepo, GitDaemon]]:
    root = tmp_path / "origin"
    root.mkdir()
    repo = WorkRepo.create(root, "config")
    with GitDaemon(root) as server:
        yield repo, server


@pytest.mark.asyncio
async def test_diff_plans_a_branch_against_the_running_revision_without_applying_it(
    origin: tuple[WorkRepo, GitDaemon], tmp_path: Path
) -> None:
    repo, server = origin
    job = "jobs:\n  - {name: %s, command: 'true', schedule: '%s'}\n"
    repo.commit({"c.yaml": job % ("keep", "@daily")})
    repo.push("HEAD:refs/heads/main")
    spec = GitSpec(server.url("config.git"), "main", "", 60.0, 30.0)
    source = GitSource(spec, cache_dir=tmp_path / "cache")
    daemon = build_daemon(source, NodeFacts(state_dir=tmp_path / "state"))
    await source.start()
    try:
        snapshot: Snapshot = await anext(aiter(source.watch()))
        assert (await daemon.applier.reconcile(snapshot)).outcome == "applied"
        repo.checkout("feature", create=True)
        repo.commit({"c.yaml": job % ("keep", "@hourly") + "  - {name: new, command: 'true'}\n"})
        repo.push("HEAD:refs/heads/feature")
        answer = await calls.diff(daemon.control, "feature")
        assert answer["ref"] == "feature" and answer["loads"] is False
        assert answer["revision"] == repo.rev_parse("HEAD") and answer["plan"] is None
        assert any("schedule" in error for error in answer["errors"])
        feature = repo.commit({"c.yaml": job % ("keep", "@hourly") + job[5:] % ("new", "@daily")})
        repo.push("HEAD:refs/heads/feature")
        answer = await calls.diff(daemon.control, "feature")
        assert (answer["loads"], answer["errors"], answer["revision"]) == (True, [], feature)
        plan = answer["plan"]
        assert plan["from"]["revision"] == snapshot.revision
        assert plan["to"]["revision"] == feature
        assert plan["summary"] == {
            "added": 1, "removed": 0, "changed": 1, "unchanged": 0, "sections": []
        }  # fmt: skip
        assert [(j["name"], j["change"]) for j in plan["jobs"]] == [
            ("new", "added"),
            ("keep", "changed"),
        ]
        json.dumps(answer)  # plain JSON, as the route and the tool send it
        # nothing was applied: the daemon still runs main's revision and its one job
        assert daemon.control.status().applied.revision == snapshot.revision  # type: ignore[union-attr]
        assert list(daemon.scheduler.jobs) == ["keep"]
        with pytest.raises(Refused) as caught:
            await calls.diff(daemon.control, "no-such-branch")
        assert caught.value.status == 409 and "not found" in caught.value.message
    finally:
        await asyncio.wait_for(source.close(), 10)
