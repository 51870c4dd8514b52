"""The real scheduler on a manual clock, its runs stand-ins on the same clock.

Days of schedule pass in milliseconds: a :class:`StandInRun` lasts ``duration``
seconds of manual-clock time and exits with ``code``; everything else is the real
:class:`~cronstable.runtime.scheduler.Scheduler` (the real process layer is tested
in test_runtime_process.py).  The ``harness`` fixture makes one :class:`Harness` per
call: ``harness(jobs(TEXT))`` for a table of jobs, ``harness(desired(TEXT))`` for a
revision with workflows, with the scheduler's keyword arguments (``gate=`` …).
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest_asyncio
from heard_reports import HeardReports

from cronstable.config import DesiredState, MemoryTree, load
from cronstable.config.desired import Job
from cronstable.ports import FlowRunView, Moment, RunResult
from cronstable.runtime.clock import ManualClock
from cronstable.runtime.scheduler import Scheduler

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)

Behaviour = tuple[float, int] | list[tuple[float, int]]
"""(duration, exit code) of every attempt, or of each attempt in turn (the last one
repeats)."""


def desired(text: str) -> DesiredState:
    return load(MemoryTree({"c.yaml": textwrap.dedent(text).encode()}), "c.yaml")


def jobs(text: str) -> dict[str, Job]:
    return dict(desired(text).jobs)


@dataclass(eq=False)
class StandInRun:
    """A run that lasts ``duration`` seconds of manual-clock time and exits with ``code``."""

    clock: ManualClock
    job: Job
    scheduled: datetime
    attempt: int
    duration: float
    code: int
    started: datetime | None = None
    ended: datetime | None = None
    cancelled: bool = False
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pid(self) -> int | None:
        return 4242

    @property
    def start_ticks(self) -> int | None:
        return None  # 4242 is no process: the state keeper reads /proc and finds none

    async def start(self) -> None:
        self.started = self.clock.now()

    async def wait(self) -> RunResult:
        sleeper = asyncio.ensure_future(self.clock.sleep(self.duration))
        stopper = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        sleeper.cancel()
        stopper.cancel()
        self.ended = self.clock.now()
        code = -15 if self.cancelled else self.code
        assert self.started is not None
        return RunResult(
            job_name=self.job.name,
            scheduled_time=self.scheduled,
            attempt=self.attempt,
            started_at=self.started,
            finished_at=self.ended,
            duration=(self.ended - self.started).total_seconds(),
            returncode=code,
            stdout=None,
            stderr=None,
            stdout_discarded=0,
            stderr_discarded=0,
            fail_reason=None if code == 0 else ("cancelled" if self.cancelled else f"exit {code}"),
            timed_out=False,
            cancelled=self.cancelled,
            pid=4242,
        )

    async def cancel(self) -> None:
        self.cancelled = True
        self._stop.set()


class HeardFlows:
    """A real FlowListener: what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, FlowRunView]] = []

    def flow_started(self, run: FlowRunView) -> None:
        self.events.append(("started", run))

    def flow_changed(self, run: FlowRunView) -> None:
        self.events.append(("changed", run))

    def flow_finished(self, run: FlowRunView) -> None:
        self.events.append(("finished", run))

    def finished(self) -> list[FlowRunView]:
        return [run for event, run in self.events if event == "finished"]


@dataclass
class Harness:
    clock: ManualClock
    scheduler: Scheduler
    runs: list[StandInRun]
    heard: HeardReports
    flows: HeardFlows
    behaviour: dict[str, Behaviour]
    """Per job: how its runs go (:data:`Behaviour`; ``(1.0, 0)`` when not given)."""

    @property
    def outcomes(self) -> list[tuple[str, Moment, int]]:
        """The report moments asked for: (job, moment, attempt)."""
        return self.heard.moments

    def starts(self, name: str | None = None) -> list[datetime]:
        return [r.started for r in self.runs if name is None or r.job.name == name if r.started]

    def scheduled(self, name: str) -> list[datetime]:
        return [r.scheduled for r in self.runs if r.job.name == name]

    def started(self, name: str) -> list[datetime]:
        return [r.started for r in self.runs if r.job.name == name and r.started is not None]

    def ended(self, name: str) -> list[datetime]:
        return [r.ended for r in self.runs if r.job.name == name and r.ended is not None]

    def order(self) -> list[str]:
        return [r.job.name for r in sorted(self.runs, key=lambda r: (r.started or T0, r.job.name))]

    def last(self, workflow: str) -> FlowRunView:
        slot = self.scheduler.flow_slot(workflow)
        assert slot is not None and slot.last_run is not None
        return slot.last_run

    def states(self, workflow: str) -> dict[str, str]:
        return {task.task: task.state for task in self.last(workflow).tasks}


@pytest_asyncio.fixture
async def harness() -> AsyncIterator[Callable[..., Harness]]:
    created: list[tuple[Harness, asyncio.Task[None]]] = []

    def make(
        table: Mapping[str, Job] | DesiredState, start: datetime = T0, **kwargs: Any
    ) -> Harness:
        clock = ManualClock(start)
        runs: list[StandInRun] = []
        heard = HeardReports()
        flows = HeardFlows()
        behaviour: dict[str, Behaviour] = {}

        def spawner(job: Job, scheduled: datetime, attempt: int) -> StandInRun:
            plan = behaviour.get(job.name, (1.0, 0))
            attempts = [plan] if isinstance(plan, tuple) else plan
            duration, code = attempts[min(attempt, len(attempts)) - 1]
            run = StandInRun(clock, job, scheduled, attempt, duration, code)
            runs.append(run)
            return run

        scheduler = Scheduler(
            clock, spawner, report_listeners=[heard], flow_listeners=[flows], **kwargs
        )
        if isinstance(table, DesiredState):
            scheduler.replace_jobs(table.jobs, table.workflows)
        else:
            scheduler.replace_jobs(table)
        h = Harness(clock, scheduler, runs, heard, flows, behaviour)
        created.append((h, asyncio.create_task(scheduler.run())))
        return h

    yield make
    for h, task in created:
        h.scheduler.stop()
        await h.scheduler.cancel_running()
        await h.clock.advance(3600)
        await asyncio.wait_for(task, 5)
