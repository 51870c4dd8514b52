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
