"""What the daemon shows and what it can be asked to do, for the HTTP API.

:class:`DaemonControl` is the one read-only view of a running daemon (status,
runs, applied configuration, metrics, readiness) plus its small command
interface (start, cancel, reload).  The web package codes against it through a
protocol of its own; the runtime never imports the web package.

:class:`RunRecordsSection` is the applier section that drops the run history
and metric series of jobs a revision removes, at the commit that removes them.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST

from cronstable.config import ConfigError, DesiredState, Job, load_snapshot
from cronstable.config.limits import DEFAULT_LIMITS, Limits
from cronstable.config.models import PER_JOB_METRICS_UP_TO
from cronstable.metrics import DaemonMetrics
from cronstable.ports import (
    AppliedConfig,
    AuditLog,
    AuditPage,
    BackfillView,
    ClusterView,
    FleetView,
    FlowRuns,
    FlowRunView,
    JobAlerts,
    JobForecast,
    JobPauses,
    JobRuns,
    JobState,
    JobStatus,
    Pause,
    PauseControl,
    PoolView,
    StateView,
    Status,
    StoreView,
    TaskDefinition,
    Trigger,
    WorkflowStatus,
    utc_text,
)
from cronstable.published import published_config
from cronstable.reconcile.apply import ReconcileStatus
from cronstable.reconcile.plan import Plan, PlannedRevision, plan
from cronstable.runtime.backfill import Backfills
from cronstable.runtime.events import EventHub, Subscription
from cronstable.runtime.fleet import DEFAULT_PAGE, Fleet
from cronstable.runtime.forecast import forecast
from cronstable.runtime.history import FlowHistory, RunHistory
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler, StartRefused
from cronstable.runtime.table import FlowRun
from cronstable.runtime.triggers import Triggers
from cronstable.sources.base import Source, SourceError
from cronstable.workflows.dag import levels

logger = logging.getLogger(__name__)

__all__ = ["DaemonControl", "RunRecordsSection", "StartRefused", "page_cursor"]


def page_cursor(position: int, job: Job) -> str:
    """The cursor of a ``/status`` page starting at ``job`` (at ``position`` in the table):
    opaque to clients, URL-safe."""
    text = f"{position}:{job.name}".encode()
    return base64.urlsafe_b64encode(text).decode("ascii").rstrip("=")


class DaemonControl:
    def __init__(
        self,
        *,
        status: ReconcileStatus,
        scheduler: Scheduler,
        history: RunHistory,
        metrics: DaemonMetrics,
        reload: Callable[[Trigger], None],
        events: EventHub | None = None,
        source: Source | None = None,
        cluster: Callable[[], ClusterView] | None = None,
        state: Callable[[], StateView | None] | None = None,
        stores: Callable[[], Mapping[str, StoreView]] | None = None,
        start_check: Callable[[Job], Awaitable[str | None]] | None = None,
        flow_history: FlowHistory | None = None,
        limits: Limits = DEFAULT_LIMITS,
        pauses: PauseControl | None = None,
        backfills: Backfills | None = None,
        fleet: Fleet | None = None,
        audit: AuditLog | None = None,
        triggers: Triggers | None = None,
        alerts: Callable[[Job, Iterable[Job]], JobAlerts | None] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.events = events if events is not None else EventHub()
        self.source = source
        self._monotonic = monotonic
        self.reconciled = status
        """What the applier did: the revision running, the attempts."""
        self.scheduler = scheduler
        self.history = history
        self.flow_history = flow_history if flow_history is not None else FlowHistory()
        self.metrics = metrics
        self._reload = reload
        self._now = now
        self.cluster: Final = cluster
        """What ``GET /cluster`` shows (None: no cluster section)."""
        self.state: Final = state
        """What ``/status`` shows of durable state (None: no state section)."""
        self.stores: Final = stores
        """The stores the sections use, by name (``cluster``, ``slots``, ``state``): what
        ``/status`` shows of each (:meth:`cronstable.store_link.StoreLink.view`); a store
        ``connecting`` makes the daemon not ready."""
        self.start_check: Final = start_check
        """Asked before a start on request: why it would be refused (a cluster slot held
        by another node); None lets it start."""
        self.limits: Final = limits
        """What a revision planned but not applied is loaded under (the applier's)."""
        self._planning = asyncio.Lock()
        """One revision planned at a time (each may fetch from the origin)."""
        self.pause_control: Final = pauses
        """The pauses (None: jobs cannot be paused through the API)."""
        self.backfills: Final = (
            backfills
            if backfills is not None
            else Backfills(scheduler, paused=lambda name: self._paused(name))
        )
        """The jobs' backfills (:mod:`~cronstable.runtime.backfill`)."""
        self._fleet: Final = (
            fleet
            if fleet is not None
            else Fleet("", scheduler, history, self.flow_history, now=now, pauses=pauses)
        )
        """What ``GET /fleet`` shows (:mod:`~cronstable.runtime.fleet`)."""
        self.audit_log: Final = audit
        """What ``GET /audit`` pages through (None: no trail is kept)."""
        self.triggers: Final = triggers
        """Where a push's trigger waits for its revision (the daemon's
        :class:`~cronstable.runtime.triggers.Triggers`)."""
        self.alerts: Final = alerts
        """Late, stuck and stale now, per job and workflow (None: not judged here)."""

    # ------------------------------------------------------------ reading

    def has_job(self, name: str) -> bool:
        return self.scheduler.has_job(name)

    def has_workflow(self, name: str) -> bool:
        return self.scheduler.flow_slot(name) is not None

    def ready(self) -> str | None:
        """None when ready; otherwise why not."""
        if self.reconciled.applied is None:
            return "no configuration revision has been applied yet"
        waiting = [
            f"the {name} store ({store.backend}) has not answered since "
            f"{utc_text(store.since)} ({store.last_error}); retrying"
            for name, store in self._stores().items()
            if store.state == "connecting"
        ]
        if waiting:
            return "; ".join(waiting)
        source = self.source
        window = source.contact_window() if source is not None else None
        if source is None or window is None:
            return None
        if source.last_contact is None:
            return (
                f"{source.description} has not answered yet "
                "(running the revision cached from an earlier run)"
            )
        age = self._monotonic() - source.last_contact
        if age > window:
            return (
                f"{source.description} last answered {age:.0f} s ago "
                f"(more than the {window:g} s allowed)"
            )
        return None

    def git_origin(self) -> tuple[str, str | None] | None:
        """(URL, full ref name or None for the default branch) of the followed git repository."""
        origin = self.source.origin() if self.source is not None else None
        return None if origin is None else (origin.url, origin.ref)

    def status(self, limit: int | None = None, cursor: str | None = None) -> Status:
        """The daemon at a glance; its jobs in configuration order, every one, or at most
        ``limit`` from ``cursor`` (a previous page's ``next_cursor``; ValueError when it
        is not one).  A page costs what it holds, however many jobs there are."""
        status = self.reconciled
        scheduler = self.scheduler
        count = scheduler.job_count()
        start = 0 if cursor is None else self._resume(cursor)
        page = scheduler.page(start, count if limit is None else limit)
        jobs = tuple(self._job_status(job) for _, job in page)
        following = scheduler.page(page[-1][0] + 1, 1) if page else []
        next_cursor = page_cursor(*following[0]) if following else None
        rejected = status.last_failed
        applied = status.applied
        if rejected is not None and applied is not None and rejected.time < applied.time:
            rejected = None  # an older rejection, superseded by a later applied revision
        return Status(
            applied=applied.view() if applied is not None else None,
            last_rejected=rejected.view() if rejected is not None else None,
            jobs=jobs,
            state=self.state() if self.state is not None else None,
            stores=self._stores(),
            job_count=count,
            next_cursor=next_cursor,
            workflows=self.workflows(),
            pools=self.pools(),
        )

    def job_status(self, name: str) -> JobStatus | None:
        """The applied job ``name`` as :meth:`status` lists it (None: no such job), at the
        cost of that one job."""
        position = self.scheduler.position(name)
        if position is None:
            return None
        page = self.scheduler.page(position, 1)
        return self._job_status(page[0][1]) if page else None

    def _job_status(self, job: Job) -> JobStatus:
        scheduler = self.scheduler
        return JobStatus(
            name=job.name,
            schedule=job.schedule.text,
            timezone=str(job.timezone),
            enabled=job.config.enabled,
            next_fire=scheduler.next_fire(job.name),
            next_start=scheduler.next_start(job.name),
            jitter=job.config.jitter or None,
            pauses=self.pause_control.pauses(job.name)
            if self.pause_control is not None
            else JobPauses(),
            backfill=self.backfills.view(job.name),
            buffered=scheduler.buffered(job.name),
            alerts=self.alerts(job, ()) if self.alerts is not None else None,
            running=tuple(self.history.running(job.name)),
            last_run=self.history.last(job.name),
            retry_pending=scheduler.retry_pending(job.name),
        )

    def _resume(self, cursor: str) -> int:
        """Where the page a cursor names starts: at its job, or where that job was when a
        revision removed it since (jobs may then be skipped or shown twice)."""
        try:
            text = base64.urlsafe_b64decode(cursor.encode("ascii") + b"==").decode("utf-8")
            index, name = text.split(":", 1)
            where = int(index)
        except (ValueError, UnicodeError) as exc:
            raise ValueError("not a cursor this daemon gave") from exc
        if where < 0:
            raise ValueError("not a cursor this daemon gave")
        found = self.scheduler.position(name)
        return found if found is not None else where

    async def fleet(self, after: str | None = None, limit: int = DEFAULT_PAGE) -> FleetView:
        """A page of the fleet view (``GET /fleet``)."""
        return await self._fleet.view(after, limit)

    def workflows(self) -> tuple[WorkflowStatus, ...]:
        """Every applied workflow, its tasks, runs going and last run (``GET /workflows``)."""
        return tuple(self._workflow(name) for name in self.scheduler.workflows)

    def _workflow(self, name: str) -> WorkflowStatus:
        slot = self.scheduler.flow_slot(name)
        if slot is None:
            raise KeyError(name)
        flow = slot.workflow
        depth = levels(flow.dag)
        return WorkflowStatus(
            name=name,
            schedule=flow.schedule.text,
            timezone=str(flow.timezone),
            enabled=flow.config.enabled,
            concurrency_policy=flow.config.concurrency_policy,
            next_fire=slot.next_fire,
            next_start=slot.next_start,
            jitter=flow.config.jitter or None,
            pauses=self.pause_control.pauses(name, workflow=True)
            if self.pause_control is not None
            else JobPauses(),
            alerts=self.alerts(flow.job, flow.tasks.values()) if self.alerts is not None else None,
            tasks=tuple(
                TaskDefinition(
                    task=task,
                    name=job.name,
                    depends_on=flow.dag.depends_on[task],
                    run_when=flow.dag.run_when[task],
                    level=depth[task],
                )
                for task, job in flow.tasks.items()
            ),
            running=tuple(self._views(slot.runs)),
            last_run=slot.last_run or self.flow_history.last(name),
        )

    def _views(self, runs: list[FlowRun]) -> list[FlowRunView]:
        return [run.last_view or self.scheduler.flows.view(run) for run in runs]

    def workflow_runs(self, name: str) -> FlowRuns:
        """Runs going, then finished ones newest first; KeyError for an unknown workflow."""
        slot = self.scheduler.flow_slot(name)
        if slot is None:
            raise KeyError(name)
        return FlowRuns(
            running=tuple(self._views(slot.runs)),
            finished=tuple(reversed(self.flow_history.finished(name))),
        )

    def pools(self) -> tuple[PoolView, ...]:
        """Every pool: slots in use, the queue, the oldest wait (``GET /pools``)."""
        return self.scheduler.pools.views()

    def queued(self, run: str) -> tuple[str, int] | None:
        """(pool, place in its queue) of launch ``run`` while it waits for a slot."""
        return self.scheduler.queued(run)

    def _stores(self) -> Mapping[str, StoreView]:
        return self.stores() if self.stores is not None else {}

    def runs(self, name: str) -> JobRuns:
        """Running runs, then finished ones newest first; KeyError for an unknown job."""
        if not self.scheduler.has_job(name):
            raise KeyError(name)
        return JobRuns(
            running=tuple(self.history.running(name)),
            finished=tuple(reversed(self.history.finished(name))),
        )

    def job_state(self, name: str) -> JobState | None:
        """What ``cronstable state get`` shows of job ``name``; None for a job not applied."""
        if not self.scheduler.has_job(name):
            return None
        return JobState(
            job=name,
            last_run=self.history.last(name),
            last_success=self.history.last_success(name),
            pending_retry=self.scheduler.pending_retry(name),
            running=tuple(self.history.running(name)),
        )

    def xcom_push(
        self, workflow: str, run: str, task: str, values: Mapping[str, str]
    ) -> str | None:
        """Keep ``values`` that ``task`` of workflow run ``run`` leaves (see
        :meth:`cronstable.runtime.workflows.Flows.push`); why not, when they are refused."""
        going = self.scheduler.flow_run(workflow, run)
        if going is None:
            return f"workflow run {run} is not going on this node"
        return self.scheduler.flows.push(going, task, values)

    def xcom_pull(self, workflow: str, run: str, task: str, key: str) -> str | None:
        """The value ``task`` of workflow run ``run`` left under ``key``; None for none."""
        going = self.scheduler.flow_run(workflow, run)
        return None if going is None else self.scheduler.flows.pull(going, task, key)

    def next_fires(self, name: str, hours: float) -> JobForecast:
        """The job's fires in the next ``hours`` (see :mod:`~cronstable.runtime.forecast`).

        A disabled job fires never: its window is empty.
        """
        job = self.scheduler.jobs[name]
        enabled = job.config.enabled
        window = forecast(job.schedule, job.timezone, self._now(), hours if enabled else 0)
        return JobForecast(name, enabled, window)

    async def plan_revision(self, ref: str) -> PlannedRevision:
        """The source's revision ``ref`` loaded and planned against the running one, and
        not applied: nothing of the daemon changes, the source keeps following its ref.

        A revision that does not load answers its errors; one the source cannot read
        (no such ref, or a source with no revisions but its current one) says why.
        """
        async with self._planning:
            at = self._now()
            if self.source is None:
                return PlannedRevision(ref, at, unreadable="the daemon follows no source")
            try:
                snapshot = await self.source.snapshot_at(ref)
            except SourceError as exc:
                return PlannedRevision(ref, at, unreadable=str(exc))
            found = PlannedRevision(ref, at, snapshot.revision, snapshot.source)
            try:
                desired = await asyncio.to_thread(load_snapshot, snapshot, limits=self.limits)
            except ConfigError as exc:
                return dataclasses.replace(found, errors=tuple(str(p) for p in exc.problems))
            applied = self.reconciled.applied
            the_plan = plan(
                desired,
                self.reconciled.applied_state,
                revision=snapshot.revision,
                applied_revision=applied.revision if applied is not None else None,
            )
            return dataclasses.replace(found, plan=the_plan)

    def subscribe(self) -> Subscription | None:
        """A live event subscription; None when too many are open."""
        return self.events.subscribe()

    def unsubscribe(self, subscription: Subscription) -> None:
        self.events.unsubscribe(subscription)

    def applied_config(self) -> AppliedConfig | None:
        state = self.reconciled.applied_state
        if state is None:
            return None
        applied = self.reconciled.applied
        return AppliedConfig(applied.revision if applied else None, published_config(state))

    def cluster_view(self) -> ClusterView | None:
        """Members, leader, lease and this node's role; None without a cluster section."""
        if self.cluster is None:
            return None
        return self.cluster()

    def metrics_text(self) -> tuple[bytes, str]:
        """Prometheus exposition and its content type."""
        return self.metrics.render(), CONTENT_TYPE_LATEST

    # ------------------------------------------------------------ commands

    async def start(self, name: str) -> tuple[str | None, str]:
        """Start ``name`` now: (run id, "") or (None, why it was refused).  KeyError."""
        job = self.scheduler.job(name)
        if job is None:
            raise KeyError(name)
        if self.start_check is not None:
            refusal = await self.start_check(job)
            if refusal is not None:
                return None, refusal
        try:
            return self.scheduler.start_now(name, self._now()), ""
        except StartRefused as exc:
            return None, str(exc)

    def cancel(self, name: str, run: str | None = None) -> list[str]:
        return self.scheduler.cancel_runs(name, run)

    async def start_workflow(self, name: str) -> tuple[str | None, str]:
        """Start workflow ``name`` now: (run id, "") or (None, why it was refused).  KeyError."""
        try:
            return self.scheduler.start_flow(name, self._now()), ""
        except StartRefused as exc:
            return None, str(exc)

    def cancel_workflow(self, name: str, run: str | None = None) -> list[str]:
        """Cancel the runs going of workflow ``name`` (only ``run``); KeyError."""
        return self.scheduler.cancel_flow(name, run)

    async def pause(
        self,
        name: str,
        *,
        reason: str,
        by: str | None,
        until: datetime | None,
        workflow: bool = False,
    ) -> tuple[Pause, bool, JobPauses]:
        """Pause job (with ``workflow``: workflow) ``name`` through the API: (the pause,
        whether it is durable, the pauses holding it now).  KeyError; ValueError for an
        ``until`` not in the future or a workflow's task (it pauses with its workflow);
        :class:`~cronstable.ports.PauseRefused` when the store does not answer."""
        control = self._pausable(name, workflow)
        pause, durable = await control.pause(
            name, reason=reason, by=by, until=until, workflow=workflow
        )
        return pause, durable, control.pauses(name, workflow=workflow)

    def _pausable(self, name: str, workflow: bool) -> PauseControl:
        """The pause control, for an applied job (or workflow) ``name``; KeyError, and
        ValueError for a workflow's task."""
        if self.pause_control is None:
            raise KeyError(name)
        if workflow:
            if self.scheduler.flow_slot(name) is None:
                raise KeyError(name)
        elif name not in self.scheduler.jobs:
            task = self.scheduler.job(name)
            if task is not None and task.workflow is not None:
                raise ValueError(
                    f"{name!r} is a task: it pauses with its workflow {task.workflow!r} "
                    "(POST /workflows/{name}/pause)"
                )
            raise KeyError(name)
        return self.pause_control

    def _paused(self, name: str) -> bool:
        return self.pause_control is not None and self.pause_control.pauses(name).paused

    def backfill_fires(
        self, name: str, start: datetime, end: datetime, limit: int
    ) -> list[datetime]:
        """The fires a backfill of ``name`` over ``[start, end)`` would run (a dry run).
        KeyError; :class:`~cronstable.ports.BackfillRefused`."""
        return self.backfills.plan(name, start, end, limit)

    def backfill(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        limit: int,
        by: str | None,
        ignore_pause: bool,
    ) -> BackfillView:
        """Start backfilling ``name``.  KeyError; BackfillRefused."""
        return self.backfills.start(name, start, end, limit=limit, by=by, ignore_pause=ignore_pause)

    def backfill_view(self, name: str) -> BackfillView | None:
        """``name``'s backfill going, or its last one; KeyError for an unknown job."""
        if not self.scheduler.has_job(name):
            raise KeyError(name)
        return self.backfills.view(name)

    async def resume(
        self, name: str, *, by: str | None, workflow: bool = False
    ) -> tuple[Pause | None, JobPauses]:
        """Lift job (or workflow) ``name``'s API pause: (the pause lifted or None, the
        pauses still holding it: the repository's ``suspend`` is not lifted).  KeyError;
        ValueError for a task; PauseRefused."""
        control = self._pausable(name, workflow)
        lifted = await control.resume(name, by=by, workflow=workflow)
        return lifted, control.pauses(name, workflow=workflow)

    def reload(self, trigger: Trigger | None = None) -> None:
        """Ask the source to look now; the revision it yields is credited to ``trigger``
        (by default an API reload by no token)."""
        self._reload(trigger or Trigger("api", requested_at=self._now(), via="http"))

    def nudge(self, revision: str, trigger: Trigger | None = None) -> None:
        """The origin has ``revision`` (a pushed sha): fetch until it is visible; that
        revision is credited to ``trigger`` (a webhook delivery)."""
        if self.source is None:
            return
        if trigger is not None and self.triggers is not None:
            self.triggers.note(trigger)
        self.source.nudge(revision)

    def audit(self, limit: int, cursor: str | None = None) -> AuditPage:
        """A page of the audit trail, newest first; ValueError for a bad cursor."""
        if self.audit_log is None:
            if cursor is not None:
                raise ValueError(cursor)
            return AuditPage((), None, 0, 0, durable=False)
        return self.audit_log.page(limit, cursor)


def per_job_metrics(desired: DesiredState) -> tuple[bool, str]:
    """Whether a revision keeps per-job metric series, and why (``metrics.perJob``; unset:
    up to :data:`~cronstable.config.models.PER_JOB_METRICS_UP_TO` jobs)."""
    chosen = desired.metrics.per_job if desired.metrics is not None else None
    if chosen is not None:
        return chosen, f"metrics.perJob is {'true' if chosen else 'false'}"
    count = len(desired.jobs)
    if count > PER_JOB_METRICS_UP_TO:
        return False, (
            f"the revision has {count:,} jobs, over {PER_JOB_METRICS_UP_TO:,} "
            "(metrics.perJob: true keeps them)"
        )
    return True, f"the revision has {count:,} jobs"


Gone = tuple[list[str], list[str]]
"""The jobs (workflows' tasks among them) and the workflows a revision removes."""


class RunRecordsSection:
    """Drops the history and metric series of removed jobs, tasks and workflows when a
    revision commits, and keeps per-job metric series or not (``metrics.perJob``)."""

    name = "run-records"

    def __init__(
        self, history: RunHistory, metrics: RunMetrics, flow_history: FlowHistory | None = None
    ) -> None:
        self.history = history
        self.metrics = metrics
        self.flow_history = flow_history

    def affected(self, plan: Plan) -> bool:
        return (
            any(change.kind != "changed" for change in plan.jobs)
            or any(task.kind == "removed" for task in plan.task_changes())
            or any(change.section == "metrics" for change in plan.sections)
        )

    async def prepare(self, desired: DesiredState) -> tuple[Gone, bool, str]:
        """What ``desired`` removes of what runs now (before any section commits), and
        whether per-job series are kept, with why."""
        scheduler = self.metrics.scheduler
        tasks = desired.tasks()
        running = [
            *scheduler.jobs,
            *(task.name for flow in scheduler.workflows.values() for task in flow.tasks.values()),
        ]
        jobs = [name for name in running if name not in desired.jobs and name not in tasks]
        flows = [name for name in scheduler.workflows if name not in desired.workflows]
        return ((jobs, flows), *per_job_metrics(desired))

    def commit(self, prepared: tuple[Gone, bool, str], desired: DesiredState) -> None:
        (jobs, flows), per_job, why = prepared
        self.history.forget(jobs)
        self.metrics.forget(jobs)
        self.metrics.forget_workflows(flows)
        if self.flow_history is not None:
            self.flow_history.forget(flows)
        if per_job != self.metrics.per_job:
            logger.info(
                "Per-job metric series %s: %s",
                "on" if per_job else "off (each job's series dropped)",
                why,
            )
            self.metrics.keep_per_job(per_job)

    async def discard(self, prepared: tuple[Gone, bool, str]) -> None:
        return None

    async def close(self) -> None:
        return None
