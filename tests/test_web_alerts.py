"""Late, stuck and stale in ``GET /status`` (whole and paged) and in ``cronstable status``.

A real daemon core on a manual clock (its web section serves real HTTP, its runs are
real processes): a run holding the one slot of a pool is stuck past its
expectedDuration, the fire queued behind it in the pool is late, and a job that never
succeeded is stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from web_stack import Stack

from cronstable.cli.client import status_text
from cronstable.ports import utc_text
from cronstable.runtime.clock import ManualClock

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
ADMIN = {"Authorization": "Bearer admin-secret"}
CONFIG = """\
web:
  listen: [http://127.0.0.1:0]
  authToken: {value: admin-secret}
pools:
  - {name: one, slots: 1}
jobs:
  - name: hog
    command: sleep 60
    schedule: "@yearly"
    pool: one
    onStuck: {expectedDuration: 5s}
  - name: waiter
    command: "true"
    schedule: "* * * * *"
    pool: one
    onLate: {grace: 10s}
  - name: never
    command: "true"
    schedule: "@yearly"
    onStale: {maxSuccessAge: 30s}
  - name: plain
    command: "true"
    schedule: "@yearly"
"""


@pytest_asyncio.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Stack, ManualClock]]:
    clock = ManualClock(T0)
    s = Stack(tmp_path, clock=clock)
    await s.start()
    assert (await s.apply(CONFIG)).outcome == "applied"
    yield s, clock
    await s.stop()


async def get(url: str) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(url, headers=ADMIN) as response:
            assert response.status == 200, await response.text()
            return await response.json()


async def post(url: str) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.post(url, headers=ADMIN) as response:
            assert response.status == 202, await response.text()
            return await response.json()


def by_name(status: Any) -> dict[str, Any]:
    return {job["name"]: job for job in status["jobs"]}


async def until_shown(url: str, clock: ManualClock, wanted: Any) -> Any:
    """``/status`` once ``wanted(jobs)`` holds, the clock moving a second at a time
    (the alert rounds' store writes are real I/O)."""
    for _ in range(100):
        status = await get(f"{url}/status")
        if wanted(by_name(status)):
            return status
        await clock.advance(1)
        await asyncio.sleep(0.02)
    raise AssertionError(f"never shown: {by_name(status)}")


@pytest.mark.asyncio
async def test_status_shows_late_stuck_and_stale(stack: tuple[Stack, ManualClock]) -> None:
    s, clock = stack
    url = s.url()
    jobs = by_name(await get(f"{url}/status"))
    assert jobs["plain"]["alerts"] is None  # none of the three: nothing to show
    quiet = {"late": None, "stuck": [], "stale": None}
    for name in ("hog", "waiter", "never"):
        assert jobs[name]["alerts"] == quiet | {
            "lastReported": {"late": None, "stuck": None, "stale": None}
        }
    run = (await post(f"{url}/jobs/hog/start"))["run"]  # takes the pool's one slot
    for _ in range(200):
        if by_name(await get(f"{url}/status"))["hog"]["running"]:
            break
        await asyncio.sleep(0.02)
    # 12:01 fires waiter, which waits in the pool behind hog: late at 12:01:10
    await clock.advance(60 + 12)
    status = await until_shown(
        url,
        clock,
        lambda jobs: (
            jobs["waiter"]["alerts"]["late"]
            and jobs["hog"]["alerts"]["stuck"]
            and jobs["never"]["alerts"]["stale"]
        ),
    )
    jobs = by_name(status)
    fire = T0 + timedelta(minutes=1)
    late = jobs["waiter"]["alerts"]["late"]
    assert late["fire"] == late["plannedStart"] == utc_text(fire)
    assert late["lateSince"] == utc_text(fire + timedelta(seconds=10))
    assert (late["grace"], late["reportedBy"]) == (10.0, "localhost")
    assert late["reportedAt"] == jobs["waiter"]["alerts"]["lastReported"]["late"]
    [stuck] = jobs["hog"]["alerts"]["stuck"]
    assert (stuck["job"], stuck["run"], stuck["threshold"]) == ("hog", run, 5.0)
    assert stuck["basis"] == "expectedDuration"
    started = datetime.fromisoformat(stuck["startedAt"])
    assert stuck["runningFor"] == (clock.now() - started).total_seconds() > 5
    assert stuck["reportedAt"] == jobs["hog"]["alerts"]["lastReported"]["stuck"]
    stale = jobs["never"]["alerts"]["stale"]
    assert (stale["lastSuccess"], stale["maxSuccessAge"]) == (None, 30.0)
    assert stale["staleSince"] == utc_text(T0 + timedelta(seconds=30))
    assert stale["age"] > 30 and stale["reportedAt"] is not None

    # the paged form shows the same per job
    first = await get(f"{url}/status?limit=2")
    second = await get(f"{url}/status?limit=2&cursor={first['nextCursor']}")
    paged = by_name({"jobs": first["jobs"] + second["jobs"]})
    assert paged["waiter"]["alerts"]["late"] == late
    assert paged["never"]["alerts"]["stale"]["staleSince"] == stale["staleSince"]
    assert paged["hog"]["alerts"]["stuck"][0]["run"] == run

    # cronstable status: one line per condition
    text = status_text(status)
    assert (
        "waiter: late: the fire at 2026-06-01 12:01:00Z has not started "
        "(late since 2026-06-01 12:01:10Z; reported by localhost" in text
    )
    assert f"hog: stuck: run {run} going " in text
    assert "over 5.0s (expectedDuration)" in text
    assert "never: stale: no success yet (stale since 2026-06-01 12:00:30Z" in text
    assert "over maxSuccessAge 30.0s" in text

    # the run ends: not stuck any more, the pool admits waiter, whose fire starts late
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.post(f"{url}/jobs/hog/cancel", headers=ADMIN) as response:
            assert response.status == 200, await response.text()
    status = await until_shown(
        url,
        clock,
        lambda jobs: not jobs["hog"]["alerts"]["stuck"] and not jobs["waiter"]["alerts"]["late"],
    )
    jobs = by_name(status)
    assert jobs["hog"]["alerts"]["lastReported"]["stuck"] == stuck["reportedAt"]
    assert jobs["waiter"]["alerts"]["lastReported"]["late"] == late["reportedAt"]
    assert "hog: stuck" not in status_text(status)
