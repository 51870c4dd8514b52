"""Backfill on a manual clock: the fires of a range, run one after another, with the
scheduler's own harness (stand-in runs, the real scheduler)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from manual_harness import T0, Harness, jobs

from cronstable.ports import BackfillRefused
from cronstable.runtime.backfill import Backfills, fires_between

TABLE = """\
jobs:
  - {name: hourly, command: "true", schedule: "0 * * * *", jitter: 30m}
  - {name: forbid, command: "true", schedule: "*/10 * * * *", concurrencyPolicy: Forbid}
  - {name: boot, command: "true", schedule: "@reboot"}
"""


def test_the_fires_of_a_range_are_the_schedules_own() -> None:
    table = jobs('jobs: [{name: d, command: "true", schedule: "30 2 * * *", '
                 "timezone: America/New_York}]")  # fmt: skip
    job = table["d"]
    ny = ZoneInfo("America/New_York")
    # the week of the spring-forward night: 02:30 does not exist on March 8, 03:00 stands in
    start, end = datetime(2026, 3, 6, tzinfo=ny), datetime(2026, 3, 10, tzinfo=ny)
    fires, more = fires_between(job, start, end, 100)
    assert not more
    assert [f.isoformat() for f in fires] == [
        "2026-03-06T02:30:00-05:00",
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]
    # from is inclusive, to exclusive; a limit says whether more follow
    assert fires_between(job, fires[0], fires[2], 100) == (fires[:2], False)
    assert fires_between(job, start, end, 3) == (fires[:3], True)


@pytest.mark.asyncio
async def test_a_backfill_runs_each_fire_in_order_one_after_another_without_jitter(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs(TABLE), start=T0)
    h.behaviour["hourly"] = (60.0, 0)  # each run lasts a minute
    backfills = Backfills(h.scheduler)
    view = backfills.start("hourly", T0 - timedelta(hours=5), T0, by="ops")
    fires = [T0 - timedelta(hours=n) for n in (5, 4, 3, 2, 1)]
    assert [f.astimezone(T0.tzinfo) for f in view.fires] == fires
    assert (view.state, view.done, view.by) == ("running", 0, "ops")
    await h.clock.advance(0)
    for minute in range(5):
        # one at a time: the next starts when the previous ended, at once (no jitter)
        assert h.starts("hourly") == [T0 + timedelta(minutes=m) for m in range(minute + 1)]
        await h.clock.advance(60)
    done = backfills.view("hourly")
    assert done is not None and (done.state, done.done, dict(done.outcomes)) == (
        "done",
        5,
        {"succeeded": 5},
    )
    assert h.scheduled("hourly") == fires  # each run stands for its own fire
    assert all(run.attempt == 1 for run in h.runs if run.job.name == "hourly")


@pytest.mark.asyncio
async def test_a_backfill_refuses_what_it_cannot_run(harness: Callable[..., Harness]) -> None:
    h = harness(jobs(TABLE), start=T0)
    paused: set[str] = set()
    backfills = Backfills(h.scheduler, paused=lambda name: name in paused)

    def refused(name: str, start: datetime, end: datetime, **kwargs: object) -> str:
        with pytest.raises(BackfillRefused) as info:
            backfills.start(name, start, end, **kwargs)  # type: ignore[arg-type]
        return str(info.value)

    day = T0 - timedelta(days=1)
    assert "more than 100 fires" in refused("hourly", day - timedelta(days=5), T0)
    assert "more than 3 fires" in refused("hourly", day, T0, limit=3)
    assert "in the future" in refused("hourly", day, T0 + timedelta(hours=1))
    assert "later than from" in refused("hourly", T0, day)
    assert "@reboot" in refused("boot", day, T0)
    assert "no fire in the range" in refused("hourly", T0 - timedelta(minutes=30), T0)
    with pytest.raises(KeyError):
        backfills.start("nope", day, T0)
    paused.add("hourly")
    assert "is paused" in refused("hourly", T0 - timedelta(hours=2), T0)
    view = backfills.start("hourly", T0 - timedelta(hours=2), T0, ignore_pause=True)
    assert view.ignore_pause
    assert "being backfilled already" in refused("hourly", T0 - timedelta(hours=2), T0)
    await h.clock.advance(5)


@pytest.mark.asyncio
async def test_under_forbid_a_backfill_run_waits_for_the_run_going(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs(TABLE), start=T0 - timedelta(seconds=1))
    h.behaviour["forbid"] = (30.0, 0)
    await h.clock.advance(1)  # the scheduled fire at T0 starts, for 30 s
    backfills = Backfills(h.scheduler)
    backfills.start("forbid", T0 - timedelta(minutes=20), T0)
    await h.clock.advance(10)
    assert h.scheduled("forbid") == [T0]  # not beside the scheduled run
    await h.clock.advance(25)
    assert h.scheduled("forbid") == [T0, T0 - timedelta(minutes=20)]
    assert h.starts("forbid")[1] == T0 + timedelta(seconds=30)


@pytest.mark.asyncio
async def test_a_cancel_or_a_pause_stops_the_backfill(harness: Callable[..., Harness]) -> None:
    h = harness(jobs(TABLE), start=T0)
    h.behaviour["hourly"] = (60.0, 0)
    paused: set[str] = set()
    backfills = Backfills(h.scheduler, paused=lambda name: name in paused)
    backfills.start("hourly", T0 - timedelta(hours=4), T0)
    await h.clock.advance(0)
    assert h.scheduler.cancel_runs("hourly")  # stop the first run
    await h.clock.advance(1)
    view = backfills.view("hourly")
    assert view is not None and (view.state, view.done, view.stop_reason) == (
        "stopped",
        1,
        "a run of it was cancelled",
    )
    backfills.start("hourly", T0 - timedelta(hours=4), T0)
    await h.clock.advance(0)
    paused.add("hourly")  # a pause asked while it goes: it stops before its next fire
    await h.clock.advance(61)
    view = backfills.view("hourly")
    assert view is not None and (view.state, view.done, view.stop_reason) == (
        "stopped",
        1,
        "the job was paused",
    )
    await backfills.close()
    await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_a_workflow_and_its_tasks_are_not_backfilled() -> None:
    from cronstable.config import MemoryTree, load
    from cronstable.runtime.clock import ManualClock
    from cronstable.runtime.scheduler import Scheduler

    desired = load(
        MemoryTree(
            {
                "c.yaml": b'workflows: [{name: etl, schedule: "0 * * * *", '
                b'tasks: [{name: a, command: "true"}]}]\n'
            }
        ),
        "c.yaml",
    )
    scheduler = Scheduler(ManualClock(T0), lambda job, scheduled, attempt: None)  # type: ignore[arg-type,return-value]
    scheduler.replace_jobs(desired.jobs, desired.workflows)
    backfills = Backfills(scheduler)
    with pytest.raises(BackfillRefused, match="'etl.a' is a task: it runs only in its workflow"):
        backfills.plan("etl.a", T0 - timedelta(hours=3), T0)
    with pytest.raises(KeyError):  # a workflow's fire is no process to run
        backfills.plan("etl", T0 - timedelta(hours=3), T0)
