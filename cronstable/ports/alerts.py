"""What a job should have done by now and has not: the alerts of onLate, onStuck and
onStale (:mod:`cronstable.state.alerts` judges, the report dispatcher sends)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from cronstable.config.desired import Job


@dataclass(frozen=True, slots=True)
class StuckRun:
    """A run found stuck: what its report says of it."""

    id: str
    scheduled: datetime
    started_at: datetime
    attempt: int
    running_for: float
    """Seconds it has been going."""
    threshold: float
    """Seconds it was expected to take at most."""
    basis: str
    """Where the threshold comes from: ``expectedDuration``, or ``p95Factor: …``."""
    pid: int | None = None


class AlertSink(Protocol):
    """Where the alerts go (the report dispatcher).  Each call returns at once."""

    def fire_late(self, job: Job, fire: datetime, planned: datetime, grace: float) -> None:
        """``job``'s fire at ``fire`` (to start at ``planned``) has not started within
        ``grace`` seconds."""

    def run_stuck(self, job: Job, run: StuckRun) -> None:
        """A run of ``job`` has been going for longer than it should."""

    def success_stale(
        self, job: Job, last_success: datetime | None, age: float, limit: float
    ) -> None:
        """``job``'s last success (None: never) is ``age`` seconds old, over ``limit``."""


@dataclass(frozen=True, slots=True)
class LateNow:
    """The newest fire of a job found late (onLate) and not accounted for since: no run
    of it, nor of a later fire, has started, and no later fire was skipped."""

    fire: datetime
    planned: datetime
    """When it was to start (``fire`` delayed by the job's jitter)."""
    since: datetime
    """When it became late: ``planned`` + ``grace``."""
    grace: float
    reported_by: str | None
    """The node that reported it (None: not known)."""
    reported_at: datetime | None
    """When that node reported it (None: not known)."""


@dataclass(frozen=True, slots=True)
class StuckNow:
    """A run going now for longer than its onStuck threshold (reported once)."""

    job: str
    """The job (or, under a workflow, the workflow or one of its tasks)."""
    run: str
    started_at: datetime
    running_for: float
    """Seconds it has been going."""
    threshold: float
    basis: str
    """``expectedDuration``, or ``p95Factor: …``."""
    reported_at: datetime


@dataclass(frozen=True, slots=True)
class StaleNow:
    """A job whose last success is older than its onStale ``maxSuccessAge``."""

    last_success: datetime | None
    """None: no success known (it is judged from when it was applied, or resumed)."""
    age: float
    """Seconds since ``last_success`` (or since it is judged from)."""
    max_success_age: float
    since: datetime
    """When it became stale."""
    reported_at: datetime | None
    """When this node reported it (None: another node did, or a daemon before a
    restart: the report is claimed once across the cluster)."""


@dataclass(frozen=True, slots=True)
class JobAlerts:
    """Where a job with onLate, onStuck or onStale stands now, as this node judges it,
    and when this node last reported each."""

    late: LateNow | None = None
    stuck: tuple[StuckNow, ...] = ()
    stale: StaleNow | None = None
    last_late: datetime | None = None
    last_stuck: datetime | None = None
    last_stale: datetime | None = None
