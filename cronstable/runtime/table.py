"""The scheduler's records: one :class:`JobSlot` per applied job, one :class:`LiveRun`
per run it watches, one :class:`FlowSlot` per applied workflow with a :class:`FlowRun`
per run of it going (a :class:`TaskRun` per task), and the counters
(:class:`SchedulerStats`).

Plain data shared by the scheduler and the modules beside it (concurrency, retries,
restore); the rules live there, not here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from cronstable.config.desired import Job, Workflow
from cronstable.ports import (
    FinishedRun,
    FlowKind,
    FlowRunView,
    Launch,
    Run,
    RunOutcome,
    RunResult,
    RunStart,
    TaskRunView,
    XcomValue,
)
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.pools import Ticket
from cronstable.workflows.dag import Outcome, TaskState


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
    flow_runs: int = 0
    """Workflow runs started (fires, catch-ups, @reboot and starts on request)."""


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
    flow: FlowRun | None = None
    """The workflow run this is a task's run of (None for a job's run)."""
    on_end: Callable[[LiveRun], None] | None = None
    """Called once the run is over, however it ended (a workflow's task: its run decides)."""
    start: RunStart | None = None
    """Set once it started."""
    outcome: RunOutcome | None = None
    """Set once it ended after starting."""
    record: FinishedRun | None = None
    refused: str | None = None
    """Why a launch guard refused it (it never started)."""
    ticket: Ticket | None = None
    """Its claim on a slot of its job's pool (None: the job names no pool)."""

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


@dataclass(eq=False, slots=True)
class TaskRun:
    """One task of a :class:`FlowRun`."""

    state: TaskState = "pending"
    attempts: int = 0
    """Runs of it started in this workflow run."""
    live: LiveRun | None = None
    """Its run going now."""
    retry: RetryState | None = None
    retry_at: datetime | None = None
    """When its pending retry is due (it stays ``running`` meanwhile)."""
    retry_task: asyncio.Task[None] | None = None
    run_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    fail_reason: str | None = None
    pid: int | None = None


@dataclass(eq=False, slots=True)
class FlowRun:
    """A run of a workflow, from its start until its last task ended."""

    flow: Workflow
    """The definition it runs, kept however the workflow changes meanwhile."""
    slot: FlowSlot
    id: str
    scheduled: datetime
    kind: FlowKind
    started_at: datetime
    tasks: dict[str, TaskRun]
    slots: dict[str, JobSlot] = field(default_factory=dict)
    """A slot per task its runs are watched in (a workflow run's own, not the job table's)."""
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    cancelled: bool = False
    """Cancelled as a whole: pending tasks are cancelled, running ones stopped."""
    retired: bool = False
    """Its workflow was removed: running tasks finish, no other starts."""
    detached: bool = False
    """This node stopped driving it (another leads now, or the daemon stops)."""
    waits: tuple[asyncio.Event, ...] = ()
    """Runs it waits for before its first task starts (concurrencyPolicy Replace)."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    last_view: FlowRunView | None = None
    depth: dict[str, int] = field(default_factory=dict)
    """Each task's level in the graph (for the views)."""
    views: dict[str, tuple[tuple[object, ...], TaskRunView]] = field(default_factory=dict)
    """Each task's last view, with the fields it was made of (rebuilt when they change)."""
    xcom: dict[tuple[str, str], str] = field(default_factory=dict)
    """The values its tasks left, by (task, key), in the order first left."""
    xcom_bytes: int = 0
    """What they count together (:func:`cronstable.xcom.size`; at most ``MAX_RUN``)."""
    xcom_view: tuple[XcomValue, ...] = ()
    """The values as the views show them (rebuilt when one changes)."""


@dataclass(eq=False, slots=True)
class FlowSlot(JobSlot):
    """One applied workflow: a :class:`JobSlot` for its place in the schedule (its
    ``job`` is the workflow's :attr:`~cronstable.config.desired.Workflow.job`), and its
    runs going."""

    flow: Workflow | None = None
    runs: list[FlowRun] = field(default_factory=list)
    last_run: FlowRunView | None = None
    starting: int = 0
    """Fires whose run the launch guards are being asked about (Forbid counts them)."""

    @property
    def workflow(self) -> Workflow:
        assert self.flow is not None
        return self.flow

    def going(self) -> list[FlowRun]:
        """The runs going here that no cancel or Replace is ending already."""
        return [
            run
            for run in self.runs
            if run.finished_at is None and not run.cancelled and not run.detached
        ]
