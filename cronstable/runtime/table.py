"""The scheduler's records: one :class:`JobSlot` per applied job, one :class:`LiveRun`
per run it watches, and the counters (:class:`SchedulerStats`).

Plain data shared by the scheduler and the modules beside it (concurrency, retries,
restore); the rules live there, not here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime

from cronstable.config.desired import Job
from cronstable.ports import FinishedRun, Launch, Run, RunOutcome, RunResult
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.pools import Ticket


@dataclass(slots=True)
class SchedulerStats:
    fires: int = 0
    """Scheduled fires that started a run (catch-ups included)."""
    skipped_forbid: int = 0
    missed: int = 0
    """Fires skipped because they were found too late."""
    catch_ups: int = 0
    clock_jumps: int = 0
    """Wall-clock steps found, either way."""
    replanned: int = 0
    """Jobs planned anew after the wall clock stepped back."""
    replaced: int = 0
    retries: int = 0
    skipped_pool_timeout: int = 0
    """Launches that waited in their pool's queue past poolTimeout."""
    skipped_pool_full: int = 0
    """Launches that found their pool's queue full."""
    skipped_cluster: dict[str, int] = field(default_factory=dict)
    """Fires and retries the cluster gate held back, by reason."""


@dataclass(eq=False, slots=True)
class LiveRun:
    """A run the scheduler watches, from its launch until it ended."""

    run: Run
    launch: Launch
    """What it runs: the definition (which a swap may since have changed), fire, attempt."""
    retry: RetryState | None
    """The retry sequence it belongs to."""
    replaced: bool = False
    cancelled: bool = False
    """Stopped through a cancel on request: no report, no retry."""
    task: asyncio.Task[None] | None = None
    stopping: asyncio.Future[None] | None = None
    """The cancel() of a replaced run, which a replacement waits for."""
    adopted: datetime | None = None
    """When a run adopted after a restart started (it is not this daemon's child)."""
    ticket: Ticket | None = None
    """Its claim on a slot of its job's pool (None: the job names no pool)."""
    outcome: RunOutcome | None = None
    """How it ended, once it has (None: not yet, or it never started)."""

    @property
    def job(self) -> Job:
        return self.launch.job

    @property
    def scheduled_time(self) -> datetime:
        return self.launch.scheduled

    @property
    def attempt(self) -> int:
        return self.launch.attempt

    @property
    def manual(self) -> bool:
        """Started on request (no scheduled fire, no retry)."""
        return self.launch.kind == "manual"


@dataclass(eq=False, slots=True)
class JobSlot:
    """One applied job: its definition, place in the schedule, retry sequence and runs."""

    job: Job
    order: int
    cursor: datetime
    """The last fire instant handled (run, skipped or missed), or when the job arrived."""
    next_fire: datetime | None = None
    next_start: datetime | None = None
    """When the next fire starts: ``next_fire`` delayed by the job's ``jitter`` (the heap's
    key; the same instant without jitter)."""
    generation: int = 0
    """Bumped whenever the next fire is planned anew: older heap entries are stale."""
    running: list[LiveRun] = field(default_factory=list)
    retry: RetryState | None = None
    failed_run: tuple[Job, FinishedRun] | None = None
    """The failed run the pending retry follows, with the definition that ran it."""
    last_result: RunResult | None = None
    resumed: bool = False
    """The cursor came from durable state: fires missed before it were missed while the
    daemon was down."""

    def active(self) -> list[LiveRun]:
        """The runs going that no Replace is stopping already."""
        return [run for run in self.running if not run.replaced]
