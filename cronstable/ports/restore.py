"""What a previous daemon's records are put back into (:class:`Restorable`,
:class:`History`), as durable state restores them after a restart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from cronstable.config.desired import Job
from cronstable.ports.flows import FlowRunView
from cronstable.ports.runs import FinishedRun, RunStart


class WallClock(Protocol):
    def now(self) -> datetime:
        """The current time, aware."""
        ...


class Restorable(Protocol):
    """The scheduler, as a restore sees it: each call puts back one record's worth and
    says whether it took (False: the job is not applied, or the record no longer fits)."""

    @property
    def started(self) -> bool:
        """Whether scheduling began (records restored later would move schedules back)."""
        ...

    @property
    def clock(self) -> WallClock: ...

    @property
    def late_tolerance(self) -> float:
        """Seconds a fire may be late and still count as on time."""
        ...

    def job(self, name: str) -> Job | None:
        """The applied definition of ``name``; None for a job not applied."""
        ...

    @property
    def jobs(self) -> Mapping[str, Job]:
        """The applied jobs (not the workflows' tasks) by name."""
        ...

    def report_lost(self, name: str, start: RunStart, reason: str) -> bool:
        """Report the run ``start`` of ``name``, which went on a node that died, as ended
        with outcome ``lost`` (fail reason ``reason``; onFailure, onPermanentFailure, no
        retry).  False for a job not applied."""
        ...

    def resume(self, name: str, last_fire: datetime) -> bool:
        """Plan ``name`` from ``last_fire``, the last fire a previous daemon handled."""
        ...

    def rearm_retry(self, name: str, count: int, delay: float, scheduled: datetime) -> bool:
        """Re-arm a pending retry: ``count`` retries had started, the next is due in
        ``delay`` seconds, for the fire at ``scheduled``."""
        ...

    def adopt(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        scheduled: datetime,
        attempt: int,
        started_at: datetime,
    ) -> bool:
        """Watch the run of ``name`` that outlived the previous daemon (process ``pid``,
        started at ``start_ticks``) until it ends; False when that process is gone."""
        ...

    def resume_flow(
        self, run: FlowRunView, adopt: Mapping[str, tuple[int, int]], lost: str
    ) -> bool:
        """Go on with workflow run ``run`` that a previous daemon (or another node) left:
        its finished tasks stay as they ended, the running tasks in ``adopt`` (task →
        (pid, start ticks)) are watched until they end, a pending retry is re-armed at
        its time, another running task counts as failed with fail reason ``lost``, and
        pending tasks start when their dependencies allow.  False when the workflow is
        not applied, its definition changed (digest), or the run goes here already."""
        ...

    def gate_allows(self, job: Job) -> bool:
        """Whether the cluster gate lets this node start ``job`` now (clusterPolicy)."""
        ...


class History(Protocol):
    """The finished runs kept of each job (newest last)."""

    def finished(self, job: str) -> list[FinishedRun]: ...

    def restore(self, job: str, runs: Iterable[FinishedRun]) -> None:
        """Put back a previous daemon's finished runs (oldest first), before this one's."""
        ...
