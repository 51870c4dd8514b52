"""Scheduler semantics on an injected clock: days of schedule in milliseconds.

Runs are stand-ins driven by the same manual clock (the real process layer is
tested in test_runtime_process.py); everything else is the real scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from manual_harness import T0, Harness, StandInRun, jobs

from cronstable.config.desired import Job
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.scheduler import Scheduler


@pytest.mark.asyncio
async def test_second_level_schedule_fires_exactly(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: tick, command: "true", schedule: "*/10 * * * * * *"}]'))
    await h.clock.advance(60)
    assert h.starts("tick") == [T0 + timedelta(seconds=s) for s in range(10, 61, 10)]
    assert h.scheduled("tick") == h.starts("tick")  # fired at the exact instant


@pytest.mark.asyncio
async def test_next_fire_is_indexed_not_scanned(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - {name: hourly, command: "true", schedule: "0 * * * *"}
          - {name: yearly, command: "true", schedule: "@yearly"}
        """
    )
    h = harness(table)
    assert h.scheduler.next_fire("hourly") == T0 + timedelta(hours=1)
    assert h.scheduler.next_fire("yearly") == datetime(2027, 1, 1, tzinfo=UTC)
    await h.clock.advance(3 * 3600)
    assert h.starts("hourly") == [T0 + timedelta(hours=n) for n in (1, 2, 3)]


@pytest.mark.asyncio
async def test_disabled_job_never_fires(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: x, command: "true", schedule: "* * * * *", enabled: no}]'))
    await h.clock.advance(600)
    assert h.runs == []
    assert h.scheduler.next_fire("x") is None


@pytest.mark.asyncio
async def test_reboot_runs_once_per_start_not_on_reload(harness: Callable[..., Harness]) -> None:
    table = jobs('jobs: [{name: boot, command: "true", schedule: "@reboot"}]')
    h = harness(table)
    await h.clock.advance(1)
    assert h.scheduled("boot") == [T0]
    more = jobs(
        """\
        jobs:
          - {name: boot, command: "true", schedule: "@reboot"}
          - {name: boot2, command: "true", schedule: "@reboot"}
        """
    )
    h.scheduler.replace_jobs(more)
    await h.clock.advance(600)
    assert [r.job.name for r in h.runs] == ["boot"]


@pytest.mark.asyncio
async def test_dst_fall_back_lisbon(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - {name: fixed, command: "true", schedule: "30 1 * * *", timezone: Europe/Lisbon}
          - {name: wild, command: "true", schedule: "30 * * * *", timezone: Europe/Lisbon}
        """
    )
    # 2026-10-25: Lisbon repeats 01:00-02:00 (WEST +01:00, then WET +00:00)
    h = harness(table, start=datetime(2026, 10, 24, 23, 0, tzinfo=UTC))
    await h.clock.advance(4 * 3600)
    lisbon = ZoneInfo("Europe/Lisbon")
    assert [t.astimezone(lisbon).isoformat() for t in h.starts("fixed")] == [
        "2026-10-25T01:30:00+01:00"
    ]
    assert [t.astimezone(lisbon).isoformat() for t in h.starts("wild")] == [
        "2026-10-25T00:30:00+01:00",
        "2026-10-25T01:30:00+01:00",
        "2026-10-25T01:30:00+00:00",
        "2026-10-25T02:30:00+00:00",
    ]


@pytest.mark.asyncio
async def test_dst_spring_forward_new_york(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - {name: fixed, command: "true", schedule: "30 2 * * *", timezone: America/New_York}
          - {name: wild, command: "true", schedule: "30 * * * *", timezone: America/New_York}
        """
    )
    # 2026-03-08: New York skips 02:00-03:00
    h = harness(table, start=datetime(2026, 3, 8, 5, 0, tzinfo=UTC))  # 00:00 EST
    await h.clock.advance(4 * 3600)
    ny = ZoneInfo("America/New_York")
    assert [t.astimezone(ny).isoformat() for t in h.starts("fixed")] == [
        "2026-03-08T03:00:00-04:00"
    ]
    assert [t.astimezone(ny).isoformat() for t in h.starts("wild")] == [
        "2026-03-08T00:30:00-05:00",
        "2026-03-08T01:30:00-05:00",
        "2026-03-08T03:30:00-04:00",
        "2026-03-08T04:30:00-04:00",
    ]


@pytest.mark.asyncio
async def test_small_stall_loses_no_fire(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: tick, command: "true", schedule: "* * * * * * *"}]'))
    await h.clock.advance(1)
    h.clock.jump(3)  # the loop wakes 3 s late: within the tolerance
    await h.clock.advance(0)
    assert h.scheduled("tick") == [T0 + timedelta(seconds=s) for s in range(1, 5)]
    assert h.scheduler.stats.missed == 0


@pytest.mark.asyncio
async def test_clock_jump_skips_and_counts_missed_fires(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: m, command: "true", schedule: "* * * * *"}]'))
    await h.clock.advance(60)
    h.clock.jump(3600)  # suspend for an hour
    await h.clock.advance(0)
    assert h.scheduled("m") == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=61)]
    assert h.scheduler.stats.missed == 59
    assert h.scheduler.stats.clock_jumps == 1
    await h.clock.advance(60)
    assert h.scheduled("m")[-1] == T0 + timedelta(minutes=62)


@pytest.mark.asyncio
async def test_catch_up_within_starting_deadline(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - {name: recent, command: "true", schedule: "*/10 * * * *", startingDeadlineSeconds: 900}
          - {name: stale, command: "true", schedule: "0 * * * *", startingDeadlineSeconds: 60}
        """
    )
    h = harness(table, start=datetime(2026, 6, 1, 11, 59, 59, tzinfo=UTC))
    h.clock.jump(25 * 60 + 1)  # 12:25:00, having slept through 12:00, 12:10, 12:20
    await h.clock.advance(0)
    # the latest missed fire within 900 s runs once; the older ones are counted
    assert h.scheduled("recent") == [datetime(2026, 6, 1, 12, 20, tzinfo=UTC)]
    # 12:00 is 25 min old, older than its 60 s deadline: skipped
    assert h.scheduled("stale") == []
    assert h.scheduler.stats.catch_ups == 1
    assert h.scheduler.stats.missed == 3
    await h.clock.advance(5 * 60)
    assert h.scheduled("recent")[-1] == datetime(2026, 6, 1, 12, 30, tzinfo=UTC)


@pytest.mark.asyncio
async def test_replace_jobs_keeps_unchanged_and_retimes_changed(
    harness: Callable[..., Harness],
) -> None:
    h = harness(
        jobs(
            """\
            jobs:
              - {name: same, command: "true", schedule: "0 * * * *"}
              - {name: edited, command: "true", schedule: "0 * * * *"}
              - {name: retimed, command: "true", schedule: "0 * * * *"}
              - {name: gone, command: "true", schedule: "0 * * * *"}
            """
        )
    )
    summary = h.scheduler.replace_jobs(
        jobs(
            """\
            jobs:
              - {name: same, command: "true", schedule: "0 * * * *"}
              - {name: edited, command: "echo new", schedule: "0 * * * *"}
              - {name: retimed, command: "true", schedule: "*/15 * * * *"}
              - {name: fresh, command: "true", schedule: "5 * * * *"}
            """
        )
    )
    assert summary.unchanged == ("same",)
    assert summary.changed == ("edited", "retimed")
    assert summary.added == ("fresh",)
    assert summary.removed == ("gone",)
    assert h.scheduler.next_fire("same") == T0 + timedelta(hours=1)
    assert h.scheduler.next_fire("retimed") == T0 + timedelta(minutes=15)
    await h.clock.advance(3600)
    assert [r.job.name for r in h.runs if r.scheduled == T0 + timedelta(hours=1)] == [
        "same",
        "edited",
        "retimed",
    ]
    edited = next(r for r in h.runs if r.job.name == "edited")
    assert edited.job.config.command == "echo new"


@pytest.mark.asyncio
@pytest.mark.parametrize("handled_first", [True, False])
async def test_swap_at_the_fire_instant_neither_drops_nor_doubles(
    harness: Callable[..., Harness], handled_first: bool
) -> None:
    table = jobs('jobs: [{name: m, command: "true", schedule: "* * * * *"}]')
    changed = jobs('jobs: [{name: m, command: "echo changed", schedule: "* * * * *"}]')
    h = harness(table)
    if handled_first:
        await h.clock.advance(60)  # the loop handles 12:01, then the swap lands
        h.scheduler.replace_jobs(changed)
    else:
        h.clock.jump(60)  # 12:01 is due, and the swap lands before the loop sees it
        h.scheduler.replace_jobs(changed)
    await h.clock.advance(0.5)
    assert h.scheduled("m") == [T0 + timedelta(minutes=1)]
    await h.clock.advance(60)
    assert h.scheduled("m") == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]


@pytest.mark.asyncio
async def test_forbid_skips_while_running(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs: [{name: slow, command: "true", schedule: "* * * * *", concurrencyPolicy: Forbid}]
        """
    )
    h = harness(table)
    h.behaviour["slow"] = (150.0, 0)
    await h.clock.advance(4 * 60)
    # 12:01 runs until 12:03:30; 12:02 and 12:03 are skipped; 12:04 runs
    assert h.scheduled("slow") == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=4)]
    assert h.scheduler.stats.skipped_forbid == 2


@pytest.mark.asyncio
async def test_allow_runs_concurrently(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: slow, command: "true", schedule: "* * * * *"}]'))
    h.behaviour["slow"] = (150.0, 0)
    await h.clock.advance(3 * 60)
    assert len(h.runs) == 3
    assert h.scheduler.running("slow") == 3
    await h.clock.advance(31)  # the 12:01 run ended at 12:03:30
    assert h.scheduler.running("slow") == 2


@pytest.mark.asyncio
async def test_replace_stops_the_old_run_without_failure_or_retry(
    harness: Callable[..., Harness],
) -> None:
    table = jobs(
        """\
        jobs:
          - name: slow
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: Replace
            onFailure: {retry: {maximumRetries: 3}}
        """
    )
    h = harness(table)
    h.behaviour["slow"] = (150.0, 0)
    await h.clock.advance(2 * 60 + 1)
    first, second = h.runs
    assert first.cancelled and not second.cancelled
    assert h.scheduler.stats.replaced == 1
    assert h.outcomes == []  # the replaced run is neither a failure nor a success
    assert h.scheduler.retry_pending("slow") is False


@pytest.mark.asyncio
async def test_runs_replaced_from_elsewhere_are_neither_reported_nor_retried(
    harness: Callable[..., Harness],
) -> None:
    """Another node's Replace (concurrencyScope cluster) stops the runs here as replaced."""
    table = jobs(
        """\
        jobs:
          - name: slow
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: Replace
            onFailure: {retry: {maximumRetries: 3}}
        """
    )
    h = harness(table)
    h.behaviour["slow"] = (150.0, 1)
    await h.clock.advance(60 + 10)
    [run] = h.runs
    assert h.scheduler.replace_runs("slow", "node n2 takes over") == [
        f"slow@{(T0 + timedelta(minutes=1)).isoformat().replace('+00:00', 'Z')}#1"
    ]
    assert h.scheduler.replace_runs("slow", "again") == []  # already stopping
    assert h.scheduler.replace_runs("nonesuch", "unknown") == []
    await h.clock.advance(1)
    assert run.cancelled and h.scheduler.running("slow") == 0
    assert h.scheduler.stats.replaced == 1
    assert h.outcomes == []  # a failing command, yet no failure: it was replaced
    assert h.scheduler.retry_pending("slow") is False


@pytest.mark.asyncio
async def test_retries_back_off_and_exhaust(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - name: flaky
            command: "false"
            schedule: "0 * * * *"
            onFailure:
              retry: {maximumRetries: 3, initialDelay: 10, backoffMultiplier: 3, maximumDelay: 60}
        """
    )
    h = harness(table)
    h.behaviour["flaky"] = (1.0, 1)
    await h.clock.advance(3600 + 300)
    hour = T0 + timedelta(hours=1)
    # run 1 ends at +1 s; retries after 10, 30, 60 (capped) s, each run lasting 1 s
    assert h.starts("flaky") == [hour + timedelta(seconds=s) for s in (0, 11, 42, 103)]
    assert [r.attempt for r in h.runs] == [1, 2, 3, 4]
    assert all(r.scheduled == hour for r in h.runs)
    assert h.outcomes == [
        ("flaky", "failure", 1),
        ("flaky", "failure", 2),
        ("flaky", "failure", 3),
        ("flaky", "failure", 4),
        ("flaky", "permanent_failure", 4),
    ]


@pytest.mark.asyncio
async def test_success_ends_the_retry_sequence(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - name: flaky
            command: "false"
            schedule: "0 * * * *"
            onFailure: {retry: {maximumRetries: -1, initialDelay: 5}}
        """
    )
    h = harness(table)
    h.behaviour["flaky"] = (1.0, 1)
    await h.clock.advance(3600 + 1)
    h.behaviour["flaky"] = (1.0, 0)
    await h.clock.advance(60)
    assert [o[1] for o in h.outcomes] == ["failure", "success"]
    assert h.scheduler.retry_pending("flaky") is False


@pytest.mark.asyncio
async def test_a_new_fire_starts_a_fresh_retry_sequence(harness: Callable[..., Harness]) -> None:
    table = jobs(
        """\
        jobs:
          - name: flaky
            command: "false"
            schedule: "* * * * *"
            onFailure: {retry: {maximumRetries: -1, initialDelay: 50, backoffMultiplier: 1}}
        """
    )
    h = harness(table)
    h.behaviour["flaky"] = (20.0, 1)
    await h.clock.advance(60 + 20 + 1)  # 12:01 fails at 12:01:20; retry planned for 12:02:10
    await h.clock.advance(40)  # 12:02 fires first: the pending retry is dropped
    await h.clock.advance(30)
    assert [(r.scheduled.minute, r.attempt) for r in h.runs] == [(1, 1), (2, 1)]


@pytest.mark.asyncio
async def test_removed_job_loses_pending_retry_but_run_finishes(
    harness: Callable[..., Harness],
) -> None:
    table = jobs(
        """\
        jobs:
          - name: flaky
            command: "false"
            schedule: "0 * * * *"
            onFailure: {retry: {maximumRetries: 5, initialDelay: 30}}
          - {name: other, command: "true", schedule: "0 0 1 1 *"}
        """
    )
    h = harness(table)
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 11)
    assert h.scheduler.retry_pending("flaky")
    h.scheduler.replace_jobs(jobs('jobs: [{name: other, command: "true", schedule: "0 0 1 1 *"}]'))
    await h.clock.advance(600)
    assert len(h.runs) == 1


@pytest.mark.asyncio
async def test_stop_cancels_retries_and_waits_for_running() -> None:
    clock = ManualClock(T0)
    runs: list[StandInRun] = []

    def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
        flaky = job.name == "flaky"
        run = StandInRun(clock, job, scheduled, attempt, 30.0 if flaky else 60.0, int(flaky))
        runs.append(run)
        return run

    scheduler = Scheduler(clock, spawner)
    scheduler.replace_jobs(
        jobs(
            """\
            jobs:
              - name: flaky
                command: "false"
                schedule: "* * * * *"
                onFailure: {retry: {maximumRetries: 5, initialDelay: 5}}
              - {name: long, command: "true", schedule: "* * * * *"}
            """
        )
    )
    task = asyncio.create_task(scheduler.run())
    await clock.advance(60 + 31)  # flaky failed at 12:01:30, its retry is due 12:01:35
    scheduler.stop()
    await clock.advance(10)
    assert not task.done()  # "long" (12:01 to 12:02) is still running: stop waits for it
    await clock.advance(60)
    await asyncio.wait_for(task, 5)
    assert [r.job.name for r in runs] == ["flaky", "long"]


@dataclass(eq=False)
class SlowToDieRun(StandInRun):
    """Like a real process: cancel() before start does nothing; after, it takes 30 s."""

    async def cancel(self) -> None:
        if self.started is None:
            return
        await self.clock.sleep(30)
        await super().cancel()


def slow_to_die_spawner(clock: ManualClock, runs: list[StandInRun]) -> object:
    def spawner(job: Job, scheduled: datetime, attempt: int) -> SlowToDieRun:
        run = SlowToDieRun(clock, job, scheduled, attempt, 1000.0, 0)
        runs.append(run)
        return run

    return spawner


@pytest.mark.asyncio
async def test_replace_never_runs_two_at_once_while_the_old_run_dies() -> None:
    clock = ManualClock(T0)
    runs: list[StandInRun] = []
    scheduler = Scheduler(clock, slow_to_die_spawner(clock, runs))  # type: ignore[arg-type]
    scheduler.replace_jobs(
        jobs(
            """\
            jobs:
              - {name: r, command: "true", schedule: "*/10 * * * * * *", concurrencyPolicy: Replace}
            """
        )
    )
    task = asyncio.create_task(scheduler.run())
    await clock.advance(100)
    started = [r for r in runs if r.started is not None]
    # each run takes 30 s to die while fires come every 10 s: replacements waiting for it
    # are replaced in turn and never start, and a run starts only once the last one died
    assert len(runs) == 10 and 2 <= len(started) < len(runs)
    for before, after in zip(started, started[1:], strict=False):
        assert before.ended is not None and after.started is not None
        assert before.ended <= after.started
    scheduler.stop()
    stopping = asyncio.ensure_future(scheduler.cancel_running())  # takes 30 s of clock
    await clock.advance(100)
    await asyncio.wait_for(stopping, 5)
    await asyncio.wait_for(task, 5)


@pytest.mark.asyncio
async def test_a_stop_during_a_replacement_wait_starts_nothing() -> None:
    clock = ManualClock(T0)
    runs: list[StandInRun] = []
    scheduler = Scheduler(clock, slow_to_die_spawner(clock, runs))  # type: ignore[arg-type]
    scheduler.replace_jobs(
        jobs(
            'jobs: [{name: r, command: "true", schedule: "* * * * *", concurrencyPolicy: Replace}]'
        )
    )
    task = asyncio.create_task(scheduler.run())
    await clock.advance(120 + 5)  # 12:01 runs; 12:02 stops it and waits (until 12:02:30)
    scheduler.stop()
    await clock.advance(60)
    await asyncio.wait_for(task, 5)
    assert [r.started is not None for r in runs] == [True, False]


@pytest.mark.asyncio
async def test_the_second_signal_also_stops_runs_of_removed_jobs() -> None:
    clock = ManualClock(T0)
    runs: list[StandInRun] = []

    def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
        run = StandInRun(clock, job, scheduled, attempt, 1000.0, 0)
        runs.append(run)
        return run

    scheduler = Scheduler(clock, spawner)
    scheduler.replace_jobs(jobs('jobs: [{name: old, command: "true", schedule: "@reboot"}]'))
    task = asyncio.create_task(scheduler.run())
    await clock.advance(1)
    scheduler.replace_jobs(jobs('jobs: [{name: new, command: "true", schedule: "@yearly"}]'))
    scheduler.stop()
    await scheduler.cancel_running()
    await clock.advance(1)
    await asyncio.wait_for(task, 5)
    assert runs[0].cancelled


@pytest.mark.asyncio
async def test_a_long_jump_is_counted_without_walking_every_fire(
    harness: Callable[..., Harness],
) -> None:
    table = jobs(
        'jobs: [{name: s, command: "true", schedule: "* * * * * * *", '
        "startingDeadlineSeconds: 3600}]"
    )
    h = harness(table)
    await h.clock.advance(1)
    h.clock.jump(18000)  # five hours asleep: 18,000 missed per-second fires
    await h.clock.advance(0)
    seconds = [int((t - T0).total_seconds()) for t in h.scheduled("s")]
    # the first, one catch-up inside the deadline window, then the on-time window (5 s)
    assert seconds == [1, 14401, 17996, 17997, 17998, 17999, 18000, 18001]
    assert h.scheduler.stats.catch_ups == 1
    assert h.scheduler.stats.missed == 10_000  # the scan stops counting there ("at least")


# ---------------------------------------------------------------- the wall clock steps back


@pytest.mark.asyncio
async def test_a_backward_step_does_not_stall_a_per_second_job(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs('jobs: [{name: tick, command: "true", schedule: "* * * * * * *"}]'))
    await h.clock.advance(10)
    h.clock.jump(-20)  # an NTP step back to 11:59:50; the loop still wakes 1 s later
    await h.clock.advance(3)
    before = [T0 + timedelta(seconds=s) for s in range(1, 11)]
    # re-planned from the wake that found the step (11:59:51), not stalled until 12:00:11
    after = [T0 - timedelta(seconds=s) for s in (9, 8, 7)]
    assert h.scheduled("tick") == [*before, *after]
    assert h.scheduler.stats.clock_jumps == 1
    assert h.scheduler.stats.replanned == 1
    assert h.scheduler.stats.missed == 0


NIGHTLY_AND_MINUTELY = """\
    jobs:
      - {name: nightly, command: "true", schedule: "30 2 * * *"}
      - {name: minutely, command: "true", schedule: "* * * * *"}
      - {name: quarterly, command: "true", schedule: "*/15 * * * *"}
    """
NIGHT = datetime(2026, 6, 1, 2, 0, tzinfo=UTC)


@pytest.mark.asyncio
async def test_a_step_back_under_3_hours_replans_wildcard_jobs_only(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs(NIGHTLY_AND_MINUTELY), start=NIGHT)
    await h.clock.advance(31 * 60)  # 02:31: the nightly ran at 02:30
    h.clock.jump(-3600)  # 01:31
    await h.clock.advance(2 * 3600)  # to 03:31
    minute = timedelta(minutes=1)
    # the nightly keeps its cursor: 02:30 does not run twice, its next fire is tomorrow's
    assert h.scheduled("nightly") == [NIGHT + 30 * minute]
    assert h.scheduler.next_fire("nightly") == NIGHT + timedelta(days=1, minutes=30)
    # wildcard jobs follow the new time: 01:32 to 02:31 run again
    again = NIGHT - 28 * minute
    assert h.scheduled("minutely") == [
        *(NIGHT + n * minute for n in range(1, 32)),
        *(again + n * minute for n in range(120)),
    ]
    assert h.scheduled("quarterly") == [
        NIGHT + 15 * minute,
        NIGHT + 30 * minute,
        *(NIGHT - 15 * minute + n * 15 * minute for n in range(8)),
    ]
    assert h.scheduler.stats.replanned == 2


@pytest.mark.asyncio
async def test_a_step_back_of_3_hours_or_more_replans_every_job(
    harness: Callable[..., Harness],
) -> None:
    h = harness(jobs(NIGHTLY_AND_MINUTELY), start=NIGHT)
    await h.clock.advance(31 * 60)  # 02:31: the nightly ran at 02:30
    h.clock.jump(-4 * 3600)  # 22:31 the day before
    await h.clock.advance(60)  # the loop wakes at 22:32 (02:32 before the step)
    assert h.scheduler.next_fire("nightly") == NIGHT + timedelta(minutes=30)
    assert h.scheduled("minutely")[-1] == NIGHT - timedelta(hours=3, minutes=28)
    assert h.scheduler.stats.replanned == 3
    await h.clock.advance(4 * 3600)
    # Vixie cron's rule: past 3 h, the time is taken as new, and 02:30 runs again
    assert h.scheduled("nightly") == [NIGHT + timedelta(minutes=30)] * 2


# ---------------------------------------------------------------- swaps: new fire sequences


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "before",
    [
        'jobs: [{name: j, command: "true", schedule: "0 0 * * *"}]',
        'jobs: [{name: j, command: "true", schedule: "* * * * * * *", enabled: no}]',
    ],
    ids=["retimed", "enabled"],
)
async def test_a_changed_schedule_first_fires_after_the_swap(
    harness: Callable[..., Harness], before: str
) -> None:
    h = harness(jobs(before))
    await h.clock.advance(30.5)
    summary = h.scheduler.replace_jobs(
        jobs('jobs: [{name: j, command: "true", schedule: "* * * * * * *"}]')
    )
    assert summary.changed == ("j",)
    await h.clock.advance(0)
    assert h.runs == []  # nothing from before the swap (12:00:26 to 12:00:30)
    await h.clock.advance(2)
    assert h.scheduled("j") == [T0 + timedelta(seconds=31), T0 + timedelta(seconds=32)]


@pytest.mark.asyncio
async def test_a_new_job_first_fires_after_the_swap(harness: Callable[..., Harness]) -> None:
    h = harness(jobs('jobs: [{name: a, command: "true", schedule: "0 0 * * *"}]'))
    await h.clock.advance(30)
    h.scheduler.replace_jobs(
        jobs(
            """\
            jobs:
              - {name: a, command: "true", schedule: "0 0 * * *"}
              - {name: b, command: "true", schedule: "* * * * * * *"}
            """
        )
    )
    await h.clock.advance(1)
    assert h.scheduled("b") == [T0 + timedelta(seconds=31)]


# ---------------------------------------------------------------- swaps: retries end with the job


def flaky(command: str = "false", enabled: str = "yes") -> dict[str, Job]:
    """A failing hourly job retried 30 s after a failure."""
    text = f"""\
        jobs:
          - name: flaky
            command: "{command}"
            enabled: {enabled}
            schedule: "0 * * * *"
            onFailure: {{retry: {{maximumRetries: 5, initialDelay: 30}}}}
        """
    return jobs(text)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"command": "false; true"}, "it changed"),
        ({"enabled": "no"}, "the job was disabled"),
    ],
    ids=["changed", "disabled"],
)
async def test_a_change_or_disable_ends_the_pending_retry(
    harness: Callable[..., Harness],
    caplog: pytest.LogCaptureFixture,
    edit: dict[str, str],
    reason: str,
) -> None:
    h = harness(flaky())
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 11)  # failed at 13:00:10; retry 1 due at 13:00:40
    h.scheduler.replace_jobs(flaky())  # the same definition: the retry stays
    assert h.scheduler.retry_pending("flaky")
    with caplog.at_level("INFO", logger="cronstable.runtime.scheduler"):
        assert h.scheduler.replace_jobs(flaky(**edit)).changed == ("flaky",)
    assert not h.scheduler.retry_pending("flaky")
    assert f"Job flaky: pending retry 1 dropped: {reason}" in caplog.messages
    await h.clock.advance(120)
    assert [r.attempt for r in h.runs] == [1]


@pytest.mark.asyncio
async def test_a_run_failing_after_its_job_changed_is_not_retried(
    harness: Callable[..., Harness],
) -> None:
    h = harness(flaky())
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 5)  # the 13:00 run is going, with its retry sequence
    h.scheduler.replace_jobs(flaky(command="false; true"))
    await h.clock.advance(600)
    assert [r.attempt for r in h.runs] == [1]
    assert h.outcomes == [("flaky", "failure", 1), ("flaky", "permanent_failure", 1)]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ({"command": "false; true"}, "redefined"),
        ({"enabled": "no"}, "disabled"),
        (None, "removed"),
    ],
    ids=["redefined", "disabled", "removed"],
)
async def test_a_dropped_pending_retry_reports_a_permanent_failure_once(
    harness: Callable[..., Harness], edit: dict[str, str] | None, why: str
) -> None:
    h = harness(flaky())
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 11)  # failed at 13:00:10; retry 1 due at 13:00:40
    assert h.outcomes == [("flaky", "failure", 1)]
    old = h.scheduler.jobs["flaky"]
    h.scheduler.replace_jobs(flaky(**edit) if edit is not None else {})
    h.scheduler.replace_jobs(flaky(**edit) if edit is not None else {})  # once, not twice
    await h.clock.advance(120)
    assert h.outcomes == [("flaky", "failure", 1), ("flaky", "permanent_failure", 1)]
    job, record, _ = h.heard.records[-1]
    assert job is old  # the definition that ran the failed attempt
    assert record.fail_reason == f"retry abandoned: job {why}"
    assert record.outcome == "failed"


@pytest.mark.asyncio
async def test_a_run_ending_in_the_drain_is_reported_and_arms_no_retry(
    harness: Callable[..., Harness],
) -> None:
    h = harness(flaky())
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 5)  # the 13:00 run is going, with its retry sequence
    h.scheduler.stop()
    await h.clock.advance(600)
    assert [r.attempt for r in h.runs] == [1]
    assert h.outcomes == [("flaky", "failure", 1), ("flaky", "permanent_failure", 1)]


@pytest.mark.asyncio
async def test_runs_stopped_by_a_second_signal_are_cancelled_and_not_reported(
    harness: Callable[..., Harness],
) -> None:
    h = harness(flaky())
    h.behaviour["flaky"] = (10.0, 1)
    await h.clock.advance(3600 + 5)
    h.scheduler.stop()
    await h.scheduler.cancel_running()
    await h.clock.advance(1)
    assert h.outcomes == []


@pytest.mark.asyncio
async def test_forbid_and_late_fires_are_told_as_missed(
    harness: Callable[..., Harness],
) -> None:
    table = jobs(
        """\
        jobs:
          - {name: slow, command: "true", schedule: "* * * * *", concurrencyPolicy: Forbid}
          - {name: late, command: "true", schedule: "* * * * *"}
          - {name: deadline, command: "true", schedule: "* * * * *", startingDeadlineSeconds: 90}
        """
    )
    h = harness(table)
    h.behaviour["slow"] = (90.0, 0)
    await h.clock.advance(2 * 60)
    assert [(m.job, m.reason, m.scheduled_time) for m in h.heard.missed] == [
        ("slow", "forbid", T0 + timedelta(minutes=2))
    ]
    h.heard.missed.clear()
    h.clock.jump(10 * 60 + 1)  # the wall clock jumps forward 10 minutes
    await h.clock.advance(0)
    missed = {m.job: m for m in h.heard.missed}
    assert missed["late"].reason == "clock_jump"
    assert missed["deadline"].reason == "deadline"
    assert missed["late"].count == 9  # 12:03 to 12:11; 12:12 is on time
    assert missed["deadline"].count == 8  # and the latest within the deadline runs
