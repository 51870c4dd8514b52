"""What the daemon shows and what it can be asked to do, for the HTTP API.

:class:`DaemonControl` is the one read-only view of a running daemon (status,
runs, applied configuration, metrics, readiness) plus its small command
interface (start, cancel, reload).  The web package codes against it through a
protocol of its own; the runtime never imports the web package.

:class:`RunRecordsSection` is the applier section that drops the run history
and metric series of jobs a revision removes, at the commit that removes them.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST

from cronstable.config import DesiredState, Job
from cronstable.config.models import PER_JOB_METRICS_UP_TO
from cronstable.metrics import DaemonMetrics
from cronstable.ports import (
    AppliedConfig,
    ClusterView,
    JobForecast,
    JobRuns,
    JobStatus,
    StateView,
    Status,
    StoreView,
    utc_text,
)
from cronstable.published import published_config
from cronstable.reconcile.apply import ReconcileStatus
from cronstable.reconcile.plan import Plan
from cronstable.runtime.events import EventHub, Subscription
from cronstable.runtime.forecast import forecast
from cronstable.runtime.history import RunHistory
from cronstable.runtime.run_metrics import RunMetrics
from cronstable.runtime.scheduler import Scheduler, StartRefused
from cronstable.sources.base import Source

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
        reload: Callable[[], None],
        events: EventHub | None = None,
        source: Source | None = None,
        cluster: Callable[[], ClusterView] | None = None,
        state: Callable[[], StateView | None] | None = None,
        stores: Callable[[], Mapping[str, StoreView]] | None = None,
        start_check: Callable[[Job], Awaitable[str | None]] | None = None,
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

    # ------------------------------------------------------------ reading

    def has_job(self, name: str) -> bool:
        return self.scheduler.has_job(name)

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
        jobs = tuple(
            JobStatus(
                name=job.name,
                schedule=job.schedule.text,
                timezone=str(job.timezone),
                enabled=job.config.enabled,
                next_fire=scheduler.next_fire(job.name),
                running=tuple(self.history.running(job.name)),
                last_run=self.history.last(job.name),
                retry_pending=scheduler.retry_pending(job.name),
            )
            for _, job in page
        )
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

    def next_fires(self, name: str, hours: float) -> JobForecast:
        """The job's fires in the next ``hours`` (see :mod:`~cronstable.runtime.forecast`).

        A disabled job fires never: its window is empty.
        """
        job = self.scheduler.jobs[name]
        enabled = job.config.enabled
        window = forecast(job.schedule, job.timezone, self._now(), hours if enabled else 0)
        return JobForecast(name, enabled, window)

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

    def reload(self) -> None:
        self._reload()

    def nudge(self, revision: str) -> None:
        """The origin has ``revision`` (a pushed sha): fetch until it is visible."""
        if self.source is not None:
            self.source.nudge(revision)


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


class RunRecordsSection:
    """Drops the history and metric series of removed jobs when a revision commits, and
    keeps per-job metric series or not (``metrics.perJob``)."""

    name = "run-records"

    def __init__(self, history: RunHistory, metrics: RunMetrics) -> None:
        self.history = history
        self.metrics = metrics

    def affected(self, plan: Plan) -> bool:
        return any(change.kind != "changed" for change in plan.jobs) or any(
            change.section == "metrics" for change in plan.sections
        )

    async def prepare(self, desired: DesiredState) -> tuple[list[str], bool, str]:
        """The jobs running now that ``desired`` removes (before any section commits), and
        whether per-job series are kept, with why."""
        removed = [name for name in self.metrics.scheduler.jobs if name not in desired.jobs]
        return (removed, *per_job_metrics(desired))

    def commit(self, prepared: tuple[list[str], bool, str], desired: DesiredState) -> None:
        removed, per_job, why = prepared
        self.history.forget(removed)
        self.metrics.forget(removed)
        if per_job != self.metrics.per_job:
            logger.info(
                "Per-job metric series %s: %s",
                "on" if per_job else "off (each job's series dropped)",
                why,
            )
            self.metrics.keep_per_job(per_job)

    async def discard(self, prepared: tuple[list[str], bool, str]) -> None:
        return None

    async def close(self) -> None:
        return None
