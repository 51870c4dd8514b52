"""What the web layer may read from and ask of the daemon (nothing else).

Reads answer read models (:mod:`cronstable.ports.views`); :mod:`cronstable.web.encode`
turns them into the API's JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from cronstable.ports import (
    AppliedConfig,
    AuditPage,
    BackfillView,
    ClusterView,
    EventData,
    FleetView,
    FlowRuns,
    JobForecast,
    JobPauses,
    JobRuns,
    JobStatus,
    Pause,
    PoolView,
    Status,
    Trigger,
    WorkflowStatus,
)
from cronstable.reconcile.plan import PlannedRevision


class DaemonApi(Protocol):
    """Implemented by :class:`cronstable.runtime.control.DaemonControl`."""

    def has_job(self, name: str) -> bool: ...

    def ready(self) -> str | None:
        """None when ready, else why not."""
        ...

    def status(self, limit: int | None = None, cursor: str | None = None) -> Status:
        """Every job, or at most ``limit`` from ``cursor``; ValueError for a bad cursor."""
        ...

    def job_status(self, name: str) -> JobStatus | None:
        """One applied job as :meth:`status` lists it; None for an unknown one."""
        ...

    def runs(self, name: str) -> JobRuns:
        """KeyError for an unknown job."""
        ...

    def applied_config(self) -> AppliedConfig | None: ...

    def metrics_text(self) -> tuple[bytes, str]: ...

    def cluster_view(self) -> ClusterView | None:
        """The leadership as this node sees it (None without a cluster section)."""
        ...

    async def fleet(self, after: str | None = None, limit: int = 100) -> FleetView:
        """A page of the fleet: the members, and the jobs named after ``after`` (at most
        ``limit``) with where each last ran, its next fire and which node runs it."""
        ...

    async def start(self, name: str) -> tuple[str | None, str]:
        """(the new run's id, "") or (None, why concurrencyPolicy or the job's cluster slot
        refused); KeyError."""
        ...

    def queued(self, run: str) -> tuple[str, int] | None:
        """(pool, place in its queue, 1 first) of the launch ``run`` while it waits for a
        slot of its pool; None when it does not wait."""
        ...

    def pools(self) -> tuple[PoolView, ...]:
        """Every pool (the applied ones first)."""
        ...

    def cancel(self, name: str, run: str | None = None) -> list[str]: ...

    def has_workflow(self, name: str) -> bool: ...

    def workflows(self) -> tuple[WorkflowStatus, ...]: ...

    def workflow_runs(self, name: str) -> FlowRuns:
        """KeyError for an unknown workflow."""
        ...

    async def start_workflow(self, name: str) -> tuple[str | None, str]:
        """(the new run's id, "") or (None, why concurrencyPolicy refused); KeyError."""
        ...

    def cancel_workflow(self, name: str, run: str | None = None) -> list[str]:
        """The ids of the runs cancelled; KeyError for an unknown workflow."""

    async def pause(
        self,
        name: str,
        *,
        reason: str,
        by: str | None,
        until: datetime | None,
        workflow: bool = False,
    ) -> tuple[Pause, bool, JobPauses]:
        """(the pause, whether a state store keeps it, the pauses holding the job, or with
        ``workflow`` the workflow, now); KeyError, ValueError (``until`` past, a task),
        PauseRefused (the store does not answer)."""
        ...

    def backfill_fires(
        self, name: str, start: datetime, end: datetime, limit: int
    ) -> list[datetime]:
        """The fires a backfill would run (a dry run); KeyError, BackfillRefused."""
        ...

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
        """Start a backfill; KeyError, BackfillRefused."""
        ...

    def backfill_view(self, name: str) -> BackfillView | None:
        """The job's backfill going, or its last; KeyError."""
        ...

    async def resume(
        self, name: str, *, by: str | None, workflow: bool = False
    ) -> tuple[Pause | None, JobPauses]:
        """(the API pause lifted or None, the pauses still holding the job or workflow);
        KeyError, ValueError (a task), PauseRefused."""
        ...

    def reload(self, trigger: Trigger | None = None) -> None:
        """Ask the source to look now, the revision it yields credited to ``trigger``."""
        ...

    def audit(self, limit: int, cursor: str | None = None) -> AuditPage:
        """A page of the audit trail, newest first; ValueError for a bad cursor."""
        ...

    def next_fires(self, name: str, hours: float) -> JobForecast:
        """The job's fires in the next ``hours``; KeyError for an unknown job."""
        ...

    async def plan_revision(self, ref: str) -> PlannedRevision:
        """The source's revision ``ref`` planned against the running one, not applied."""
        ...

    def subscribe(self) -> EventSubscription | None:
        """Live events; None when too many subscriptions are open."""
        ...

    def unsubscribe(self, subscription: Any) -> None: ...

    def git_origin(self) -> tuple[str, str | None] | None:
        """(URL, full ref name or None for the default branch) of the followed git repository."""
        ...

    def nudge(self, revision: str, trigger: Trigger | None = None) -> None:
        """The origin has ``revision``: fetch until it is visible (credited to ``trigger``)."""
        ...


class Event(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def data(self) -> EventData: ...


class EventSubscription(Protocol):
    @property
    def dropped(self) -> bool:
        """Closed because the client fell behind."""
        ...

    async def next(self) -> Event | None:
        """The next event; None once the subscription is closed."""
        ...
