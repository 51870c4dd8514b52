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

LaunchKind = Literal["fire", "retry", "reboot", "manual", "task", "backfill"]
"""What starts a run: a scheduled fire (catch-ups included), a retry, an @reboot job at
start, a start on request, a workflow run starting one of its tasks (a first attempt
or a retry: the workflow run's own record says which), or one fire of a backfill."""


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


class BackfillRefused(Exception):
    """A backfill that cannot start, saying why; ``conflict`` when the job's state is the
    reason (a backfill going, a pause, a stop), else the request is wrong (the range)."""

    def __init__(self, message: str, *, conflict: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict


class Run(Protocol):
    """One run of a job, as the scheduler drives it (the process layer's job process,
    or a run adopted after a restart)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def start_ticks(self) -> int | None:
        """When the process started (``/proc/PID/stat`` field 22), where the run knows
        it without reading the file; None otherwise."""
        ...

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


class SlotsUnavailable(Exception):
    """The shared store of the cluster pools cannot answer now (says why, redacted)."""


class SharedSlots(Protocol):
    """The slots of ``scope: cluster`` pools in the cluster's shared store
    (:mod:`cronstable.cluster.pool_slots`): slot ``n`` of pool ``p`` is one record,
    held by one daemon at a time, renewed while held and freed by expiry (its ttl)
    when its holder dies."""

    @property
    def poll_interval(self) -> float:
        """Seconds between two tries of a pool waiting for a slot another node holds."""
        ...

    def on_unavailable(self) -> Literal["degrade", "fail-closed"]:
        """What a store that cannot answer means for a launch: start it with the
        node-local cap only (``degrade``), or let it wait (``fail-closed``)."""
        ...

    async def take(self, pool: str, slots: int) -> int | None:
        """Take one of the slots ``0 … slots-1`` of ``pool`` that this daemon does not
        hold yet; its number, or None when other daemons hold all the others.  Raises
        :class:`SlotsUnavailable` when the store cannot answer."""
        ...

    def wanted(self, pool: str, index: int) -> bool:
        """Whether another daemon waits for slot ``index`` of ``pool``, which this one
        holds (then it gives the slot back when its run ends rather than hand it on to
        its own queue)."""
        ...

    def give_back(self, pool: str, index: int) -> None:
        """Free slot ``index`` of ``pool`` (in the background; never raises); this
        daemon does not take it again for a moment, so a daemon waiting for it can."""
        ...
