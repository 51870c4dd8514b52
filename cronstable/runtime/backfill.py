"""Backfill: every fire of a job's schedule in a range of the past, run one after another.

* The fires are the schedule's own in ``[start, end)`` (in the job's zone, DST rules
  and all), listed in order by :func:`fires_between`; more than ``limit`` of them
  (default :data:`DEFAULT_MAX`) refuses the backfill, so a mistyped range cannot
  start ten thousand runs.  ``end`` may not be in the future: a backfill stands for
  fires that are past.
* Each fire becomes one run (kind ``backfill``, attempt 1, no retry) whose scheduled
  time is that fire: its ``CRONSTABLE_SCHEDULED_TIME`` and run id are the fire's.
  A run starts once the previous one ended; under ``concurrencyPolicy`` Forbid or
  Replace it also waits until no other run of the job is going (a backfill never
  replaces a run), under Allow it may overlap the scheduled ones.  ``jitter`` never
  delays it, and like a start on request it runs on the node asked, whatever
  ``clusterPolicy`` says; the cluster slot and the other launch guards are asked as
  for any run.
* A paused job backfills only when asked with ``ignore_pause``; a pause asked while
  a backfill goes stops it before its next fire.  Cancelling a backfill run (``POST
  /jobs/{name}/cancel``) stops the backfill too, and so do a revision that removes
  the job and the daemon's stop.
* One backfill per job at a time.  Its progress (each run's outcome, the fire
  running now) is what ``/status`` and ``GET /jobs/{name}/backfill`` show; the last
  one stays shown once it ended.  It lives in this daemon's memory: a restart
  forgets a backfill that was going (ask again for the fires not done).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from cronstable.config.desired import Job
from cronstable.ports import BackfillRefused, BackfillView, utc_text
from cronstable.runtime.scheduler import Scheduler
from cronstable.runtime.table import JobSlot
from cronstable.tasks import TaskSet

# the scheduler's own lines: a logging section quiets them by its name
logger = logging.getLogger("cronstable.runtime.scheduler")

DEFAULT_MAX = 100
"""Most fires a backfill may hold unless asked for more."""
HIGHEST_MAX = 10_000
"""The largest ``max`` a backfill may ask for."""

State = Literal["running", "done", "stopped"]


def fires_between(
    job: Job, start: datetime, end: datetime, limit: int
) -> tuple[list[datetime], bool]:
    """The job's fires at or after ``start`` and before ``end`` (in order, in the job's
    zone), at most ``limit`` of them, and whether more follow."""
    fires: list[datetime] = []
    cursor = job.schedule.next_fire(start - timedelta(microseconds=1), job.timezone)
    while cursor is not None and cursor < end:
        if len(fires) == limit:
            return fires, True
        fires.append(cursor)
        cursor = job.schedule.next_fire(cursor, job.timezone)
    return fires, False


@dataclass(eq=False)
class _Backfill:
    job: str
    start: datetime
    end: datetime
    fires: tuple[datetime, ...]
    by: str | None
    ignore_pause: bool
    started_at: datetime
    state: State = "running"
    done: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    current: datetime | None = None
    finished_at: datetime | None = None
    stop_reason: str | None = None

    def view(self) -> BackfillView:
        return BackfillView(
            job=self.job,
            start=self.start,
            end=self.end,
            fires=self.fires,
            state=self.state,
            by=self.by,
            started_at=self.started_at,
            done=self.done,
            outcomes=dict(self.outcomes),
            current=self.current,
            finished_at=self.finished_at,
            stop_reason=self.stop_reason,
            ignore_pause=self.ignore_pause,
        )


class Backfills:
    """The backfills of one daemon's jobs (see the module docstring).  ``paused(name)``:
    whether a pause holds the job now."""

    def __init__(
        self, scheduler: Scheduler, *, paused: Callable[[str], bool] = lambda name: False
    ) -> None:
        self.scheduler = scheduler
        self.paused = paused
        self._last: dict[str, _Backfill] = {}
        """Each job's backfill going, or the last one (one per job: bounded by the jobs)."""
        self._tasks = TaskSet("backfills")

    def view(self, name: str) -> BackfillView | None:
        found = self._last.get(name)
        return found.view() if found is not None else None

    def plan(
        self, name: str, start: datetime, end: datetime, limit: int = DEFAULT_MAX
    ) -> list[datetime]:
        """The fires a backfill of ``name`` over ``[start, end)`` would run.  KeyError for
        an unknown job; :class:`BackfillRefused` for a range it refuses."""
        job = self.scheduler.jobs.get(name)
        if job is None:
            found = self.scheduler.job(name)
            if found is not None and found.workflow is not None:
                raise BackfillRefused(
                    f"{name!r} is a task: it runs only in its workflow {found.workflow!r}'s runs"
                )
            raise KeyError(name)  # a workflow backfills no more than an unknown job
        if job.schedule.is_reboot:
            raise BackfillRefused(f"job {name!r} runs @reboot: it has no fires to backfill")
        if not 1 <= limit <= HIGHEST_MAX:
            raise BackfillRefused(f"max must be from 1 to {HIGHEST_MAX}")
        if end <= start:
            raise BackfillRefused("to must be later than from")
        now = self.scheduler.clock.now()
        if end > now:
            raise BackfillRefused(
                f"to ({utc_text(end)}) is in the future: a backfill runs fires that are past"
            )
        fires, more = fires_between(job, start, end, limit)
        if more:
            raise BackfillRefused(
                f"the range holds more than {limit} fires of job {name!r}: narrow it, or raise max"
            )
        if not fires:
            raise BackfillRefused(f"job {name!r} has no fire in the range")
        return fires

    def start(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        limit: int = DEFAULT_MAX,
        by: str | None = None,
        ignore_pause: bool = False,
    ) -> BackfillView:
        """Start backfilling ``name``: its view.  KeyError; :class:`BackfillRefused`."""
        fires = self.plan(name, start, end, limit)
        going = self._last.get(name)
        if going is not None and going.state == "running":
            raise BackfillRefused(
                f"job {name!r} is being backfilled already ({going.done} of "
                f"{len(going.fires)} done)",
                conflict=True,
            )
        if self.paused(name) and not ignore_pause:
            raise BackfillRefused(
                f"job {name!r} is paused: resume it first, or ask with ignorePause",
                conflict=True,
            )
        if self.scheduler.stopping:
            raise BackfillRefused("the daemon is shutting down", conflict=True)
        backfill = _Backfill(
            name,
            start,
            end,
            tuple(fires),
            by,
            ignore_pause,
            self.scheduler.clock.now(),
        )
        for gone in [n for n, b in self._last.items() if b.state != "running"]:
            if not self.scheduler.has_job(gone):  # what removed jobs left
                del self._last[gone]
        self._last[name] = backfill
        logger.info(
            "Job %s: backfill of %d fire%s from %s to %s asked by %s",
            name,
            len(fires),
            "" if len(fires) == 1 else "s",
            utc_text(fires[0]),
            utc_text(fires[-1]),
            by or "anonymous",
            extra={"job": name},
        )
        self._tasks.start(self._drive(backfill), name=f"backfill {name}")
        return backfill.view()

    async def _drive(self, backfill: _Backfill) -> None:
        name = backfill.job
        for fire in backfill.fires:
            slot = await self._room(backfill)
            if slot is None:
                return
            backfill.current = fire
            live = self.scheduler.launch(slot, fire.astimezone(UTC), 1, None, kind="backfill")
            if live.task is not None:
                await asyncio.wait([live.task])
            outcome = live.outcome or "not_started"
            backfill.done += 1
            backfill.outcomes[outcome] = backfill.outcomes.get(outcome, 0) + 1
            backfill.current = None
            if outcome == "cancelled":
                self._stop(backfill, "a run of it was cancelled")
                return
        backfill.state = "done"
        backfill.finished_at = self.scheduler.clock.now()
        logger.info(
            "Job %s: backfill of %d fires done (%s)",
            name,
            len(backfill.fires),
            ", ".join(f"{count} {outcome}" for outcome, count in sorted(backfill.outcomes.items())),
            extra={"job": name},
        )

    async def _room(self, backfill: _Backfill) -> JobSlot | None:
        """The job's slot once the next run may start; None when the backfill stops."""
        name = backfill.job
        while True:
            slot = self.scheduler.slot(name)
            if slot is None:
                self._stop(backfill, "the job was removed")
                return None
            if self.scheduler.stopping:
                self._stop(backfill, "the daemon is stopping")
                return None
            if not backfill.ignore_pause and self.paused(name):
                self._stop(backfill, "the job was paused")
                return None
            if slot.job.config.concurrency_policy == "Allow":
                return slot
            going = [run.task for run in slot.running if run.task is not None]
            if not going:
                return slot
            await asyncio.wait(going)  # Forbid and Replace: one run of the job at a time

    def _stop(self, backfill: _Backfill, why: str) -> None:
        backfill.state = "stopped"
        backfill.stop_reason = why
        backfill.finished_at = self.scheduler.clock.now()
        logger.warning(
            "Job %s: backfill stopped after %d of %d fires: %s",
            backfill.job,
            backfill.done,
            len(backfill.fires),
            why,
            extra={"job": backfill.job},
        )

    async def close(self) -> None:
        """Stop following the backfills (the daemon stopped: no run starts any more)."""
        await self._tasks.cancel()
