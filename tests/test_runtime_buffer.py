"""concurrencyPolicy BufferOne and BufferAll through the real scheduler, on a manual clock.

A buffered fire waits for the run going and starts the moment it ended, with its own
scheduled time; BufferOne keeps one, BufferAll up to ``bufferLimit``, and a fire past
the bound is skipped as ``buffer_full`` (told as a missed fire, counted).  Retries,
starts on request, pauses, pools and swaps each meet the buffer here once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from manual_harness import T0, Harness, StandInRun, jobs

from cronstable.config import MemoryTree, load
from cronstable.config.desired import Job
from cronstable.ports import Launch, run_id
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.concurrency import admit, buffer_bound
from cronstable.runtime.scheduler import StartRefused
from cronstable.runtime.table import JobSlot, LiveRun

MINUTE = timedelta(minutes=1)


def table(policy: str, extra: str = "") -> dict[str, Job]:
    return jobs(
        f"""\
        jobs:
          - name: slow
            command: "true"
            schedule: "* * * * *"
            concurrencyPolicy: {policy}
            {extra}
        """
    )


@pytest.mark.asyncio
async def test_buffer_one_runs_one_waiting_fire_after_the_run_and_skips_the_rest(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferOne"))
    h.behaviour["slow"] = (150.0, 0)  # each run lasts 2.5 fires
    await h.clock.advance(60 + 1)
    assert h.scheduled("slow") == [T0 + MINUTE]
    await h.clock.advance(60)  # 12:02 waits for the 12:01 run
    assert h.scheduler.buffered("slow") == (T0 + 2 * MINUTE,)
    await h.clock.advance(60)  # 12:03 finds the buffer full
    assert [m.reason for m in h.heard.missed] == ["buffer_full"]
    assert h.heard.missed[0].scheduled_time == T0 + 3 * MINUTE
    await h.clock.advance(30)  # 12:03:30: the first run ends, the buffered one starts
    assert h.scheduled("slow") == [T0 + MINUTE, T0 + 2 * MINUTE]
    assert h.starts("slow") == [T0 + MINUTE, T0 + 3 * MINUTE + timedelta(seconds=30)]
    assert h.scheduler.buffered("slow") == ()
    stats = h.scheduler.stats
    assert (stats.buffered, stats.skipped_buffer_full, stats.skipped_forbid) == (1, 1, 0)
    # never two at once: each run started after the one before it ended
    runs = h.runs
    assert all(
        a.ended is not None and b.started >= a.ended for a, b in zip(runs, runs[1:], strict=False)
    )  # type: ignore[operator]


@pytest.mark.asyncio
async def test_buffer_all_queues_fires_in_order_up_to_the_limit(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferAll", "bufferLimit: 3"))
    h.behaviour["slow"] = (600.0, 0)
    await h.clock.advance(6 * 60 + 1)  # 12:01 runs; 12:02..12:04 wait; 12:05, 12:06 skipped
    assert h.scheduler.buffered("slow") == tuple(T0 + n * MINUTE for n in (2, 3, 4))
    skipped = [m.scheduled_time for m in h.heard.missed if m.reason == "buffer_full"]
    assert skipped == [T0 + 5 * MINUTE, T0 + 6 * MINUTE]
    h.behaviour["slow"] = (150.0, 0)
    await h.clock.advance(20 * 60)
    scheduled = h.scheduled("slow")
    assert scheduled == sorted(scheduled)  # first in, first out
    assert scheduled[:4] == [T0 + n * MINUTE for n in (1, 2, 3, 4)]
    runs = h.runs
    assert all(
        b.started >= a.ended for a, b in zip(runs, runs[1:], strict=False) if a.ended and b.started
    )
    assert len(h.scheduler.buffered("slow")) <= 3


@pytest.mark.asyncio
async def test_buffer_all_loses_nothing_when_runs_catch_up(
    harness: Callable[..., Harness],
) -> None:
    """A burst of slow runs, then fast ones: every fire runs, in order, one at a time."""
    h = harness(table("BufferAll"))
    h.behaviour["slow"] = (170.0, 0)
    await h.clock.advance(4 * 60 + 1)  # 12:01 runs until 12:03:50; 12:02..12:04 wait
    h.behaviour["slow"] = (5.0, 0)
    await h.clock.advance(30 * 60)
    fires = [T0 + n * MINUTE for n in range(1, 35)]
    assert h.scheduled("slow") == fires
    assert h.heard.missed == []


@pytest.mark.asyncio
async def test_the_bound_is_one_for_buffer_one_and_buffer_limit_for_buffer_all() -> None:
    assert buffer_bound(table("BufferOne", "bufferLimit: 7")["slow"]) == 1
    assert buffer_bound(table("BufferAll", "bufferLimit: 7")["slow"]) == 7
    assert buffer_bound(table("BufferAll")["slow"]) == 10


@pytest.mark.asyncio
async def test_a_start_on_request_is_not_buffered(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferOne"))
    h.behaviour["slow"] = (150.0, 0)
    h.scheduler.start_now("slow", T0)  # nothing going: it starts at once
    await h.clock.advance(1)
    with pytest.raises(StartRefused, match="concurrencyPolicy is BufferOne .*not buffered"):
        h.scheduler.start_now("slow", h.clock.now())
    await h.clock.advance(60)  # 12:01 waits for the manual run
    assert h.scheduler.buffered("slow") == (T0 + MINUTE,)


@pytest.mark.asyncio
async def test_a_buffered_fire_waits_for_the_failed_runs_retries(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferOne", "onFailure: {retry: {maximumRetries: 1, initialDelay: 30}}"))
    h.behaviour["slow"] = (50.0, 1)  # 12:01 fails at 12:01:50, its retry is due 12:02:20
    await h.clock.advance(60 + 55)
    assert h.scheduler.retry_pending("slow")
    await h.clock.advance(10)  # 12:02 fires while the retry is pending: it waits
    assert h.scheduler.buffered("slow") == (T0 + 2 * MINUTE,)
    h.behaviour["slow"] = (5.0, 0)
    await h.clock.advance(30)  # the retry runs (12:02:20-25), then the buffered fire
    attempts = [(r.scheduled, r.attempt) for r in h.runs]
    assert attempts == [(T0 + MINUTE, 1), (T0 + MINUTE, 2), (T0 + 2 * MINUTE, 1)]
    assert h.outcomes[-1] == ("slow", "success", 1)


@pytest.mark.asyncio
async def test_a_retry_due_while_a_run_goes_waits_at_the_head_of_the_buffer(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferAll", "onFailure: {retry: {maximumRetries: 1, initialDelay: 5}}"))
    h.behaviour["slow"] = (2.0, 1)
    await h.clock.advance(60 + 3)  # 12:01 failed at 12:01:02; retry due 12:01:07
    h.behaviour["slow"] = (100.0, 0)
    h.scheduler.start_now("slow", h.clock.now())  # a manual run, going at 12:01:07
    await h.clock.advance(57)  # the retry came due and waits; so does 12:02
    assert h.scheduler.buffered("slow") == (T0 + MINUTE, T0 + 2 * MINUTE)
    h.behaviour["slow"] = (1.0, 0)
    await h.clock.advance(60)  # the manual run ends 12:02:43: the retry, then 12:02
    order = [(r.scheduled, r.attempt) for r in h.runs[2:5]]
    assert order == [(T0 + MINUTE, 2), (T0 + 2 * MINUTE, 1), (T0 + 3 * MINUTE, 1)]


@pytest.mark.asyncio
async def test_removing_the_job_drops_its_buffer(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferAll"))
    h.behaviour["slow"] = (600.0, 0)
    await h.clock.advance(3 * 60 + 1)
    assert len(h.scheduler.buffered("slow")) == 2
    h.scheduler.replace_jobs({})
    await h.clock.advance(700)
    assert len(h.runs) == 1  # the run going finished; the buffered fires never ran
    assert h.scheduler.stats.buffer_dropped == 2


@pytest.mark.asyncio
async def test_a_buffered_fire_asks_the_gate_again_when_its_turn_comes(
    harness: Callable[..., Harness],
) -> None:
    """A pause (or a lost leadership) that came while the fire waited drops it."""

    class Gate:
        refuse: str | None = None

        def allows(self, job: Job) -> str | None:
            return self.refuse

        async def release(self) -> None:
            return None

    gate = Gate()
    h = harness(table("BufferOne"), gate=gate)
    h.behaviour["slow"] = (90.0, 0)
    await h.clock.advance(2 * 60 + 1)  # 12:01 runs until 12:02:30; 12:02 waits
    gate.refuse = "paused"
    await h.clock.advance(40)
    assert h.scheduled("slow") == [T0 + MINUTE]
    assert h.scheduler.stats.skipped_cluster.get("paused", 0) >= 1
    gate.refuse = None
    await h.clock.advance(60)
    assert h.scheduled("slow") == [T0 + MINUTE, T0 + 3 * MINUTE]  # the next fire runs


@pytest.mark.asyncio
async def test_stopping_drops_the_buffer(
    harness: Callable[..., Harness],
) -> None:
    h = harness(table("BufferAll"))
    h.behaviour["slow"] = (300.0, 0)
    await h.clock.advance(3 * 60 + 1)
    h.scheduler.stop()
    assert h.scheduler.stats.buffer_dropped == 2
    assert h.scheduler.buffered("slow") == ()


@pytest.mark.asyncio
async def test_a_buffered_fire_queues_in_the_pool_only_once_launched(
    harness: Callable[..., Harness],
) -> None:
    """A buffered fire takes its pool ticket when it is launched, after the run before it
    ended: the pool's queue holds at most one launch of the job at a time."""
    desired = load(
        MemoryTree(
            {
                "c.yaml": b"""
pools: [{name: db, slots: 1}]
jobs:
  - {name: hog, command: "true", schedule: "@reboot", pool: db}
  - name: slow
    command: "true"
    schedule: "*/10 * * * * * *"
    concurrencyPolicy: BufferAll
    pool: db
"""
            }
        ),
        "c.yaml",
    )
    h = harness(dict(desired.jobs))
    h.scheduler.pools.configure(desired.pools)
    h.behaviour["hog"] = (45.0, 0)
    h.behaviour["slow"] = (1.0, 0)
    await h.clock.advance(0)  # @reboot: hog takes the one slot for 45 s
    await h.clock.advance(35)
    # the fire at +10 s waits in the pool's queue (a run going); +20 and +30 in the buffer
    [view] = h.scheduler.pools.views()
    assert [w.run for w in view.waiting] == [run_id("slow", T0 + timedelta(seconds=10), 1)]
    assert h.scheduler.buffered("slow") == (T0 + timedelta(seconds=20), T0 + timedelta(seconds=30))
    await h.clock.advance(30)  # hog ends at +45: the fires run one after another
    assert h.scheduled("slow")[:4] == [T0 + timedelta(seconds=n) for n in (10, 20, 30, 40)]
    assert h.heard.missed == []


def test_admit_counts_a_launch_waiting_for_another_node_as_buffered() -> None:
    job = table("BufferOne")["slow"]
    slot = JobSlot(job=job, order=0, cursor=T0)
    live = LiveRun(StandInRun(ManualClock(T0), job, T0, 1, 60, 0), Launch(job, T0, 1, "fire"), None)
    live.waiting_for = "n2"
    slot.running.append(live)
    room = admit(slot, "fire")
    assert room.full and room.forbidden and room.buffered == 1
    assert admit(slot, "manual").forbidden and not admit(slot, "manual").full
