"""Read models: what the daemon shows of itself, as plain values.

The core builds these (the daemon's control, the cluster section, durable state,
the store links, the live events); :mod:`cronstable.web.encode` alone turns them
into the HTTP API's JSON, so the API's shape is decided in one place and a
record the core keeps (a :class:`~cronstable.ports.runs.FinishedRun`) is not
an answer of the API by accident.  Times are aware datetimes and durations
plain seconds: formatting and rounding are the encoder's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cronstable.ports.alerts import JobAlerts
from cronstable.ports.flows import FlowRunView
from cronstable.ports.pauses import JobPauses
from cronstable.ports.runs import FinishedRun, RunOutcome, RunStart


@dataclass(frozen=True, slots=True)
class RevisionView:
    """A configuration revision the daemon applied or rejected."""

    revision: str
    source: str
    time: datetime
    job_set_id: str | None
    rejected: bool = False
    errors: tuple[str, ...] = ()
    """Why it was rejected (empty for an applied one)."""


@dataclass(frozen=True, slots=True)
class BackfillView:
    """A job's backfill: every fire of its schedule in [start, end), run one after
    another (the last one asked of this daemon, while it runs and once it ended)."""

    job: str
    start: datetime
    end: datetime
    fires: tuple[datetime, ...]
    """Every fire in the range, in order, in the job's zone."""
    state: Literal["running", "done", "stopped"]
    by: str | None
    """The API token's name that asked."""
    started_at: datetime
    done: int
    """Runs ended (or refused) so far."""
    outcomes: Mapping[str, int]
    """How they ended, by outcome (``not_started`` for one a guard refused)."""
    current: datetime | None
    """The fire running now."""
    finished_at: datetime | None
    stop_reason: str | None
    """Why it stopped before its last fire (``stopped`` only)."""
    ignore_pause: bool = False


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One applied job: its schedule, the runs going and how the last one went."""

    name: str
    schedule: str
    timezone: str
    enabled: bool
    next_fire: datetime | None
    running: tuple[RunStart, ...]
    last_run: FinishedRun | None
    retry_pending: bool
    next_start: datetime | None = None
    """When the next fire starts: ``next_fire`` delayed by the job's ``jitter``."""
    jitter: float | None = None
    """The job's ``jitter`` (seconds); None without one."""
    pauses: JobPauses = JobPauses()
    """The pauses holding it now, the repository's and the API's apart."""
    backfill: BackfillView | None = None
    """Its backfill running now, or the last one this daemon ran."""
    buffered: tuple[datetime, ...] = ()
    """The fires waiting for its runs going, the next first (concurrencyPolicy BufferOne,
    BufferAll)."""
    alerts: JobAlerts | None = None
    """Late, stuck, stale now and when each was last reported; None for a job without
    onLate, onStuck or onStale."""


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    """One task of an applied workflow, as defined."""

    task: str
    name: str
    """``WORKFLOW.TASK``."""
    depends_on: tuple[str, ...]
    run_when: str
    level: int


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """One applied workflow: its schedule and tasks, the runs going and its last run."""

    name: str
    schedule: str
    timezone: str
    enabled: bool
    concurrency_policy: str
    next_fire: datetime | None
    tasks: tuple[TaskDefinition, ...]
    running: tuple[FlowRunView, ...]
    last_run: FlowRunView | None
    next_start: datetime | None = None
    """When the next fire starts: ``next_fire`` delayed by the workflow's ``jitter``."""
    jitter: float | None = None
    pauses: JobPauses = JobPauses()
    """The pauses holding the workflow now (its ``suspend`` and the API's apart)."""
    alerts: JobAlerts | None = None
    """As a job's, its tasks' stuck runs included."""


@dataclass(frozen=True, slots=True)
class FlowRuns:
    """A workflow's runs: the ones going, then the finished ones newest first."""

    running: tuple[FlowRunView, ...]
    finished: tuple[FlowRunView, ...]


@dataclass(frozen=True, slots=True)
class PendingRetry:
    """A retry armed and not started yet."""

    attempt: int
    """The attempt it will be (2 for the first retry)."""
    due: datetime | None
    """When it starts, unless a gate or concurrencyPolicy holds it back then."""
    scheduled_time: datetime
    """The fire it retries."""


@dataclass(frozen=True, slots=True)
class JobState:
    """What ``cronstable state get`` tells a run of a job: its last run, its last success
    and its pending retry (and the runs going, the asking one among them)."""

    job: str
    last_run: FinishedRun | None
    last_success: FinishedRun | None
    """Among the runs the daemon heard of (since it started, and the history a state
    section restored); without their captured output."""
    pending_retry: PendingRetry | None
    running: tuple[RunStart, ...]


@dataclass(frozen=True, slots=True)
class StoreView:
    """One section's link to its store (:class:`cronstable.store_link.StoreLink`)."""

    backend: str
    state: Literal["up", "connecting"]
    since: datetime
    """When the store answered (up), or when the wait began (connecting)."""
    unreachable_for: float
    """Seconds the section has waited for its store; 0 once it answered."""
    attempts: int
    last_error: str | None
    """Redacted."""
    fault: str | None
    next_attempt_in: float | None
    """Seconds until the next attempt (connecting only)."""


@dataclass(frozen=True, slots=True)
class StateView:
    """Durable state as the daemon uses it (a ``state`` section is applied)."""

    backend: str
    node: str
    on_store_unavailable: str
    connecting: bool
    """The store has not answered since the section was applied: records wait in memory."""
    available: bool
    last_error: str | None
    queued: int
    """Records waiting to be written."""


@dataclass(frozen=True, slots=True)
class QueuedView:
    """A launch waiting in a pool's queue."""

    run: str
    """The run id it will have."""
    job: str
    kind: str
    """``fire``, ``retry``, ``reboot`` or ``manual``."""
    priority: int
    since: datetime
    waited: float
    """Seconds it has waited so far."""


@dataclass(frozen=True, slots=True)
class PoolView:
    """One pool: its slots, the runs holding them and the launches waiting."""

    name: str
    slots: int
    scope: str
    in_use: int
    """Slots held now (may exceed ``slots`` for a while after the count shrank)."""
    queued: int
    oldest_wait: float | None
    """Seconds the longest-waiting launch has waited; None with an empty queue."""
    retired: bool
    """Removed (or re-scoped) by a revision; kept until its runs and queue are done."""
    holders: tuple[str, ...]
    """Run ids holding a slot."""
    waiting: tuple[QueuedView, ...]
    """The queue in admission order (the first 100)."""
    admitted: int
    """Launches admitted since the daemon started."""
    timeouts: int
    """Launches skipped after ``poolTimeout``."""
    refused_full: int
    """Launches refused because the queue was full."""
    waited_total: float
    """Seconds the admitted launches waited, summed."""


@dataclass(frozen=True, slots=True)
class Status:
    """The daemon at a glance: the revisions, every job, durable state, the stores."""

    applied: RevisionView | None
    last_rejected: RevisionView | None
    """The last rejected revision, unless a later one was applied since."""
    jobs: tuple[JobStatus, ...]
    state: StateView | None
    """None without a ``state`` section."""
    stores: Mapping[str, StoreView]
    """The stores the sections use, by name (``cluster``, ``slots``, ``state``)."""
    job_count: int = 0
    """Jobs in the applied table (``jobs`` may hold a page of them)."""
    next_cursor: str | None = None
    """Where the next page of ``jobs`` starts (None: this page is the last)."""
    workflows: tuple[WorkflowStatus, ...] = ()
    pools: tuple[PoolView, ...] = ()
    """Every pool, the applied ones first."""


@dataclass(frozen=True, slots=True)
class JobRuns:
    """A job's runs: the ones going, then the finished ones newest first."""

    running: tuple[RunStart, ...]
    finished: tuple[FinishedRun, ...]


@dataclass(frozen=True, slots=True)
class FireBand:
    """``count`` fires between ``start`` and ``end``, each gap at most the band width."""

    start: datetime
    end: datetime
    count: int


@dataclass(frozen=True, slots=True)
class Forecast:
    """A schedule's fires after ``start`` up to ``end``: listed one by one, or (more than
    the listing allows, or a walk cut short) as bands."""

    start: datetime
    end: datetime
    complete: bool
    """False when the walk stopped early (the last band's count is then a lower bound)."""
    fires: tuple[datetime, ...] | None
    bands: tuple[FireBand, ...] | None


@dataclass(frozen=True, slots=True)
class JobForecast:
    """A job's coming fires (a disabled job's window is empty)."""

    job: str
    enabled: bool
    forecast: Forecast


@dataclass(frozen=True, slots=True)
class AppliedConfig:
    """The applied configuration: its revision and its canonical, published form."""

    revision: str | None
    document: Mapping[str, Any]
    """As :func:`cronstable.published.published_config` gives it (secrets as digests)."""


@dataclass(frozen=True, slots=True)
class ClusterMember:
    name: str
    instance: str
    job_set_id: str
    same_job_set: bool
    """Whether it applied the job set this node applied (or this node's is not known)."""


@dataclass(frozen=True, slots=True)
class Election:
    """Leader election as this node sees it."""

    backend: str
    distribution: str
    lease_ttl: int
    known: bool
    """Whether this node trusts its view (its lease is renewed)."""
    role: Literal["unknown", "leader", "follower"]
    leader: str | None
    fence: int | None
    lease_valid_for: float | None
    unknown_reason: str | None
    node_name_conflict: bool
    members: tuple[ClusterMember, ...]
    store: StoreView | None
    """The leadership's store link, when one is in use."""
    owned_jobs: tuple[str, ...] | None
    """Under ``spread``, with the leadership known: the jobs this node owns."""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """This node in its cluster; ``election`` None without leader election."""

    node: str
    election: Election | None


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run ended (the live event; the full record is in the job's runs)."""

    run: RunStart
    outcome: RunOutcome
    exit_code: int | None
    finished_at: datetime
    duration: float


EventData = RunStart | RunEnded | RevisionView | Mapping[str, Any]
"""A live event's payload: a read model, or a mapping already in JSON form."""
