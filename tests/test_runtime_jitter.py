"""``jitter``: the pure offset, and the scheduler delaying scheduled fires on a manual clock.

The harness is the scheduler's own (``manual_harness.py``): stand-in runs on a
:class:`~cronstable.runtime.clock.ManualClock`, the real scheduler.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from manual_harness import T0, Harness, jobs

from cronstable.runtime.jitter import fraction, offset

HOURLY = 'jobs: [{name: report, command: "true", schedule: "0 * * * *", jitter: 10m}]'


# ------------------------------------------------------------------ the offset


def test_the_offset_is_a_function_of_the_job_and_the_fire() -> None:
    fire = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
    following = fire + timedelta(hours=1)
    first = offset("report", fire, following, 600)
    # the same on every call, on every node: nothing but the name and the fire goes in
    assert offset("report", fire, following, 600) == first
    assert offset("report", fire.astimezone(UTC), following, 600) == first
    assert timedelta(0) <= first < timedelta(seconds=600)
    # another job, another fire: another offset
    assert offset("billing", fire, following, 600) != first
    assert offset("report", following, following + timedelta(hours=1), 600) != first
    assert offset("report", fire, following, None) == timedelta(0)
    assert offset("report", fire, following, 0) == timedelta(0)


def test_offsets_spread_over_the_whole_window() -> None:
    fires = [T0 + timedelta(hours=n) for n in range(2000)]
    parts = [fraction("report", fire) for fire in fires]
    assert all(0 <= part < 1 for part in parts)
    assert 0.45 < statistics.mean(parts) < 0.55  # uniform: mean 1/2
    assert min(parts) < 0.01 and max(parts) > 0.99
    # each tenth of the window gets about a tenth of the fires
    tenths = [sum(1 for part in parts if k / 10 <= part < (k + 1) / 10) for k in range(10)]
    assert all(150 < count < 250 for count in tenths), tenths


def test_the_offset_stays_below_the_next_fire() -> None:
    for n in range(500):
        fire = T0 + timedelta(seconds=10 * n)
        wait = offset("tick", fire, fire + timedelta(seconds=10), 3600)
        assert timedelta(0) <= wait < timedelta(seconds=10)
    # the last fire of a schedule has no next one: the whole jitter
    assert timedelta(0) <= offset("last", T0, None, 30) < timedelta(seconds=30)
    # a spread of a microsecond or less leaves nothing to wait
    assert offset("tight", T0, T0 + timedelta(microseconds=1), 30) == timedelta(0)


# ------------------------------------------------------------------ the scheduler


@pytest.mark.asyncio
async def test_each_fire_starts_late_by_its_offset_and_keeps_its_time(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs(HOURLY))
    fires = [T0 + timedelta(hours=n) for n in (1, 2, 3)]
    planned = [f + offset("report", f, f + timedelta(hours=1), 600) for f in fires]
    assert h.scheduler.next_fire("report") == fires[0]
    assert h.scheduler.next_start("report") == planned[0]
    await h.clock.advance(3 * 3600 + 600)
    assert h.scheduled("report") == fires  # the run stands for its fire
    assert h.starts("report") == planned  # and starts at its planned start
    assert any(start != fire for start, fire in zip(planned, fires, strict=True))
    assert h.scheduler.stats.missed == 0


@pytest.mark.asyncio
async def test_two_nodes_start_the_same_fire_at_the_same_instant(
    harness: Callable[..., Harness],
) -> None:
    # a leadership change between two fires moves nothing: each node plans alike
    first, second = harness(jobs(HOURLY)), harness(jobs(HOURLY), start=T0 + timedelta(minutes=30))
    await first.clock.advance(2 * 3600 + 600)
    await second.clock.advance(90 * 60 + 600)
    assert first.starts("report") == second.starts("report")


@pytest.mark.asyncio
async def test_jitter_wider_than_the_schedule_keeps_fires_in_order(
    harness: Callable[..., Harness],
) -> None:
    h = harness(
        jobs('jobs: [{name: tick, command: "true", schedule: "*/10 * * * * * *", jitter: 1h}]')
    )
    await h.clock.advance(600)
    fires = [T0 + timedelta(seconds=s) for s in range(10, 591, 10)]
    assert h.scheduled("tick")[: len(fires)] == fires
    starts = h.starts("tick")
    for fire, start in zip(fires, starts, strict=False):
        assert fire <= start < fire + timedelta(seconds=10)  # before the next fire
    assert starts == sorted(starts)


@pytest.mark.asyncio
async def test_a_start_on_request_and_a_retry_do_not_wait(
    harness: Callable[..., Harness],
) -> None:
    h = harness(
        jobs(
            """\
            jobs:
              - name: flaky
                command: "false"
                schedule: "0 * * * *"
                jitter: 30m
                onFailure: {retry: {maximumRetries: 1, initialDelay: 5}}
            """
        )
    )
    h.behaviour["flaky"] = (1.0, 1)
    h.scheduler.start_now("flaky", h.clock.now())
    await h.clock.advance(0)
    assert h.starts("flaky") == [T0]  # at once
    fire = T0 + timedelta(hours=1)
    start = fire + offset("flaky", fire, fire + timedelta(hours=1), 1800)
    await h.clock.advance_to(start + timedelta(seconds=10))
    attempts = [(r.scheduled, r.attempt, r.started) for r in h.runs[1:]]
    # the fire waited for its offset; its retry followed the failure by initialDelay only
    assert attempts == [
        (fire, 1, start),
        (fire, 2, start + timedelta(seconds=1 + 5)),
    ]


@pytest.mark.asyncio
async def test_a_catch_up_runs_at_once_and_a_late_start_is_missed(
    harness: Callable[..., Harness],
) -> None:
    text = """\
        jobs:
          - {name: caught, command: "true", schedule: "0 * * * *", jitter: 10m,
             startingDeadlineSeconds: 7200}
          - {name: dropped, command: "true", schedule: "0 * * * *", jitter: 10m}
        """
    h = harness(jobs(text))
    fire = T0 + timedelta(hours=1)
    start = fire + offset("caught", fire, fire + timedelta(hours=1), 600)
    await h.clock.advance_to(fire - timedelta(seconds=1))
    h.clock.jump(3600)  # suspended past the planned starts
    await h.clock.advance(0)
    now = h.clock.now()
    assert now > start + timedelta(seconds=5)
    assert [(r.scheduled, r.started) for r in h.runs if r.job.name == "caught"] == [(fire, now)]
    assert h.scheduled("dropped") == []  # found late by its planned start: missed
    assert h.scheduler.stats.missed == 1
