"""Pools with real processes and the real HTTP API: a daemon core built by
``build_daemon`` in-process (tests/web_stack.py), its jobs real shell processes that
stamp their own times (bash's ``EPOCHREALTIME``) into files the tests read.

Runs that must overlap or wait are held by a file the test creates (``go-*``), so
nothing here depends on how fast the machine is: the order and the cap are read
from the jobs' own stamps, the queue from ``GET /pools`` and the API's answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from daemon_proc import until
from web_stack import Stack

pytestmark = pytest.mark.timeout(60)

TOKEN = {"Authorization": "Bearer t0ken"}


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path)
    await s.start()
    yield s
    _release_all(tmp_path)
    await s.stop()


def _release_all(tmp: Path) -> None:
    """Let every held run end (a test that failed midway leaves some waiting)."""
    for name in (
        "blocker",
        "solo",
        "fail",
        *(f"w{n}" for n in range(5)),
        *(f"h{n}" for n in range(4)),
    ):
        (tmp / f"go-{name}").touch()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def call(http: aiohttp.ClientSession, method: str, url: str) -> tuple[int, Any]:
    async with http.request(method, url, headers=TOKEN) as response:
        text = await response.text()
        body = json.loads(text) if response.content_type == "application/json" else text
        return response.status, body


def config(tmp: Path, pools: str, jobs: str) -> str:
    return (
        "web:\n  listen: [http://127.0.0.1:0]\n  authToken: {value: t0ken}\n"
        f"defaults:\n  shell: /bin/bash\n  killTimeout: 1\n{pools}jobs:\n{jobs}"
    ).replace("TMP", str(tmp))


def held(name: str, extra: str = "", log: str = "log") -> str:
    """A job that stamps its start, waits for TMP/go-NAME, stamps its end (``@yearly``:
    it runs when started on request)."""
    return (
        f"  - name: {name}\n"
        f'    schedule: "@yearly"\n'
        f'    command: echo "$EPOCHREALTIME start {name}" >> TMP/{log}; '
        f"while [ ! -e TMP/go-{name} ]; do sleep 0.02; done; "
        f'echo "$EPOCHREALTIME end {name}" >> TMP/{log}\n'
        + "".join(f"    {line}\n" for line in extra.splitlines() if line)
    )


def stamps(tmp: Path, log: str = "log") -> list[tuple[float, str, str]]:
    path = tmp / log
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        at, what, name = line.split()
        out.append((float(at), what, name))
    return out


def most_at_once(events: list[tuple[float, str, str]]) -> int:
    """The most runs going at one moment, from their own start and end stamps."""
    going = top = 0
    for _, what, _ in sorted(events):
        going += 1 if what == "start" else -1
        top = max(top, going)
    return top


async def pool(http: aiohttp.ClientSession, stack: Stack, name: str) -> dict[str, Any]:
    status, body = await call(http, "GET", f"{stack.url()}/pools")
    assert status == 200
    return next(p for p in body["pools"] if p["name"] == name)


async def start(http: aiohttp.ClientSession, stack: Stack, job: str) -> tuple[int, Any]:
    return await call(http, "POST", f"{stack.url()}/jobs/{job}/start")


@pytest.mark.asyncio
async def test_the_cap_holds_and_a_start_is_told_its_place(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    jobs = "".join(held(f"w{n}", "pool: db") for n in range(5))
    text = config(tmp_path, "pools:\n  - {name: db, slots: 2}\n", jobs)
    assert (await stack.apply(text)).outcome == "applied"
    answers = [await start(http, stack, f"w{n}") for n in range(5)]
    assert [status for status, _ in answers] == [202] * 5
    assert [(b["queued"], b.get("pool"), b.get("queuePosition")) for _, b in answers] == [
        (False, None, None),
        (False, None, None),
        (True, "db", 1),
        (True, "db", 2),
        (True, "db", 3),
    ]
    await until(lambda: len(stamps(tmp_path)) == 2, what="two runs started")
    view = await pool(http, stack, "db")
    assert (view["slots"], view["inUse"], view["queued"]) == (2, 2, 3)
    assert [w["job"] for w in view["waiting"]] == ["w2", "w3", "w4"]
    assert [w["run"] for w in view["waiting"]] == [b["run"] for _, b in answers[2:]]
    assert view["holders"] == [b["run"] for _, b in answers[:2]]
    assert view["oldestWait"] > 0
    status, body = await call(http, "GET", f"{stack.url()}/status")
    assert {k: body["pools"][0][k] for k in ("name", "slots", "inUse", "queued")} == {
        "name": "db",
        "slots": 2,
        "inUse": 2,
        "queued": 3,
    }
    status, metrics = await call(http, "GET", f"{stack.url()}/metrics")
    assert 'cronstable_pool_slots_in_use{pool="db"} 2.0' in metrics
    assert 'cronstable_pool_queue_length{pool="db"} 3.0' in metrics
    for n in range(5):  # w0 and w1 end; each next one ends as soon as it is admitted
        (tmp_path / f"go-w{n}").touch()
    await until(lambda: len(stamps(tmp_path)) == 10, what="every run ended")
    events = stamps(tmp_path)
    assert most_at_once(events) == 2  # w0 and w1 went together; never three

    async def all_done() -> bool:  # the last end stamp comes just before its process exits
        view = await pool(http, stack, "db")
        return (view["inUse"], view["queued"], view["admitted"]) == (0, 0, 5)

    await until(all_done, what="every slot given back")
    status, body = await call(http, "GET", f"{stack.url()}/jobs/w4/runs")
    assert body["runs"][0]["poolWait"] > 0  # it waited for its slot, and says how long


@pytest.mark.asyncio
async def test_the_queue_admits_by_priority_then_age(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    jobs = held("blocker", "pool: one") + "".join(
        f"  - name: {name}\n"
        f'    schedule: "@yearly"\n'
        f'    command: echo "$EPOCHREALTIME start {name}" >> TMP/log\n'
        f"    pool: one\n"
        f"    poolPriority: {priority}\n"
        for name, priority in (("low1", 0), ("high1", 5), ("low2", 0), ("high2", 5), ("mid", 2))
    )
    text = config(tmp_path, "pools:\n  - {name: one, slots: 1}\n", jobs)
    assert (await stack.apply(text)).outcome == "applied"
    assert (await start(http, stack, "blocker"))[1]["queued"] is False
    positions = []
    for name in ("low1", "high1", "low2", "high2", "mid"):
        status, body = await start(http, stack, name)
        assert status == 202 and body["queued"]
        positions.append(body["queuePosition"])
    # each start's place when it came: a higher priority goes ahead of those waiting
    assert positions == [1, 1, 3, 2, 3]
    view = await pool(http, stack, "one")
    assert [(w["job"], w["priority"]) for w in view["waiting"]] == [
        ("high1", 5),
        ("high2", 5),
        ("mid", 2),
        ("low1", 0),
        ("low2", 0),
    ]
    await until(lambda: stamps(tmp_path), what="the blocker started")
    (tmp_path / "go-blocker").touch()
    await until(lambda: len(stamps(tmp_path)) == 7, what="every run")
    assert [name for _, what, name in stamps(tmp_path) if what == "start"] == [
        "blocker",
        "high1",
        "high2",
        "mid",
        "low1",
        "low2",
    ]


@pytest.mark.asyncio
async def test_a_launch_past_its_pool_timeout_is_skipped_and_reported_as_missed(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    jobs = held("blocker", "pool: one") + (
        "  - name: late\n"
        '    schedule: "@yearly"\n'
        "    command: echo ran >> TMP/late-ran\n"
        "    pool: one\n"
        "    poolTimeout: 300ms\n"
        "    onMissed:\n"
        "      report:\n"
        "        shell:\n"
        '          command: echo "$CRONSTABLE_MOMENT $CRONSTABLE_REASON $CRONSTABLE_JOB_NAME"'
        " >> TMP/missed\n"
    )
    text = config(tmp_path, "pools:\n  - {name: one, slots: 1}\n", jobs)
    assert (await stack.apply(text)).outcome == "applied"
    await start(http, stack, "blocker")
    status, body = await start(http, stack, "late")
    assert (status, body["queued"], body["queuePosition"]) == (202, True, 1)
    missed = tmp_path / "missed"
    await until(missed.exists, what="the onMissed report")
    await until(lambda: missed.read_text().strip(), what="the report's line")
    assert missed.read_text().split() == ["missed", "pool_timeout", "late"]
    view = await pool(http, stack, "one")
    assert (view["queued"], view["timeouts"], view["inUse"]) == (0, 1, 1)
    status, metrics = await call(http, "GET", f"{stack.url()}/metrics")
    assert 'cronstable_fires_skipped_total{reason="pool_timeout"} 1.0' in metrics
    assert 'cronstable_pool_timeouts_total{pool="one"} 1.0' in metrics
    (tmp_path / "go-blocker").touch()
    await until(lambda: len(stamps(tmp_path)) == 2, what="the blocker ended")
    assert not (tmp_path / "late-ran").exists()  # skipped: it never runs later


@pytest.mark.asyncio
async def test_forbid_counts_a_queued_launch_as_going_and_cancel_drops_it(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    jobs = held("blocker", "pool: one") + held("solo", "pool: one\nconcurrencyPolicy: Forbid")
    text = config(tmp_path, "pools:\n  - {name: one, slots: 1}\n", jobs)
    assert (await stack.apply(text)).outcome == "applied"
    await start(http, stack, "blocker")
    status, first = await start(http, stack, "solo")
    assert (status, first["queued"]) == (202, True)
    status, body = await start(http, stack, "solo")
    assert status == 409 and "1 run still going and concurrencyPolicy is Forbid" in body["error"]
    status, body = await call(http, "POST", f"{stack.url()}/jobs/solo/cancel")
    assert (status, body["cancelled"]) == (200, [first["run"]])
    assert (await pool(http, stack, "one"))["queued"] == 0  # out of the queue at once
    # nothing of solo goes now: it may start again, and waits (the command-line client)
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cronstable", "start", "solo", "--url", stack.url(),
        env=os.environ | {"CRONSTABLE_TOKEN": "t0ken"},
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    said, _ = await client.communicate()
    assert client.returncode == 0
    assert re.fullmatch(r"started solo@\S+#1, waiting in pool one at place 1\n", said.decode())
    (tmp_path / "go-blocker").touch()
    (tmp_path / "go-solo").touch()
    await until(lambda: len(stamps(tmp_path)) == 4, what="blocker and one solo run")
    assert [name for _, what, name in stamps(tmp_path) if what == "start"] == ["blocker", "solo"]


@pytest.mark.asyncio
async def test_a_retry_waits_in_the_queue_again(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    # a manual start arms no retry: flaky fires by its schedule, once, two seconds from now
    soon = datetime.now(UTC) + timedelta(seconds=2)
    flaky = (
        "  - name: flaky\n"
        f'    schedule: "{soon.second} {soon.minute} {soon.hour} * * * *"\n'
        "    pool: one\n"
        "    onFailure: {retry: {maximumRetries: 1, initialDelay: 0.1}}\n"
        '    command: echo "$EPOCHREALTIME start flaky" >> TMP/log; '
        "if [ ! -e TMP/failed ]; then touch TMP/failed; "
        "while [ ! -e TMP/go-fail ]; do sleep 0.02; done; exit 1; fi\n"
    )
    text = config(
        tmp_path, "pools:\n  - {name: one, slots: 1}\n", flaky + held("blocker", "pool: one")
    )
    assert (await stack.apply(text)).outcome == "applied"
    await until(lambda: stamps(tmp_path), what="flaky's first run")
    status, body = await start(http, stack, "blocker")
    assert (status, body["queued"]) == (202, True)
    (tmp_path / "go-fail").touch()  # flaky fails: the blocker gets the slot, the retry waits
    await until(lambda: len(stamps(tmp_path)) == 2, what="the blocker started")

    async def retry_waiting() -> bool:
        view = await pool(http, stack, "one")
        return [(w["job"], w["kind"]) for w in view["waiting"]] == [("flaky", "retry")]

    await until(retry_waiting, what="the retry in the queue")
    (tmp_path / "go-blocker").touch()
    await until(lambda: len(stamps(tmp_path)) == 4, what="the retry ran")
    assert [(what, name) for _, what, name in stamps(tmp_path)] == [
        ("start", "flaky"),
        ("start", "blocker"),
        ("end", "blocker"),
        ("start", "flaky"),
    ]


@pytest.mark.asyncio
async def test_fewer_slots_let_the_runs_finish_and_admit_below_the_new_count(
    stack: Stack, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    jobs = "".join(held(f"h{n}", "pool: db") for n in range(4))
    wide = config(tmp_path, "pools:\n  - {name: db, slots: 3}\n", jobs)
    assert (await stack.apply(wide)).outcome == "applied"
    for n in range(3):
        await start(http, stack, f"h{n}")
    await until(lambda: len(stamps(tmp_path)) == 3, what="three runs going")
    narrow = wide.replace("slots: 3", "slots: 1")
    record = await stack.apply(narrow)
    assert record.outcome == "applied" and record.summary is not None
    assert record.summary["sections"] == ["pools"]
    status, body = await start(http, stack, "h3")
    assert (body["queued"], body["queuePosition"]) == (True, 1)
    view = await pool(http, stack, "db")
    assert (view["slots"], view["inUse"], view["queued"]) == (1, 3, 1)  # none was stopped
    for n in range(3):
        (tmp_path / f"go-h{n}").touch()
        await until(
            lambda n=n: sum(1 for _, what, _ in stamps(tmp_path) if what == "end") == n + 1,
            what=f"h{n} ended",
        )
    (tmp_path / "go-h3").touch()
    await until(lambda: len(stamps(tmp_path)) == 8, what="h3 ran")
    events = stamps(tmp_path)
    h3_start = next(at for at, what, name in events if (what, name) == ("start", "h3"))
    assert h3_start > max(at for at, what, name in events if what == "end" and name != "h3")
