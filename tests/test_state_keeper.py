"""Durable state on an injected clock: a node's life, its end, and the next start.

The scheduler is real, runs are the stand-ins of manual_harness.py (a manual
clock drives them), the store is a real state directory.  A "restart" builds a new
scheduler and keeper on the same directory and restores what the first left.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from manual_harness import StandInRun

from cronstable.config import MemoryTree, load
from cronstable.config.desired import Job
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.history import RunHistory
from cronstable.runtime.scheduler import Scheduler
from cronstable.state.base import node_key
from cronstable.state.filesystem import FilesystemStore
from cronstable.state.keeper import HISTORY_GAP, HISTORY_OUTPUT, StateKeeper
from cronstable.state.writer import Writer
from cronstable.web import encode

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio]

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def jobs(text: str) -> dict[str, Job]:
    state = load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")
    return dict(state.jobs)


FLAKY = """\
jobs:
  - name: flaky
    command: "false"
    schedule: "0 * * * *"
    {extra}
    onFailure:
      retry: {{maximumRetries: 3, initialDelay: 60, backoffMultiplier: 2, maximumDelay: 600}}
"""


@dataclass
class Life:
    """One daemon's life on node n1."""

    clock: ManualClock
    scheduler: Scheduler
    keeper: StateKeeper
    history: RunHistory
    runs: list[StandInRun]
    task: asyncio.Task[None]
    store: FilesystemStore

    def scheduled(self, name: str) -> list[tuple[datetime, int, datetime | None]]:
        return [(r.scheduled, r.attempt, r.started) for r in self.runs if r.job.name == name]

    async def advance(self, seconds: int, step: int = 1) -> None:
        """``seconds`` of manual time, ``step`` at a time, letting each step's record
        writes (real I/O in a thread) finish before the clock moves on."""
        for _ in range(seconds // step):
            await self.clock.advance(step)
            for _ in range(2):
                await self.settle()
                await asyncio.sleep(0.002)

    async def settle(self) -> None:
        assert self.keeper.writer is not None
        if self.keeper.waiting:
            return  # nothing is written until the store answers
        assert await self.keeper.writer.flush(within=5)

    async def come_up(self) -> None:
        """The store it waited for answers: its records, read before this life's."""
        records = await self.store.list(node_key("n1") + "/")
        self.keeper.came_up(records, self.clock.now())
        await self.settle()

    async def crash(self) -> None:
        """Like kill -9: nothing settles, nothing drains (what was written stays)."""
        await self.settle()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        for task in list(self.scheduler._tasks):
            task.cancel()
        await self.keeper.close()


@pytest_asyncio.fixture
async def life(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    lives: list[Life] = []

    async def start(
        table: dict[str, Job],
        now: datetime,
        behaviour: dict[str, tuple[float, int]],
        *,
        gated: bool = False,
        gate: Any = None,
        waiting: bool = False,
        policy: str = "degrade",
    ) -> Life:
        clock = ManualClock(now)
        runs: list[StandInRun] = []

        def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
            duration, code = behaviour.get(job.name, (1.0, 0))
            run = StandInRun(clock, job, scheduled, attempt, duration, code)
            runs.append(run)
            return run

        history = RunHistory()
        keeper = StateKeeper(
            "n1", lambda: scheduler, history, boot="boot-1", gated=lambda job: gated
        )
        scheduler = Scheduler(
            clock,
            spawner,
            gate=gate,
            guards=[keeper],
            hooks=keeper,
            run_listeners=[history, keeper],
        )
        scheduler.replace_jobs(table)
        store = FilesystemStore(tmp_path / "state")
        await store.check()
        if waiting:  # as if the store had not answered at the start: restored later
            keeper.use(store, policy, waiting="no answer in time")  # type: ignore[arg-type]
        else:
            records = await store.list(node_key("n1") + "/")
            keeper.use(store, policy)  # type: ignore[arg-type]
            keeper.restore(records, clock.now())
        made = Life(
            clock, scheduler, keeper, history, runs, asyncio.create_task(scheduler.run()), store
        )
        lives.append(made)
        await asyncio.sleep(0)
        return made

    yield start
    for made in lives:
        if not made.task.done():
            made.scheduler.stop()
            await made.scheduler.cancel_running()
            await made.clock.advance(3600)
            await asyncio.wait_for(made.task, 5)
        await made.keeper.close()


async def record(tmp_path: Path, *rest: str) -> dict[str, Any] | None:
    return await FilesystemStore(tmp_path / "state").get(node_key("n1", *rest))


async def test_a_pending_retry_is_rearmed_at_its_original_time(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    table = jobs(FLAKY.format(extra=""))
    first: Life = await life(table, T0 + timedelta(minutes=59), {"flaky": (1.0, 1)})
    await first.advance(61)  # fire at 13:00 fails at 13:00:01; retry 1 due 13:01:01
    await first.settle()
    pending = await record(tmp_path, "retries", "flaky")
    assert pending is not None and pending["status"] == "pending" and pending["count"] == 1
    await first.crash()

    second: Life = await life(table, first.clock.now() + timedelta(seconds=20), {"flaky": (1.0, 1)})
    await second.advance(60)
    [(scheduled, attempt, started)] = second.scheduled("flaky")
    assert (scheduled, attempt) == (T0 + timedelta(hours=1), 2)
    assert started == T0 + timedelta(hours=1, seconds=61)  # the original notBefore
    await second.settle()
    # it failed again: retry 2 pending with the doubled delay, as if never restarted
    pending = await record(tmp_path, "retries", "flaky")
    assert pending is not None and pending["status"] == "pending" and pending["count"] == 2
    assert pending["notBefore"] == "2026-06-01T13:03:02Z"


@pytest.mark.parametrize(
    ("extra", "late", "outcome"),
    [
        ("", 30, "overdue"),  # no deadline: overdue beyond the 5 s tolerance settles
        ("startingDeadlineSeconds: 120", 30, "ran"),  # within the deadline: at once
        ("startingDeadlineSeconds: 120", 300, "overdue"),
        ("", 3, "ran"),  # within the tolerance: on time
    ],
)
async def test_an_overdue_retry_runs_within_the_deadline_else_settles(
    life: Callable[..., Any], tmp_path: Path, extra: str, late: int, outcome: str
) -> None:
    table = jobs(FLAKY.format(extra=extra))
    first: Life = await life(table, T0 + timedelta(minutes=59), {"flaky": (1.0, 1)})
    await first.advance(61)
    await first.crash()
    due = T0 + timedelta(hours=1, seconds=61)
    second: Life = await life(table, due + timedelta(seconds=late), {"flaky": (1.0, 1)})
    await second.advance(1)
    await second.settle()
    if outcome == "ran":
        assert [a for _, a, _ in second.scheduled("flaky")] == [2]
    else:
        assert second.scheduled("flaky") == []
        settled = await record(tmp_path, "retries", "flaky")
        assert settled is not None and (settled["status"], settled["reason"]) == (
            "settled",
            outcome,
        )


@pytest.mark.parametrize(
    ("after", "reason"),
    [
        (FLAKY.format(extra="").replace('"false"', '"false; true"'), "redefined"),
        (FLAKY.format(extra="enabled: false"), "disabled"),
        ('jobs: [{name: other, command: "true", schedule: "@yearly"}]', "removed"),
    ],
)
async def test_a_retry_of_a_changed_disabled_or_removed_job_settles(
    life: Callable[..., Any], tmp_path: Path, after: str, reason: str
) -> None:
    first: Life = await life(
        jobs(FLAKY.format(extra="")), T0 + timedelta(minutes=59), {"flaky": (1.0, 1)}
    )
    await first.advance(61)
    await first.crash()
    second: Life = await life(jobs(after), first.clock.now(), {"flaky": (1.0, 1)})
    await second.advance(120, step=10)
    await second.settle()
    assert second.scheduled("flaky") == []
    settled = await record(tmp_path, "retries", "flaky")
    assert settled is not None and (settled["status"], settled["reason"]) == ("settled", reason)


async def test_a_graceful_stop_keeps_the_pending_retry_and_a_launch_settles_it(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    first: Life = await life(
        jobs(FLAKY.format(extra="")), T0 + timedelta(minutes=59), {"flaky": (1.0, 1)}
    )
    await first.advance(61)
    first.scheduler.stop()
    await first.advance(1)
    await asyncio.wait_for(first.task, 5)
    await first.settle()
    pending = await record(tmp_path, "retries", "flaky")
    assert pending is not None and pending["status"] == "pending"
    second: Life = await life(jobs(FLAKY.format(extra="")), first.clock.now(), {"flaky": (1.0, 0)})
    await second.advance(60)
    await second.settle()
    done = await record(tmp_path, "retries", "flaky")
    assert done is not None and (done["status"], done["reason"]) == ("settled", "launched")


async def test_the_last_fire_resumes_with_one_catch_up_within_the_deadline(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    text = (
        'jobs: [{name: t, command: "true", schedule: "*/10 * * * *", startingDeadlineSeconds: 900}]'
    )
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9), {})
    await first.advance(120, step=10)  # 12:10 runs
    await first.crash()
    fire = await record(tmp_path, "fires", "t")
    assert fire is not None and fire["fire"] == "2026-06-01T12:10:00Z"
    # down from 12:11 to 12:45: 12:20, 12:30 and 12:40 missed; 12:40 is within 900 s
    second: Life = await life(jobs(text), T0 + timedelta(minutes=45), {})
    await second.advance(1)
    assert [s for s, _, _ in second.scheduled("t")] == [T0 + timedelta(minutes=40)]
    await second.advance(5 * 60, step=10)
    assert [s for s, _, _ in second.scheduled("t")][-1] == T0 + timedelta(minutes=50)


async def test_a_redefined_job_does_not_resume_from_its_old_last_fire(
    life: Callable[..., Any],
) -> None:
    text = (
        'jobs: [{name: t, command: "true", schedule: "*/10 * * * *", startingDeadlineSeconds: 900}]'
    )
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9), {})
    await first.advance(120, step=10)
    await first.crash()
    second: Life = await life(
        jobs(text.replace('"true"', '"true; true"')), T0 + timedelta(minutes=45), {}
    )
    await second.advance(1)
    assert second.scheduled("t") == []


async def test_the_history_comes_back_with_its_output_capped(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    text = 'jobs: [{name: t, command: "true", schedule: "*/10 * * * *"}]'
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9), {})
    await first.advance(120, step=10)
    assert len(first.history.finished("t")) == 1
    big = "x" * (HISTORY_OUTPUT * 2)
    from dataclasses import replace

    run = first.history.finished("t")[0]
    first.history.restore("t", [replace(run, stdout=big)])
    first.keeper._dirty_history.add("t")
    await first.crash()  # close() writes the history it has
    second: Life = await life(jobs(text), first.clock.now(), {})
    kept = second.history.finished("t")
    assert len(kept) == 2
    assert kept[0].stdout is not None and len(kept[0].stdout) == HISTORY_OUTPUT
    assert kept[0].stdout_dropped == HISTORY_OUTPUT


async def test_the_rounds_write_a_jobs_history_at_most_once_a_gap(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    # each write is the job's whole history: a job that runs often is rewritten once in
    # HISTORY_GAP by the rounds, its first change at once; a stop writes what waits
    text = 'jobs: [{name: t, command: "true", schedule: "*/10 * * * *"}]'
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9), {})
    await first.advance(120, step=10)
    (run,) = first.history.finished("t")
    now = [1000.0]
    first.keeper.monotonic = lambda: now[0]

    async def kept() -> int:
        await first.settle()
        found = await record(tmp_path, "history", "t")
        return 0 if found is None else len(found["runs"])

    from dataclasses import replace

    def ran() -> int:  # the job ran once more: how many runs its history holds
        first.history.restore("t", [replace(run, duration=len(first.history.finished("t")))])
        first.keeper._dirty_history.add("t")
        return len(first.history.finished("t"))

    two = ran()
    first.keeper._flush_history(spaced=True)
    assert await kept() == two  # the first change: written at the round
    three = ran()
    now[0] += HISTORY_GAP - 1
    first.keeper._flush_history(spaced=True)
    assert await kept() == two  # within the gap: it waits
    assert "t" in first.keeper._dirty_history
    now[0] += 1
    first.keeper._flush_history(spaced=True)
    assert await kept() == three  # the gap passed
    four = ran()
    first.keeper._flush_history(spaced=True)
    assert await kept() == three
    await first.crash()  # close() writes what waits, gap or not
    assert len((await record(tmp_path, "history", "t") or {}).get("runs", [])) == four > three


async def test_the_writer_coalesces_and_retries_until_the_store_answers(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the directory should be")
    store = FilesystemStore(blocker, timeout=2)
    results: list[bool] = []
    writer = Writer(store, on_result=lambda ok, error: results.append(ok))
    first = writer.submit("nodes/n1/fires/a", {"n": 1})
    assert await first is False  # the directory cannot be made
    later = writer.submit("nodes/n1/fires/a", {"n": 2})
    writer.submit("nodes/n1/fires/a", {"n": 3})
    assert writer.queued() == 1
    blocker.unlink()
    assert await asyncio.wait_for(later, 10) is True  # a newer value was written
    got = await store.get("nodes/n1/fires/a")
    assert got is not None and got["n"] == 3
    assert results[0] is False and results[-1] is True
    await writer.close()


async def test_the_writer_is_bounded(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("")
    writer = Writer(FilesystemStore(blocker, timeout=2), max_queued=3)
    futures = [writer.submit(f"k/{n}", {}) for n in range(5)]
    await asyncio.sleep(0)
    assert writer.queued() <= 3 and writer.dropped >= 1
    assert await asyncio.wait_for(futures[1], 5) is False
    await writer.close()


async def test_a_resumed_job_whose_next_fire_is_ahead_fires_it_as_usual(
    life: Callable[..., Any],
) -> None:
    text = 'jobs: [{name: t, command: "true", schedule: "*/5 * * * *", startingDeadlineSeconds: 0}]'
    first: Life = await life(jobs(text), T0 + timedelta(minutes=4), {})
    await first.advance(70, step=10)  # 12:05 runs
    await first.crash()
    # back at 12:07: nothing was missed; 12:10 is an ordinary fire, even found 30 ms late
    second: Life = await life(jobs(text), T0 + timedelta(minutes=7), {})
    await second.advance(179)
    second.clock.jump(1.03)
    await second.advance(1)
    assert [s for s, _, _ in second.scheduled("t")] == [T0 + timedelta(minutes=10)]
    assert second.scheduler.stats.missed == 0


async def test_jobs_the_leadership_places_do_not_resume(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    text = (
        "jobs: [{name: t, command: 'true', schedule: '*/10 * * * *', "
        "startingDeadlineSeconds: 900, clusterPolicy: PreferLeader}]"
    )
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9), {})
    await first.advance(120, step=10)  # without leader election: a record is kept
    await first.crash()
    assert await record(tmp_path, "fires", "t") is not None
    # under leader election the job's fires are the leadership's: no catch-up here
    second: Life = await life(jobs(text), T0 + timedelta(minutes=45), {}, gated=True)
    await second.advance(1)
    assert second.scheduled("t") == []
    await second.settle()
    assert await record(tmp_path, "fires", "t") is None


class Gate:
    """The cluster gate as the scheduler sees it, answering what the test says."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer

    def allows(self, job: Job) -> str | None:
        return self.answer

    async def release(self) -> None:
        return None


async def test_a_rearmed_retry_waits_while_the_leadership_is_unknown(
    life: Callable[..., Any],
) -> None:
    table = jobs(FLAKY.format(extra=""))
    first: Life = await life(table, T0 + timedelta(minutes=59), {"flaky": (1.0, 1)})
    await first.advance(61)
    await first.crash()
    gate = Gate("leadership_unknown")
    second: Life = await life(table, first.clock.now(), {"flaky": (1.0, 1)}, gate=gate)
    await second.advance(90, step=5)  # due at 13:01:01; the leadership is still unknown
    assert second.scheduled("flaky") == []
    gate.answer = None  # known now, and this node may run it
    await second.advance(2)
    assert [a for _, a, _ in second.scheduled("flaky")] == [2]


LATE = """\
jobs:
  - name: t
    command: "true"
    schedule: "*/10 * * * *"
    startingDeadlineSeconds: 900
  - name: v
    command: "true"
    schedule: "5-55/10 * * * *"
    startingDeadlineSeconds: 900
  - name: a
    command: "false"
    schedule: "0 * * * *"
    startingDeadlineSeconds: 3600
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 300, backoffMultiplier: 2, maximumDelay: 600}
  - name: b
    command: "false"
    schedule: "0 * * * *"
    startingDeadlineSeconds: 3600
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 300, backoffMultiplier: 2, maximumDelay: 600}
"""


async def test_a_store_that_answers_late_restores_but_what_ran_meanwhile_wins(
    life: Callable[..., Any], tmp_path: Path
) -> None:
    table = jobs(LATE)
    failing = {"a": (1.0, 1), "b": (1.0, 1)}
    first: Life = await life(table, T0 + timedelta(minutes=54, seconds=30), failing)
    await first.advance(360, step=10)  # v 12:55, t 13:00; a and b fail at 13:00, retry 13:05
    await first.crash()
    # down from 13:00:30; back at 13:20:30, the store not answering yet
    second: Life = await life(
        table, T0 + timedelta(hours=1, minutes=20, seconds=30), {"b": (1.0, 1)}, waiting=True
    )
    assert encode.state(second.keeper.view())["connecting"] is True
    assert encode.state(second.keeper.view())["available"] is False
    second.scheduler.start_now("a", second.clock.now())  # a runs here (and succeeds)
    await second.advance(280, step=10)  # 13:25 v fires here; nothing is written yet
    assert [s for s, _, _ in second.scheduled("v")] == [T0 + timedelta(hours=1, minutes=25)]
    assert second.scheduled("t") == [] and second.scheduled("b") == []
    assert (await record(tmp_path, "fires", "v"))["fire"] == "2026-06-01T12:55:00Z"  # type: ignore[index]
    await second.come_up()  # 13:25:10
    await second.advance(30, step=5)
    # t never fired here: it resumes from 13:00 and catches 13:20 up, once (within 900 s)
    assert [s for s, _, _ in second.scheduled("t")] == [T0 + timedelta(hours=1, minutes=20)]
    # v fired here at 13:25: its old record does not rewind it (no second 13:25, no 13:15)
    assert [s for s, _, _ in second.scheduled("v")] == [T0 + timedelta(hours=1, minutes=25)]
    # b's retry was pending and b did not run here: re-armed, overdue within the deadline
    assert [(s, n) for s, n, _ in second.scheduled("b")] == [(T0 + timedelta(hours=1), 2)]
    # a ran here meanwhile: the old retry is settled, not run
    assert [n for _, n, _ in second.scheduled("a")] == [1]
    await second.settle()
    settled = await record(tmp_path, "retries", "a")
    assert settled is not None and (settled["status"], settled["reason"]) == (
        "settled",
        "superseded_by_run",
    )
    assert (await record(tmp_path, "fires", "v"))["fire"] == "2026-06-01T13:25:00Z"  # type: ignore[index]
    assert (await record(tmp_path, "fires", "t"))["fire"] == "2026-06-01T13:20:00Z"  # type: ignore[index]
    assert encode.state(second.keeper.view())["connecting"] is False


@pytest.mark.parametrize("policy", ["degrade", "fail-closed"])
async def test_while_the_store_has_not_answered_on_store_unavailable_decides(
    life: Callable[..., Any], policy: str
) -> None:
    text = """\
jobs:
  - {name: t, command: "true", schedule: "*/10 * * * *", startingDeadlineSeconds: 900}
  - {name: plain, command: "true", schedule: "*/10 * * * *"}
"""
    waiting: Life = await life(
        jobs(text), T0 + timedelta(minutes=9, seconds=50), {}, waiting=True, policy=policy
    )
    await waiting.advance(20, step=5)
    assert [s for s, _, _ in waiting.scheduled("plain")] == [T0 + timedelta(minutes=10)]
    started = [s for s, _, began in waiting.scheduled("t") if began is not None]
    assert started == ([T0 + timedelta(minutes=10)] if policy == "degrade" else [])
    # runs that came and went meanwhile leave nothing queued (the queue stays bounded)
    assert waiting.keeper.writer is not None
    assert [k for k in waiting.keeper.writer._queued if "/running/" in k] == []


def store_writes(store: FilesystemStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each change the store applies from now on: (key, whether a record was put)."""
    written: list[tuple[str, bool]] = []
    apply = store.apply

    async def spy(changes: Any) -> None:
        written.extend((key, record is not None) for key, record in changes)
        await apply(changes)

    monkeypatch.setattr(store, "apply", spy)
    return written


async def test_a_run_that_ends_within_the_linger_writes_no_running_record(
    life: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a running record is queued RUNNING_LINGER after the start: a short run leaves
    # nothing to write and then remove; a long one is written, and removed at its end
    from cronstable.state import keeper as keeper_module

    monkeypatch.setattr(keeper_module, "RUNNING_LINGER", 0.3)
    text = """\
    jobs:
      - {name: quick, command: "true", schedule: "*/10 * * * *"}
      - {name: long, command: "true", schedule: "*/10 * * * *"}
    """
    first: Life = await life(
        jobs(text), T0 + timedelta(minutes=9, seconds=59), {"quick": (1, 0), "long": (600, 0)}
    )
    written = store_writes(first.store, monkeypatch)
    running = node_key("n1", "running") + "/"
    await first.advance(3)  # both started at :10:00; quick ended a (manual) second later
    assert len(first.history.finished("quick")) == 1
    assert not [key for key, _ in written if key.startswith(running)]  # nothing yet
    await asyncio.sleep(0.5)  # the linger passes (real time): long's record is queued
    await first.settle()
    records = await first.store.list(running)
    assert [record["job"] for record in records.values() if record] == ["long"]
    assert [r for r in records.values() if r and r["job"] == "long"][0]["pid"] == 4242
    assert [key for key, _ in written if key.startswith(running)] == list(records)
    await first.advance(600, step=60)  # long ends: its record is removed
    assert await first.store.list(running) == {}
    assert [present for key, present in written if key.startswith(running)] == [True, False]


async def test_a_stop_writes_the_running_records_still_lingering(
    life: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the runs a stop leaves going are adopted by the next start: their records must
    # be written even when the stop came within RUNNING_LINGER of their start
    from cronstable.state import keeper as keeper_module

    monkeypatch.setattr(keeper_module, "RUNNING_LINGER", 3600.0)
    text = 'jobs: [{name: long, command: "true", schedule: "*/10 * * * *"}]'
    first: Life = await life(jobs(text), T0 + timedelta(minutes=9, seconds=59), {"long": (600, 0)})
    await first.advance(2)
    running = node_key("n1", "running") + "/"
    assert await first.store.list(running) == {}  # lingering
    await first.crash()  # the keeper's close (as at a stop) writes it
    (record,) = (await FilesystemStore(tmp_path / "state").list(running)).values()
    assert record is not None and record["job"] == "long" and record["bootId"] == "boot-1"


async def _yearly_job(
    life: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, *, linger: float
) -> Life:
    """A daemon's life with one job, ``long``, that never fires on its own (its runs are
    started by hand), and ``linger`` seconds of RUNNING_LINGER."""
    from cronstable.state import keeper as keeper_module

    monkeypatch.setattr(keeper_module, "RUNNING_LINGER", linger)
    text = 'jobs: [{name: long, command: "true", schedule: "0 0 1 1 *"}]'
    made: Life = await life(jobs(text), T0, {})
    return made


def _start(job: str, run: str, *, adopted: bool = False) -> Any:
    from cronstable.ports import RunStart

    at = T0 + timedelta(minutes=10)
    return RunStart(run, job, at, 1, at, 4242, False, adopted=adopted)


def _ended(start: Any) -> Any:
    from cronstable.ports import RunResult

    at = start.started_at
    return RunResult(start.job, at, 1, at, at, 0.1, 0, None, None, 0, 0, None, False, False, 4242)


async def test_each_running_record_waits_its_own_linger(
    life: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run that started just before another's record was queued waits its own time:
    # ending within it, it writes nothing
    first = await _yearly_job(life, monkeypatch, linger=0.3)
    keeper = first.keeper
    written = store_writes(first.store, monkeypatch)
    early, late = _start("long", "long@a#1"), _start("long", "long@b#1")
    keeper.run_started(early)
    await asyncio.sleep(0.2)
    keeper.run_started(late)
    await asyncio.sleep(0.2)  # early's linger passed (written), late's not yet
    keeper.run_finished(late, _ended(late), "succeeded")
    await asyncio.sleep(0.3)
    await first.settle()
    running = await first.store.list(node_key("n1", "running") + "/")
    assert [record["runId"] for record in running.values() if record] == ["long@a#1"]
    assert written == [(node_key("n1", "running", "long@a#1"), True)]  # nothing of late's


async def test_an_adopted_run_that_ends_at_once_still_removes_its_record(
    life: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # its record is the previous daemon's, in the store already: not held back, so its
    # end removes it even within RUNNING_LINGER
    first = await _yearly_job(life, monkeypatch, linger=3600.0)
    key = node_key("n1", "running", "long@a#1")
    await first.store.put(key, {"job": "long", "runId": "long@a#1", "pid": 4242})
    adopted = _start("long", "long@a#1", adopted=True)
    first.keeper.run_started(adopted)
    first.keeper.run_finished(adopted, _ended(adopted), "unknown")
    await first.settle()
    assert await first.store.get(key) is None
