"""A run about to start, and who has a say in it.

The scheduler launches a run for one of five reasons (:data:`LaunchKind`); each
:class:`Launch` is asked of the :class:`ClusterGate` (scheduled fires and
retries: may this node start this job now?) and then of every
:class:`LaunchGuard` in order (durable state, cluster slots).  Durable state
also hears of fires and retries through :class:`StateHooks`.  A started run is
a :class:`Run` the scheduler drives until it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from cronstable.config.desired import Job
from cronstable.ports.runs import RunResult, run_id

LaunchKind = Literal["fire", "retry", "reboot", "manual", "task"]
"""What starts a run: a scheduled fire (catch-ups included), a retry, an @reboot job at
start, a start on request, or a workflow run starting one of its tasks (a first attempt
or a retry: the workflow run's own record says which)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """A run about to start: which definition, for which fire, which attempt, and why."""

    job: Job
    scheduled: datetime
    """The fire it runs for (a retry keeps its fire's time; a start on request, now)."""
    attempt: int
    """1 for a fire's first run, 2 for its first retry …"""
    kind: LaunchKind

    @property
    def id(self) -> str:
        return run_id(self.job.name, self.scheduled, self.attempt)


class Run(Protocol):
    """One run of a job, as the scheduler drives it (the process layer's job process,
    or a run adopted after a restart)."""

    @property
    def pid(self) -> int | None: ...

    async def start(self) -> None: ...

    async def wait(self) -> RunResult: ...

    async def cancel(self) -> None: ...


class ClusterGate(Protocol):
    """May this node start a job now (clusterPolicy)?  The scheduler knows nothing more
    of a cluster (:class:`cronstable.cluster.section.ClusterSection` is the one)."""

    def allows(self, job: Job) -> str | None:
        """None to start; otherwise why not (``not_leader``, ``leadership_unknown`` …)."""
        ...

    async def release(self) -> None:
        """Give up this node's leadership (called once scheduling stopped, before the drain)."""
        ...


class LaunchGuard(Protocol):
    """Asked, in order, before each run starts (after concurrencyPolicy and the cluster
    gate): durable state records what must be written before a launch, a cluster slot
    is taken.  Must not raise."""

    async def admit(self, launch: Launch) -> str | None:
        """None to start; otherwise why not (``state_unavailable``, ``reboot_ran`` …)."""
        ...

    def release(self, launch: Launch) -> None:
        """``launch``, which this guard admitted, ended: it ran and finished, or it never
        started (a later guard refused it, the daemon stopped)."""
        ...


class StateHooks(Protocol):
    """What durable state hears from the scheduler (:mod:`cronstable.state.keeper`).
    Each call returns at once (the writes are queued); none raises."""

    def fire_handled(self, job: Job, fire: datetime) -> None:
        """``fire`` of ``job`` was handled here (run, or skipped by Forbid)."""
        ...

    def retry_armed(self, job: Job, count: int, not_before: datetime, scheduled: datetime) -> None:
        """Retry ``count`` of ``job``'s fire at ``scheduled`` is due at ``not_before``
        (``count`` retries have started once it does)."""
        ...

    def retry_settled(self, job: Job, reason: str) -> None:
        """``job``'s pending retry will not run from this record (``launched``,
        ``superseded``, ``removed`` …)."""
        ...
