"""Workflows with real processes, through the HTTP API of a daemon built in-process.

build_daemon's daemon (applier, scheduler, the real process layer, the web
section) runs the workflows; every task is a real shell command that leaves a
mark in a file, so the order and the attempts are what the processes did.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import DaemonProcess, wait_for
from daemon_proc import http as daemon_http
from web_stack import Stack

pytestmark = pytest.mark.timeout(90)
REPO = Path(__file__).resolve().parent.parent


def config(marks: Path) -> str:
    """Every task appends ``NAME`` to ``marks`` when it starts (and ``NAME.end`` when done)."""

    def task(name: str, body: str = "true", extra: str = "") -> str:
        command = f"echo {name} >> {marks}; {body}; code=$?; echo {name}.end >> {marks}; exit $code"
        return f"      - name: {name}\n        command: '{command}'\n{extra}"

    here = marks.parent

    def blocked(name: str, gate: str, extra: str) -> str:
        """A task that stamps its own start and end (``date``) and holds until ``gate``
        exists (at most 20 s)."""
        body = (
            f"date +%s.%N > {here}/{name}.start; echo {name} >> {marks}; "
            f"for i in $(seq 400); do [ -e {here}/{gate} ] && break; sleep 0.05; done; "
            f"date +%s.%N > {here}/{name}.end"
        )
        return f"      - name: {name}\n        command: '{body}'\n{extra}"

    return (
        "web:\n  listen: [http://127.0.0.1:0]\n  authToken: {value: wf-token}\n"
        "pools:\n  - {name: one, slots: 1}\n"
        "jobs: []\n"
        "workflows:\n"
        "  - name: diamond\n"
        "    schedule: '@yearly'\n"
        "    tasks:\n"
        + task("extract", "sleep 0.2")
        + task("ta", "sleep 0.5", "        dependsOn: [extract]\n")
        + task("tb", "sleep 0.5", "        dependsOn: [extract]\n")
        + task("load", "true", "        dependsOn: [ta, tb]\n")
        + "  - name: conditions\n"
        "    schedule: '@yearly'\n"
        "    tasks:\n"
        + task("bad", "exit 3")
        + task("good")
        + task("needs-bad", "true", "        dependsOn: [bad]\n")
        + task("after-all", "true", "        dependsOn: [needs-bad]\n        runWhen: allDone\n")
        + task("on-fail", "true", "        dependsOn: [bad, good]\n        runWhen: anyFailed\n")
        + task("all-failed", "true", "        dependsOn: [bad]\n        runWhen: allFailed\n")
        + task("none-failed", "true", "        dependsOn: [good]\n        runWhen: allFailed\n")
        + "  - name: flaky\n"
        "    schedule: '@yearly'\n"
        "    tasks:\n"
        + task(
            "try",
            f"test $(grep -cx try {marks}) -ge 3",
            "        onFailure: {retry: {maximumRetries: 3, initialDelay: 0.2}}\n",
        )
        + task("then", "true", "        dependsOn: [try]\n")
        + "  - name: slow\n"
        "    schedule: '@yearly'\n"
        "    concurrencyPolicy: Forbid\n"
        "    tasks:\n"
        + task("wait", "sleep 30", "        killTimeout: 1\n")
        + task("after", "true", "        dependsOn: [wait]\n")
        + "  - name: pooled\n"
        "    schedule: '@yearly'\n"
        "    tasks:\n"
        + task("first")
        + blocked("pa", "go", "        dependsOn: [first]\n        pool: one\n")
        + blocked("pb", "go", "        dependsOn: [first]\n        pool: one\n")
        + task("last", "true", "        dependsOn: [pa, pb]\n")
        + "  - name: timed-out\n"
        "    schedule: '@yearly'\n"
        "    tasks:\n"
        + blocked("holder", "go-holder", "        pool: one\n")
        + task("late", "true", "        pool: one\n        poolTimeout: 0.3\n")
        + task("after-late", "true", "        dependsOn: [late]\n")
        + task("on-fail", "true", "        dependsOn: [late]\n        runWhen: anyFailed\n")
    )


@pytest_asyncio.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Stack, Path]]:
    stack = Stack(tmp_path)
    await stack.start()
    marks = tmp_path / "marks"
    marks.write_text("")
    record = await stack.apply(config(marks))
    assert record.outcome == "applied", record
    yield stack, marks
    await stack.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=10), headers={"Authorization": "Bearer wf-token"}
    ) as session:
        yield session


async def call(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, Any]:
    async with http.request(method, url) as response:
        return response.status, await response.json()


async def finished(http: aiohttp.ClientSession, base: str, name: str, run: str) -> dict[str, Any]:
    """The workflow run ``run`` once it ended (polled, within a deadline)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, body = await call(http, "GET", f"{base}/workflows/{quote(name)}/runs")
        assert status == 200, body
        for found in body["runs"]:
            if found["id"] == run and found["outcome"] != "running":
                return dict(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"workflow run {run} did not end in 30 s")


def states(run: dict[str, Any]) -> dict[str, str]:
    return {task["task"]: task["state"] for task in run["tasks"]}


@pytest.mark.asyncio
async def test_a_diamond_runs_its_middle_in_parallel(
    daemon: tuple[Stack, Path], http: aiohttp.ClientSession
) -> None:
    stack, marks = daemon
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/diamond/start")
    assert status == 202, body
    run = await finished(http, base, "diamond", body["run"])
    assert run["outcome"] == "succeeded"
    assert states(run) == dict.fromkeys(("extract", "ta", "tb", "load"), "succeeded")
    lines = marks.read_text().split()
    # ta and tb both started before either ended; load after both
    assert lines.index("ta") < lines.index("tb.end") and lines.index("tb") < lines.index("ta.end")
    assert lines.index("load") > max(lines.index("ta.end"), lines.index("tb.end"))
    assert lines.index("ta") > lines.index("extract.end")
    # the run's tasks are job runs named WORKFLOW.TASK
    status, runs = await call(http, "GET", f"{base}/jobs/diamond.load/runs")
    assert status == 200 and runs["runs"][0]["outcome"] == "succeeded"
    status, listed = await call(http, "GET", f"{base}/workflows")
    [diamond] = [w for w in listed["workflows"] if w["name"] == "diamond"]
    assert [t["level"] for t in diamond["tasks"]] == [0, 1, 1, 2]
    assert diamond["lastRun"]["id"] == body["run"]
    status, whole = await call(http, "GET", f"{base}/status")
    assert any(w["name"] == "diamond" and w["lastRun"] for w in whole["workflows"])
    async with http.get(f"{base}/metrics") as response:
        text = await response.text()
    assert 'cronstable_workflow_runs_total{outcome="succeeded",workflow="diamond"} 1.0' in text
    assert 'cronstable_job_runs_total{job="diamond.load",outcome="succeeded"} 1.0' in text


@pytest.mark.asyncio
async def test_each_run_when_and_skip_propagation(
    daemon: tuple[Stack, Path], http: aiohttp.ClientSession
) -> None:
    stack, marks = daemon
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/conditions/start")
    assert status == 202
    run = await finished(http, base, "conditions", body["run"])
    assert states(run) == {
        "bad": "failed",
        "good": "succeeded",
        "needs-bad": "skipped",
        "after-all": "succeeded",
        "on-fail": "succeeded",
        "all-failed": "succeeded",
        "none-failed": "skipped",
    }
    assert run["outcome"] == "failed"
    [bad] = [t for t in run["tasks"] if t["task"] == "bad"]
    assert bad["exitCode"] == 3
    started = set(marks.read_text().split())
    assert "needs-bad" not in started and "none-failed" not in started  # skipped: never ran


@pytest.mark.asyncio
async def test_retries_inside_a_dag(
    daemon: tuple[Stack, Path], http: aiohttp.ClientSession
) -> None:
    stack, marks = daemon
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/flaky/start")
    run = await finished(http, base, "flaky", body["run"])
    assert states(run) == {"try": "succeeded", "then": "succeeded"}
    [attempted] = [t for t in run["tasks"] if t["task"] == "try"]
    assert attempted["attempts"] == 3
    lines = marks.read_text().split()
    assert lines.count("try") == 3
    # the dependent started only after the last attempt ended
    assert lines.index("then") > len(lines) - 1 - lines[::-1].index("try.end")


@pytest.mark.asyncio
async def test_cancel_and_forbid(daemon: tuple[Stack, Path], http: aiohttp.ClientSession) -> None:
    stack, marks = daemon
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/slow/start")
    assert status == 202
    run = body["run"]
    status, refused = await call(http, "POST", f"{base}/workflows/slow/start")
    assert status == 409 and "concurrencyPolicy is Forbid" in refused["error"]
    deadline = time.monotonic() + 10
    while "wait" not in marks.read_text().split():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    status, missing = await call(http, "POST", f"{base}/workflows/slow/runs/nope/cancel")
    assert status == 404
    status, cancelled = await call(http, "POST", f"{base}/workflows/slow/runs/{quote(run)}/cancel")
    assert status == 200 and cancelled["cancelled"] == [run]
    ended = await finished(http, base, "slow", run)
    assert ended["outcome"] == "cancelled" and ended["cancelled"]
    assert states(ended) == {"wait": "cancelled", "after": "cancelled"}
    assert "after" not in marks.read_text().split()
    status, _ = await call(http, "POST", f"{base}/workflows/nope/start")
    assert status == 404


async def run_view(http: aiohttp.ClientSession, base: str, name: str, run: str) -> dict[str, Any]:
    status, body = await call(http, "GET", f"{base}/workflows/{quote(name)}/runs")
    assert status == 200, body
    [found] = [r for r in body["runs"] if r["id"] == run]
    return dict(found)


async def until(check: Any, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.mark.asyncio
async def test_parallel_tasks_sharing_a_pool_of_one_never_overlap(
    daemon: tuple[Stack, Path], http: aiohttp.ClientSession
) -> None:
    stack, marks = daemon
    here = marks.parent
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/pooled/start")
    assert status == 202, body
    run = body["run"]

    async def one_holds_one_queues() -> dict[str, Any] | None:
        tasks = {t["task"]: t for t in (await run_view(http, base, "pooled", run))["tasks"]}
        going = [n for n in ("pa", "pb") if (here / f"{n}.start").exists()]
        waiting = [n for n in ("pa", "pb") if tasks[n]["queuedIn"] == "one"]
        return tasks if len(going) == 1 and len(waiting) == 1 and going != waiting else None

    # the one that got the slot holds it (until the gate opens); the other waits in the
    # pool's queue, shown running and queuedIn, and has not started
    tasks = await until(one_holds_one_queues, "one task holding the pool, the other queued")
    [queued] = [n for n in ("pa", "pb") if tasks[n]["queuedIn"] == "one"]
    assert tasks[queued]["state"] == "running" and tasks[queued]["pid"] is None
    assert tasks["last"]["state"] == "pending"
    status, pools = await call(http, "GET", f"{base}/pools")
    [one] = [p for p in pools["pools"] if p["name"] == "one"]
    assert one["inUse"] == 1 and one["queued"] == 1
    (here / "go").touch()
    ended = await finished(http, base, "pooled", run)
    assert ended["outcome"] == "succeeded", ended
    assert all(t["queuedIn"] is None for t in ended["tasks"])
    # the tasks' own clocks: one ended before the other started
    spans = sorted(
        (float((here / f"{n}.start").read_text()), float((here / f"{n}.end").read_text()))
        for n in ("pa", "pb")
    )
    assert spans[0][1] <= spans[1][0], spans


@pytest.mark.asyncio
async def test_a_task_past_its_pool_timeout_fails_for_its_dependents(
    daemon: tuple[Stack, Path], http: aiohttp.ClientSession
) -> None:
    stack, marks = daemon
    here = marks.parent
    base = stack.url()
    status, body = await call(http, "POST", f"{base}/workflows/timed-out/start")
    assert status == 202, body
    run = body["run"]

    async def late_decided() -> dict[str, Any] | None:
        tasks = {t["task"]: t for t in (await run_view(http, base, "timed-out", run))["tasks"]}
        return tasks if tasks["late"]["state"] == "failed" else None

    tasks = await until(late_decided, "the late task failing on its poolTimeout")
    assert "pool_timeout" in tasks["late"]["failReason"]
    assert tasks["holder"]["state"] == "running"  # it still holds the slot
    (here / "go-holder").touch()
    ended = await finished(http, base, "timed-out", run)
    assert states(ended) == {
        "holder": "succeeded",
        "late": "failed",
        "after-late": "skipped",
        "on-fail": "succeeded",
    }
    assert ended["outcome"] == "failed"
    assert "late" not in marks.read_text().split()  # it never ran
    async with http.get(f"{base}/metrics") as response:
        text = await response.text()
    assert 'cronstable_fires_skipped_total{reason="pool_timeout"} 1.0' in text


@pytest.mark.slow
def test_the_example_workflow_runs(tmp_path: Path, daemon_procs: list[DaemonProcess]) -> None:
    """examples/gitops-repo as `make run` runs it (on a free port, with a token to start
    the workflow now rather than at the next ten minutes)."""
    example = tmp_path / "gitops-repo"
    shutil.copytree(REPO / "examples" / "gitops-repo", example)
    root = example / "cronstable.yaml"
    text = root.read_text()
    assert "- http://127.0.0.1:8080\n" in text
    root.write_text(
        text.replace("- http://127.0.0.1:8080\n", "- http://127.0.0.1:0\n").replace(
            "  metricsPublic: true\n", "  metricsPublic: true\n  authToken: {value: ex-token}\n"
        )
    )
    daemon = DaemonProcess(example, tmp_path / "daemon.log").start()
    daemon_procs.append(daemon)
    url = daemon.url(30)
    token = {"Authorization": "Bearer ex-token"}
    status, _, body = daemon_http(f"{url}/workflows/warehouse-etl/start", "POST", headers=token)
    assert status == 202, body
    run = body["run"]

    def ended() -> dict[str, Any] | None:
        _, _, runs = daemon_http(f"{url}/workflows/warehouse-etl/runs", headers=token)
        done = [r for r in runs["runs"] if r["id"] == run and r["outcome"] != "running"]
        return done[0] if done else None

    finished_run = wait_for(ended, timeout=60, what="the example's workflow run")
    assert finished_run["outcome"] == "succeeded", finished_run
    assert states(finished_run) == {
        "extract": "succeeded",
        "transform-orders": "succeeded",
        "transform-customers": "succeeded",
        "load": "succeeded",
        "summary": "succeeded",
        "page-on-call": "skipped",
    }
    # the extract's time went to the others as a value of the run (xcom)
    extracted = finished_run["xcom"]["extract"]["extracted-at"]
    assert datetime.fromisoformat(extracted).tzinfo is not None
    # the transforms share the pool warehouse-db of one slot: one after the other
    spans = sorted(
        (datetime.fromisoformat(t["startedAt"]), datetime.fromisoformat(t["finishedAt"]))
        for t in finished_run["tasks"]
        if t["task"].startswith("transform-")
    )
    assert spans[0][1] <= spans[1][0], spans
    assert daemon.stop() == 0
