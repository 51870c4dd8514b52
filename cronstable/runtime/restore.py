"""What a previous daemon's records put back into the scheduler, after a restart.

Durable state (:mod:`cronstable.state.keeper`) reads the records and decides
which still hold; this module does what each one asks of the scheduler:

* **a schedule resumed** from the last fire a previous daemon handled: fires
  missed since are handled as missed while the daemon was down (the latest
  within ``startingDeadlineSeconds`` runs once);
* **a pending retry re-armed** at its original time, with the back-off it had
  reached;
* **a run adopted** that outlived the previous daemon
  (:class:`~cronstable.runtime.adopted.AdoptedRun`): it counts for
  concurrencyPolicy meanwhile and ends with outcome ``unknown`` (no report, no
  retry).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from cronstable.ports import Launch
from cronstable.runtime.adopted import AdoptedRun, same_process
from cronstable.runtime.clock import Clock
from cronstable.runtime.retries import Retries
from cronstable.runtime.table import JobSlot, LiveRun


class RestoreHost(Protocol):
    """What a restore needs of the scheduler."""

    @property
    def clock(self) -> Clock: ...

    @property
    def retries(self) -> Retries: ...

    def slot(self, name: str) -> JobSlot | None:
        """The applied job ``name``'s slot; None for a job not applied."""
        ...

    def plan(self, slot: JobSlot, after: datetime) -> None:
        """Plan ``slot``'s next fire strictly after ``after``."""
        ...

    def wake(self) -> None: ...

    def watch(self, slot: JobSlot, live: LiveRun) -> None:
        """Watch ``live`` until it ends, as a run of ``slot``'s job."""
        ...


class Restore:
    """The scheduler's side of :class:`~cronstable.ports.Restorable`."""

    def __init__(self, host: RestoreHost) -> None:
        self.host = host

    def resume(self, name: str, last_fire: datetime) -> bool:
        """Plan ``name`` from ``last_fire``; False for a job not applied, disabled or
        @reboot."""
        host = self.host
        slot = host.slot(name)
        if slot is None or not slot.job.config.enabled or slot.job.schedule.is_reboot:
            return False
        slot.cursor = last_fire.astimezone(UTC)
        host.plan(slot, slot.cursor)
        # only a fire that was to start already was missed while down; a later one is
        # ordinary
        slot.resumed = slot.next_start is not None and slot.next_start < host.clock.now()
        host.wake()
        return True

    def rearm_retry(self, name: str, count: int, delay: float, scheduled: datetime) -> bool:
        """Re-arm the retry sequence a previous daemon left pending (``delay``: seconds
        until it is due, 0 at once).  False when the job is not applied or a sequence
        is going."""
        slot = self.host.slot(name)
        if slot is None:
            return False
        return self.host.retries.rearm(slot, count, delay, scheduled.astimezone(UTC))

    def adopt(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        scheduled: datetime,
        attempt: int,
        started_at: datetime,
    ) -> bool:
        """Watch process ``pid`` (the run of ``name`` that outlived the previous daemon)
        until it ends.  False for a job not applied, or when ``pid`` is no longer the
        process that started at ``start_ticks`` (it is left alone)."""
        slot = self.host.slot(name)
        if slot is None or not same_process(pid, start_ticks):
            return False
        run = AdoptedRun(
            name,
            pid,
            start_ticks,
            scheduled_time=scheduled,
            attempt=attempt,
            started_at=started_at,
            kill_timeout=float(slot.job.config.kill_timeout),
        )
        launch = Launch(slot.job, scheduled.astimezone(UTC), attempt, "fire")
        self.host.watch(slot, LiveRun(run, launch, None, adopted=started_at))
        return True
