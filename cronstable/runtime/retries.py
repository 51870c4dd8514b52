"""Retries: what a finished run leads to, and the life of each retry sequence.

* A scheduled fire starts a fresh sequence (:meth:`Retries.begin`); a failed
  run is retried after an exponential back-off capped at ``maximumDelay``
  (``maximumRetries: -1`` forever); success ends the sequence, and so does a
  swap that changes, disables or removes the job (:meth:`Retries.end`).
* Each finished run's report moments are decided here, since they depend on
  whether a retry follows (:meth:`Retries.finished`): a failure reports
  onFailure, plus onPermanentFailure when no retry follows (none configured,
  exhausted, the job changed or went away, or the daemon is stopping: a run
  ending during the drain is reported but arms no retry); a pending retry that a
  swap drops reports onPermanentFailure of the definition that failed, with
  fail reason ``retry abandoned: job removed|disabled|redefined``.
* A retry that comes due while this node cannot tell who leads waits (it looks
  again every :data:`UNKNOWN_RECHECK` seconds) rather than ends; then the
  cluster gate and concurrencyPolicy decide as for a fire.
* Durable state hears of every retry armed and settled (:class:`StateHooks`),
  and a restart re-arms a pending one (:meth:`Retries.rearm`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from cronstable.config.desired import Job
from cronstable.ports import FinishedRun, LaunchKind, Moment, StateHooks, report_moments
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.clock import Clock
from cronstable.runtime.concurrency import Admission
from cronstable.runtime.table import JobSlot, LiveRun, SchedulerStats

# the scheduler's own lines: a logging section quiets them by its name (docs/configuration.md)
logger = logging.getLogger("cronstable.runtime.scheduler")

UNKNOWN_RECHECK = 1.0
"""Seconds between two looks at the gate by a retry waiting for the leadership."""
ABANDONED = "retry abandoned: job {why}"
"""fail_reason of the permanent failure sent when a pending retry is dropped because
its job was removed, disabled or redefined."""


class RetryHost(Protocol):
    """What the retries need of the scheduler."""

    @property
    def clock(self) -> Clock: ...

    @property
    def stats(self) -> SchedulerStats: ...

    @property
    def state(self) -> StateHooks | None: ...

    @property
    def stopping(self) -> bool: ...

    def applied(self, slot: JobSlot) -> bool:
        """Whether ``slot`` is still the applied one of its job (no swap removed it)."""
        ...

    def gate_says(self, job: Job) -> str | None: ...

    def held_back(self, job: Job, scheduled: datetime, what: str) -> str | None: ...

    def admit(self, slot: JobSlot) -> Admission: ...

    def launch(
        self,
        slot: JobSlot,
        scheduled: datetime,
        attempt: int,
        retry: RetryState | None,
        waits: tuple[asyncio.Future[None], ...] = (),
        *,
        kind: LaunchKind = "fire",
    ) -> LiveRun: ...

    def report(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None: ...


class Retries:
    """The retry sequences of the scheduler's jobs (each kept in its :class:`JobSlot`)."""

    def __init__(self, host: RetryHost) -> None:
        self.host = host

    def begin(self, slot: JobSlot) -> None:
        """A scheduled fire of ``slot``'s job: the sequence in progress ends, a fresh one
        starts (when the job retries at all)."""
        self.end(slot)
        retry = slot.job.config.on_failure.retry
        if retry.maximum_retries != 0:
            slot.retry = RetryState.from_config(retry)

    @staticmethod
    def pending(slot: JobSlot) -> bool:
        """Whether a retry of ``slot``'s job is waiting to start."""
        return bool(slot.retry and slot.retry.task and not slot.retry.task.done())

    def finished(self, slot: JobSlot, live: LiveRun, record: FinishedRun) -> None:
        """``live`` ended as ``record`` (a success or a failure): report it, and arm its
        sequence's next retry when one follows."""
        host = self.host
        job = live.job
        if not record.failed:
            if slot.retry is live.retry:
                slot.retry = None
                slot.failed_run = None
            host.report(job, record, report_moments(record.outcome, retry_follows=False))
            return
        state = live.retry
        current = host.applied(slot) and slot.job is job
        if (
            state is None
            or state.cancelled
            or state is not slot.retry
            or not current
            or host.stopping
            or state.exhausted
        ):
            if state is not None and state is slot.retry:
                slot.retry = None
                slot.failed_run = None
            host.report(job, record, report_moments(record.outcome, retry_follows=False))
            return
        host.report(job, record, report_moments(record.outcome, retry_follows=True))
        slot.failed_run = (job, record)
        delay = state.next_delay()
        host.stats.retries += 1
        limit = "∞" if state.maximum_retries == -1 else str(state.maximum_retries)
        logger.info(
            "Job %s: retry %d of %s in %.1f s",
            job.name,
            state.count,
            limit,
            delay,
            extra={"job": job.name, "attempt": state.count + 1},
        )
        state.task = asyncio.create_task(self._after(slot, state, delay, live.scheduled_time))
        not_before = host.clock.now() + timedelta(seconds=delay)
        state.due, state.fire = not_before, live.scheduled_time
        hooks = host.state
        if hooks is not None:
            hooks.retry_armed(job, state.count, not_before, live.scheduled_time)

    def rearm(self, slot: JobSlot, count: int, delay: float, scheduled: datetime) -> bool:
        """Re-arm the sequence a previous daemon left pending: ``count`` retries had
        started, the next is due in ``delay`` seconds, for the fire at ``scheduled``.
        False when a sequence is going, the daemon is stopping, or the job's retry
        budget no longer covers ``count``."""
        if slot.retry is not None or self.host.stopping:
            return False
        state = RetryState.from_config(slot.job.config.on_failure.retry)
        if count < 1 or (state.maximum_retries != -1 and count > state.maximum_retries):
            return False  # the budget the record counted on is gone
        for _ in range(count):
            before = state.delay
            state.next_delay()
            if state.delay == before:  # at maximumDelay: the rest only counts
                state.count = count
                break
        slot.retry = state
        state.task = asyncio.create_task(self._after(slot, state, max(0.0, delay), scheduled))
        state.due = self.host.clock.now() + timedelta(seconds=max(0.0, delay))
        state.fire = scheduled
        return True

    async def _after(
        self, slot: JobSlot, state: RetryState, delay: float, scheduled: datetime
    ) -> None:
        host = self.host
        await host.clock.sleep(delay)

        def gone() -> bool:
            return state.cancelled or host.stopping or not host.applied(slot)

        # while this node cannot tell who leads (a restart, a store outage) the retry
        # waits rather than ends: the gate decides once the leadership is known
        while not gone() and host.gate_says(slot.job) == "leadership_unknown":
            await host.clock.sleep(UNKNOWN_RECHECK)
        if gone():
            return
        if host.held_back(slot.job, scheduled, f"retry {state.count}") is not None:
            self.settle(slot.job, "not_here")
            return
        room = host.admit(slot)
        if room.forbidden:
            logger.info(
                "Job %s: retry skipped, a run is still going (concurrencyPolicy Forbid)",
                slot.job.name,
                extra={"job": slot.job.name},
            )
            self.settle(slot.job, "forbid")
            return
        host.launch(slot, scheduled, state.count + 1, state, room.waits, kind="retry")

    def settle(self, job: Job, reason: str) -> None:
        """Tell durable state ``job``'s pending retry will not run from its record."""
        hooks = self.host.state
        if hooks is not None:
            hooks.retry_settled(job, reason)

    def end(self, slot: JobSlot, why: str | None = None, *, settle: bool = True) -> None:
        """End the slot's retry sequence.

        With ``why`` (the job was ``removed``, ``disabled`` or ``redefined``), a
        pending retry it drops is logged and settled: the failed run it followed
        reports onPermanentFailure of the definition that ran it.  A pending retry's
        durable record is settled too, unless ``settle`` is false (a graceful stop
        keeps it for the next start to re-arm).
        """
        state = slot.retry
        failed, slot.failed_run = slot.failed_run, None
        if state is None:
            return
        if settle and state.task is not None and not state.task.done():
            self.settle(slot.job, why or "superseded")
        if why is not None and state.task is not None and not state.task.done():
            logger.info(
                "Job %s: pending retry %d dropped: %s",
                slot.job.name,
                state.count,
                "the job was removed"
                if why == "removed"
                else "the job was disabled"
                if why == "disabled"
                else "it changed",
                extra={"job": slot.job.name, "attempt": state.count + 1},
            )
            if failed is not None:
                job, record = failed
                self.host.report(
                    job,
                    replace(record, fail_reason=ABANDONED.format(why=why)),
                    ("permanent_failure",),
                )
        state.cancel()
        slot.retry = None
