"""The scheduler: a next-fire index over the job table, and the life of each fire.

* **Index.** Each job's next fire sits in a heap; the loop sleeps exactly until
  the soonest one (sub-second schedules included) or until woken.  No
  per-minute scan of every job.
* **Lateness.** A fire found due at most ``late_tolerance`` seconds late is
  ordinary scheduling delay and runs.  Later than that, the wall clock jumped
  (suspend, NTP step) or the daemon stalled: with ``startingDeadlineSeconds``
  set, the most recent missed fire within the deadline runs once (catch-up);
  every other missed fire is skipped, logged and counted.
* **Clock steps back.** A backward step of the wall clock (found against the
  monotonic clock, beyond ``late_tolerance``) re-plans as Vixie cron does:
  under :data:`BIG_STEP` (3 h), wildcard jobs (:attr:`Schedule.is_wildcard
  <cronstable.schedule.Schedule.is_wildcard>`) are planned anew from the new
  time, so their fires between the new and the old time run again, while
  fixed-time jobs keep their next fire and run again only once the clock passes
  the last fire they handled; a step of 3 h or more re-plans every job.
* **Swaps.** :meth:`Scheduler.replace_jobs` installs a new job table in one
  step.  Unchanged jobs keep their next fire, retry state and running runs.
  A new job, and a changed job whose timing (schedule, zone, enabled) changed,
  first fires strictly after the swap.  A changed job keeps its running runs
  and, when only its other settings changed, its place in the schedule (the
  new definition runs from the next fire on); its pending retries end, since
  they would retry a definition that is gone.  Removed jobs lose their pending
  retries and their running runs finish.  Each job remembers the last fire it
  handled, so a swap landing at a fire instant neither drops nor doubles that
  fire.
* **Runs.** Each run is launched, asked of the cluster gate and the launch
  guards, watched until it ends and told to every
  :class:`~cronstable.ports.RunListener`; fires that did not run (Forbid, found
  too late) are told to every :class:`~cronstable.ports.ReportListener` as a
  :class:`~cronstable.ports.MissedFire`.  A failed run's captured output is
  logged at WARNING.  Replaced and cancelled runs report nothing.
* Beside it, one job each: :mod:`~cronstable.runtime.concurrency` (may a new
  run start while others go: Allow, Forbid, Replace; with ``concurrencyScope:
  cluster`` a launch guard also holds the job's slot in the cluster's store and
  another node's Replace stops the runs here through
  :meth:`Scheduler.replace_runs`), :mod:`~cronstable.runtime.retries` (retry
  sequences and what each finished run reports) and
  :mod:`~cronstable.runtime.restore` (what a previous daemon's records put back).
* **@reboot** jobs run once when :meth:`Scheduler.run` starts, never again in
  that daemon's life (also not when a reload adds one).

Time comes from an injected :class:`~cronstable.runtime.clock.Clock` and runs
from an injected spawner, so the semantics are tested in milliseconds.

Two jobs stay in this module, on purpose: the schedule (heap, table swap, loop)
and the life of each run it starts (launch, gate and guards, watch, tell).  Both
own the same records (a job's slot holds its next fire *and* its runs going), and
every swap, fire and stop touches both at once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from cronstable.config.desired import Job
from cronstable.ports import (
    FAILURES,
    ClusterGate,
    FinishedRun,
    Launch,
    LaunchGuard,
    LaunchKind,
    MissedFire,
    Moment,
    ReportListener,
    Run,
    RunListener,
    RunOutcome,
    RunResult,
    RunStart,
    StateHooks,
    run_id,
    run_outcome,
)
from cronstable.runtime import concurrency
from cronstable.runtime.backoff import RetryState
from cronstable.runtime.clock import Clock
from cronstable.runtime.concurrency import Admission, runs_going
from cronstable.runtime.restore import Restore
from cronstable.runtime.retries import Retries
from cronstable.runtime.table import JobSlot, LiveRun, SchedulerStats
from cronstable.tasks import TaskSet

logger = logging.getLogger(__name__)

LATE_TOLERANCE = 5.0
"""Seconds a fire may be found late and still count as on time."""
BIG_STEP = 3 * 3600.0
"""A backward clock step at least this long (seconds) re-plans every job, fixed-time
ones too (Vixie cron's limit); a shorter one re-plans wildcard jobs only."""
EXPLAINED = frozenset({"reboot_ran", "slot_held", "slot_not_freed"})
"""Refusals whose guard logged why (naming what the reason alone cannot): the
scheduler's own line for them is DEBUG; any other refusal is a WARNING."""
MISSED_SCAN_LIMIT = 10_000
"""Most missed fires enumerated one by one after a jump (a per-second job after a
day-long suspend would otherwise take seconds to count)."""


Spawner = Callable[[Job, datetime, int], Run]
"""(job, scheduled time, attempt) → a run not yet started."""


class StartRefused(Exception):
    """A start on request that concurrencyPolicy (or a shutdown) refuses; says why."""


@dataclass(frozen=True, slots=True)
class SwapSummary:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]


def _timing(job: Job) -> tuple[str, str, bool]:
    return (job.schedule.text, str(job.timezone), job.config.enabled)


class Scheduler:
    """See the module docstring.  What the scheduler asks and tells is handed to it here
    and does not change afterwards: ``gate``, asked before every scheduled fire and retry
    (None lets all run); ``guards``, asked in this order before every run starts (the
    cluster slot, then durable state); ``hooks``, told of fires and retries to keep across
    restarts (None keeps nothing); ``run_listeners``, told of every run's start and end
    (run history, metrics, events, statsd, durable state); ``report_listeners``, told
    what to report."""

    def __init__(
        self,
        clock: Clock,
        spawner: Spawner,
        *,
        late_tolerance: float = LATE_TOLERANCE,
        gate: ClusterGate | None = None,
        guards: Sequence[LaunchGuard] = (),
        hooks: StateHooks | None = None,
        run_listeners: Sequence[RunListener] = (),
        report_listeners: Sequence[ReportListener] = (),
    ) -> None:
        self.clock = clock
        self.spawner = spawner
        self.late_tolerance = late_tolerance
        self.stats = SchedulerStats()
        self._slots: dict[str, JobSlot] = {}
        self._table: Mapping[str, Job] = {}
        """The jobs installed, in configuration order (``_slots`` may be in another)."""
        self._order = 0
        """The largest slot order given (a partial swap numbers on from it)."""
        self._names: list[str] | None = None
        """The table's names in order, made when a page is read (None: not since the swap)."""
        self._positions: dict[str, int] | None = None
        self._heap: list[tuple[datetime, int, int, str]] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._started = False
        self._tasks = TaskSet("the scheduler")
        """The runs' supervising tasks."""
        self._live: set[LiveRun] = set()
        """Every run not yet finished, also of jobs a swap removed."""
        self.run_listeners: Final = tuple(run_listeners)
        """Told of every run's start and end (metrics, run history)."""
        self.report_listeners: Final = tuple(report_listeners)
        """Told what to report: the moments of finished runs, missed fires (reporting)."""
        self.gate: Final = gate
        """Asked before every scheduled fire and retry; None lets all run."""
        self.guards: Final = tuple(guards)
        """Asked, in order, before every run starts (cluster slots, state)."""
        self.state: Final = hooks
        """Told of fires and retries to keep across restarts; None keeps nothing."""
        self.retries = Retries(self)
        self._restore = Restore(self)
        self._reboot_waiting: set[str] = set()
        """@reboot jobs held back while the leadership was unknown: they start once it is
        known and the gate lets them."""

    # ------------------------------------------------------------ the job table

    @property
    def started(self) -> bool:
        """Whether :meth:`run` has begun (the first revision's jobs are being scheduled)."""
        return self._started

    @property
    def jobs(self) -> Mapping[str, Job]:
        """The installed table, in configuration order."""
        return {name: self._slots[name].job for name in self._table}

    def has_job(self, name: str) -> bool:
        return name in self._slots

    def job_count(self) -> int:
        return len(self._slots)

    def page(self, start: int, limit: int) -> list[tuple[int, Job]]:
        """At most ``limit`` jobs from position ``start`` of the table (configuration
        order), each with its position: what a page of ``/status`` reads, in time of the
        page, not of the table."""
        names = self._names
        if names is None:  # once per swap, when a page is first asked for
            names = self._names = list(self._table)
        chosen = names[start : start + limit]
        return [(i, self._slots[name].job) for i, name in enumerate(chosen, start)]

    def position(self, name: str) -> int | None:
        """Where ``name`` is in the table (configuration order); None if it is not there."""
        positions = self._positions
        if positions is None:  # once per swap, when a page is first resumed
            positions = self._positions = {n: i for i, n in enumerate(self._table)}
        return positions.get(name)

    def job(self, name: str) -> Job | None:
        """The applied definition of ``name``; None for a job not (or no longer) applied."""
        slot = self._slots.get(name)
        return slot.job if slot is not None else None

    def next_fire(self, name: str) -> datetime | None:
        return self._slots[name].next_fire

    def running(self, name: str) -> int:
        slot = self._slots.get(name)
        return len(slot.running) if slot else 0

    def running_total(self) -> int:
        return sum(1 for task in self._tasks if not task.done())

    def last_result(self, name: str) -> RunResult | None:
        slot = self._slots.get(name)
        return slot.last_result if slot else None

    def retry_pending(self, name: str) -> bool:
        slot = self._slots.get(name)
        return slot is not None and Retries.pending(slot)

    # ------------------------------------------------------------ on request

    def start_now(self, name: str, when: datetime) -> str:
        """Start a run of ``name`` now, even when the job is disabled; its run id.

        The scheduled time is ``when``, the attempt 1, and a retry sequence in
        progress is left alone.  ``concurrencyPolicy`` holds: Forbid raises
        :class:`StartRefused` while a run is going, Replace stops it first.
        Raises KeyError for an unknown job.
        """
        slot = self._slots[name]
        if self._stopping:
            raise StartRefused("the daemon is shutting down")
        room = self.admit(slot)
        if room.forbidden:
            raise StartRefused(
                f"{runs_going(room.going)} still going and concurrencyPolicy is Forbid"
            )
        inst = self.launch(slot, when, 1, None, room.waits, kind="manual")
        return run_id(name, inst.scheduled_time, inst.attempt)

    def cancel_runs(self, name: str, run: str | None = None) -> list[str]:
        """Stop the running runs of ``name`` (only run id ``run`` when given); their ids.

        A cancelled run ends with outcome ``cancelled``, is not reported and ends
        the job's retry sequence.  Returns at once; the runs stop in the background.
        Raises KeyError for an unknown job.
        """
        slot = self._slots[name]
        stopped: list[str] = []
        for inst in slot.running:
            ident = run_id(name, inst.scheduled_time, inst.attempt)
            if inst.cancelled or inst.replaced or (run is not None and ident != run):
                continue
            inst.cancelled = True
            stopped.append(ident)
            inst.stopping = asyncio.ensure_future(inst.run.cancel())
        if stopped:
            self.retries.end(slot)
            logger.info("Job %s: cancelling %s", name, ", ".join(stopped), extra={"job": name})
        return stopped

    def replace_runs(self, name: str, why: str) -> list[str]:
        """Stop the running runs of ``name`` as replaced (another node's run takes over:
        concurrencyPolicy Replace with concurrencyScope cluster); their ids.

        A replaced run is no failure: it is not reported and arms no retry, and the
        job's retry sequence ends.  Returns at once; the runs stop in the background.
        An unknown job has none.
        """
        slot = self._slots.get(name)
        if slot is None:
            return []
        active = [inst for inst in slot.running if not inst.replaced and not inst.cancelled]
        if not active:
            return []
        self.retries.end(slot)
        concurrency.replace(slot, active, why)
        self.stats.replaced += len(active)
        return [run_id(name, inst.scheduled_time, inst.attempt) for inst in active]

    def replace_jobs(
        self, jobs: Mapping[str, Job], *, only: Collection[str] | None = None
    ) -> SwapSummary:
        """Install a new job table in one step (see the module docstring).

        ``only``: the names that may differ from the table installed (added, changed or
        removed); every other job of ``jobs`` is the very one installed.  The swap then
        costs those (a one-file edit among 100,000 jobs), and ``unchanged`` is not listed.
        """
        now = self.clock.now()
        old = self._slots
        added: list[str] = []
        changed: list[str] = []
        unchanged: list[str] = []
        gone: list[JobSlot] = []
        if only is None or not old:
            slots: dict[str, JobSlot] = {}
            for order, (name, job) in enumerate(jobs.items()):
                slots[name] = self._swap(old.get(name), job, order, now, added, changed, unchanged)
            removed = [name for name in old if name not in jobs]
            gone = [old[name] for name in removed]
        else:
            slots = old  # changed in place: nothing runs between here and the end of the swap
            removed = []
            for name in only:
                new = jobs.get(name)
                if new is None:
                    if name in slots:
                        gone.append(slots.pop(name))
                        removed.append(name)
                    continue
                self._order += 1
                slots[name] = self._swap(slots.get(name), new, self._order, now, added, changed, [])
        for slot in gone:
            slot.generation += 1
            slot.next_fire = None
            self.retries.end(slot, "removed")
        self._slots = slots
        self._table = jobs
        self._names = None
        self._positions = None
        self._order = max(self._order, len(jobs))
        self._wake.set()
        return SwapSummary(tuple(added), tuple(removed), tuple(changed), tuple(unchanged))

    def _swap(
        self,
        slot: JobSlot | None,
        job: Job,
        order: int,
        now: datetime,
        added: list[str],
        changed: list[str],
        unchanged: list[str],
    ) -> JobSlot:
        """The slot of ``job`` in the new table (see :meth:`replace_jobs`)."""
        if slot is None:
            slot = JobSlot(job=job, order=order, cursor=now)
            self.plan(slot, now)
            added.append(job.name)
        elif slot.job.digest == job.digest:
            slot.order = order
            unchanged.append(job.name)
        else:
            retimed = _timing(slot.job) != _timing(job)
            disabled = not job.config.enabled
            self.retries.end(slot, "disabled" if disabled else "redefined")
            slot.job = job
            slot.order = order
            if retimed:
                # a new fire sequence: none of it from before the swap; the cursor
                # is later than now only after a backward clock step, when a
                # fixed-time fire already handled must not run again
                slot.cursor = max(slot.cursor, now)
                self.plan(slot, slot.cursor)
            changed.append(job.name)
        return slot

    def plan(self, slot: JobSlot, after: datetime) -> None:
        """Compute and index the slot's next fire strictly after ``after``."""
        slot.generation += 1
        job = slot.job
        slot.next_fire = None
        if not job.config.enabled or job.schedule.is_reboot:
            return
        fire = self._next(job, after)
        slot.next_fire = fire
        if fire is not None:
            heapq.heappush(self._heap, (fire, slot.order, slot.generation, job.name))

    @staticmethod
    def _next(job: Job, after: datetime) -> datetime | None:
        """The job's next fire as a UTC instant.

        Fires are compared and stored in UTC only: two aware datetimes with the
        same zone compare by wall time, so the two 01:30s of a fall-back night
        would be equal.
        """
        fire = job.schedule.next_fire(after, job.timezone)
        return None if fire is None else fire.astimezone(UTC)

    # ------------------------------------------------------------ the loop

    def wake(self) -> None:
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (no new run starts but a manual one)."""
        return self._stopping

    def stop(self) -> None:
        """Stop spawning; :meth:`run` then cancels pending retries and waits for running jobs."""
        self._stopping = True
        self._wake.set()

    async def cancel_running(self) -> None:
        """Stop every running run now (a second shutdown signal), removed jobs' runs included."""
        await asyncio.gather(*(inst.run.cancel() for inst in self._live), return_exceptions=True)

    async def run(self) -> None:
        """Schedule until :meth:`stop`, then drain."""
        self._started = True
        now = self.clock.now()
        for slot in list(self._slots.values()):
            if slot.job.config.enabled and slot.job.schedule.is_reboot:
                if slot.retry is not None:
                    continue  # a retry re-armed from durable state goes on with this boot's run
                self._fire(slot, now)
        last_wall, last_mono = now, self.clock.monotonic()
        while not self._stopping:
            self._wake.clear()
            now, mono = self.clock.now(), self.clock.monotonic()
            drift = (now - last_wall).total_seconds() - (mono - last_mono)
            if drift < -self.late_tolerance:
                self.stats.clock_jumps += 1
                self._stepped_back(now, -drift)
            elif drift > self.late_tolerance:
                self.stats.clock_jumps += 1
                logger.warning(
                    "The wall clock moved %+.1f s against the monotonic clock "
                    "(suspend, NTP step or a stalled daemon)",
                    drift,
                )
            last_wall, last_mono = now, mono
            if self._reboot_waiting:
                self._reboot_when_known(now)
            self._service(now)
            await self.clock.sleep_until(self._soonest(), self._wake)
        if self.gate is not None:
            # before the drain, which may last long: another node takes over meanwhile
            try:
                await self.gate.release()
            except Exception:
                logger.exception("Releasing the cluster leadership failed")
        await self._drain()

    def _reboot_when_known(self, now: datetime) -> None:
        """Start the @reboot jobs that waited for the leadership, once the gate decides."""
        for name in sorted(self._reboot_waiting):
            slot = self._slots.get(name)
            if slot is None or not slot.job.config.enabled or not slot.job.schedule.is_reboot:
                self._reboot_waiting.discard(name)
                continue
            reason = self.gate_says(slot.job)
            if reason == "leadership_unknown":
                continue
            self._reboot_waiting.discard(name)
            if reason is None:
                self._fire(slot, now)

    def _stepped_back(self, now: datetime, step: float) -> None:
        """Re-plan after the wall clock stepped back ``step`` seconds (Vixie cron's rule)."""
        every = step >= BIG_STEP
        # from the current whole second: a fire in it (the one the loop woke up for,
        # in the old time) runs, as Vixie cron runs the current minute's wildcard jobs
        start = now.replace(microsecond=0) - timedelta(microseconds=1)
        count = 0
        for slot in self._slots.values():
            if every or slot.job.schedule.is_wildcard:
                slot.cursor = start
                self.plan(slot, start)
                count += 1
        self.stats.replanned += count
        logger.warning(
            "The wall clock stepped back %.1f s against the monotonic clock (NTP step?): "
            "%s planned from the new time%s",
            step,
            f"all {count} job{'' if count == 1 else 's'}"
            if every
            else f"{count} wildcard job{'' if count == 1 else 's'}",
            "" if every else "; fixed-time jobs run again once the clock passes their last fire",
        )

    def _soonest(self) -> datetime | None:
        while self._heap:
            fire, _, generation, name = self._heap[0]
            slot = self._slots.get(name)
            if slot is not None and slot.generation == generation:
                return fire
            heapq.heappop(self._heap)
        return None

    def _service(self, now: datetime) -> None:
        while self._heap and self._heap[0][0] <= now:
            fire, _, generation, name = heapq.heappop(self._heap)
            slot = self._slots.get(name)
            if slot is None or slot.generation != generation:
                continue
            self._due(slot, fire, now)

    def _due(self, slot: JobSlot, fire: datetime, now: datetime) -> None:
        job = slot.job
        resumed, slot.resumed = slot.resumed, False
        # after a restart, every fire before now was missed while the daemon was down:
        # none of them is ordinary scheduling delay
        on_time = now if resumed else now - timedelta(seconds=self.late_tolerance)
        if fire >= on_time:
            slot.cursor = fire
            self._fire(slot, fire)
            self.plan(slot, fire)
            return
        # Found too late: walk the missed fires up to the on-time window.
        deadline = job.config.starting_deadline_seconds
        window = now - timedelta(seconds=deadline) if deadline is not None else None
        catch_up: datetime | None = None
        last_missed = fire
        missed = 0
        cursor: datetime | None = fire
        while cursor is not None and cursor < on_time and missed < MISSED_SCAN_LIMIT:
            if window is not None and cursor >= window:
                catch_up = cursor
            last_missed = cursor
            missed += 1
            cursor = self._next(job, cursor)
        counted = catch_up is not None  # the catch-up fire is among the `missed` counted
        capped = cursor is not None and cursor < on_time
        if capped:
            # too many to enumerate: resume at the on-time window; in the deadline
            # window take its first fire rather than walking to its last
            cursor = self._next(job, on_time - timedelta(microseconds=1))
            if window is not None and catch_up is None:
                first = self._next(job, window - timedelta(microseconds=1))
                catch_up = first if first is not None and first < on_time else None
        if counted:
            missed -= 1  # it runs after all
        self.stats.missed += missed
        if missed:
            self._missed(
                job,
                MissedFire(
                    job.name,
                    fire,
                    "daemon_down"
                    if resumed
                    else "deadline"
                    if deadline is not None
                    else "clock_jump",
                    missed,
                    last_missed,
                ),
            )
            if catch_up is not None:
                advice = "; running the latest within startingDeadlineSeconds once"
            elif deadline is None:
                advice = "; set startingDeadlineSeconds to catch up"
            else:
                advice = ""
            logger.warning(
                "Job %s missed %s%d fire%s from %s to %s (%s)%s",
                job.name,
                "at least " if capped else "",
                missed,
                "" if missed == 1 else "s",
                fire.isoformat(),
                last_missed.isoformat(),
                "while the daemon was down"
                if resumed
                else f"found {(now - fire).total_seconds():.1f} s late",
                advice,
                extra={"job": job.name, "missed": missed},
            )
        slot.cursor = last_missed
        if catch_up is not None:
            self.stats.catch_ups += 1
            self._fire(slot, catch_up)
        elif resumed and self.state is not None:
            self.state.fire_handled(job, last_missed)  # not reported missed again
        # fires inside the on-time window, if any, run as usual
        while cursor is not None and cursor <= now:
            slot.cursor = cursor
            self._fire(slot, cursor)
            cursor = self._next(job, cursor)
        # every fire before the on-time window has been handled (run or missed)
        self.plan(slot, max(slot.cursor, on_time - timedelta(microseconds=1)))

    # ------------------------------------------------------------ after a restart

    def resume(self, name: str, last_fire: datetime) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.resume`."""
        return self._restore.resume(name, last_fire)

    def rearm_retry(self, name: str, count: int, delay: float, scheduled: datetime) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.rearm_retry`."""
        return self._restore.rearm_retry(name, count, delay, scheduled)

    def adopt(
        self,
        name: str,
        pid: int,
        start_ticks: int,
        scheduled: datetime,
        attempt: int,
        started_at: datetime,
    ) -> bool:
        """See :meth:`cronstable.runtime.restore.Restore.adopt`."""
        return self._restore.adopt(name, pid, start_ticks, scheduled, attempt, started_at)

    # ------------------------------------------------------------ runs

    def slot(self, name: str) -> JobSlot | None:
        """The applied job ``name``'s slot; None for a job not applied."""
        return self._slots.get(name)

    def applied(self, slot: JobSlot) -> bool:
        """Whether ``slot`` is still the applied one of its job (no swap removed it)."""
        return self._slots.get(slot.job.name) is slot

    def gate_says(self, job: Job) -> str | None:
        """The cluster gate's answer for ``job`` now (None: it may start)."""
        if self.gate is None:
            return None
        try:
            return self.gate.allows(job)
        except Exception:  # a gate that cannot answer fails closed
            logger.exception("Job %s: the cluster gate failed; please report this", job.name)
            return "gate_error"

    def held_back(self, job: Job, scheduled: datetime, what: str) -> str | None:
        """Why the cluster gate refuses ``job`` here now (logged at DEBUG, counted); None
        when it may start."""
        reason = self.gate_says(job)
        if reason is None:
            return None
        self._count_skip(reason)
        logger.debug(
            "Job %s: %s at %s not started here (clusterPolicy %s: %s)",
            job.name,
            what,
            scheduled.isoformat(),
            job.config.cluster_policy,
            reason,
            extra={"job": job.name, "scheduled_time": scheduled.isoformat()},
        )
        return reason

    def _count_skip(self, reason: str) -> None:
        self.stats.skipped_cluster[reason] = self.stats.skipped_cluster.get(reason, 0) + 1

    def _fire(self, slot: JobSlot, scheduled: datetime) -> None:
        """A scheduled fire (or catch-up) of ``slot``'s job, or an @reboot job's one run."""
        job = slot.job
        reboot = job.schedule.is_reboot
        held = self.held_back(job, scheduled, "fire")
        if held is not None:
            if reboot and held == "leadership_unknown":
                self._reboot_waiting.add(job.name)  # runs once the leadership is known
            return
        self._reboot_waiting.discard(job.name)
        if self.state is not None:
            self.state.fire_handled(job, scheduled)
        room = self.admit(slot)
        if room.forbidden:
            self.stats.skipped_forbid += 1
            logger.info(
                "Job %s: fire at %s skipped, %s still going (concurrencyPolicy Forbid)",
                job.name,
                scheduled.isoformat(),
                runs_going(room.going),
                extra={"job": job.name, "scheduled_time": scheduled.isoformat()},
            )
            self._missed(job, MissedFire(job.name, scheduled, "forbid"))
            return
        self.retries.begin(slot)
        self.stats.fires += 1
        self.launch(slot, scheduled, 1, slot.retry, room.waits, kind="reboot" if reboot else "fire")

    def admit(self, slot: JobSlot) -> Admission:
        """concurrencyPolicy's answer for a new run of ``slot``'s job (counted)."""
        room = concurrency.admit(slot)
        if room.replaced:
            self.stats.replaced += room.replaced
        return room

    def launch(
        self,
        slot: JobSlot,
        scheduled: datetime,
        attempt: int,
        retry: RetryState | None,
        waits: tuple[asyncio.Future[None], ...] = (),
        *,
        kind: LaunchKind = "fire",
    ) -> LiveRun:
        launch = Launch(slot.job, scheduled, attempt, kind)
        live = LiveRun(self.spawner(slot.job, scheduled, attempt), launch, retry)
        self.watch(slot, live, waits)
        return live

    def watch(
        self, slot: JobSlot, live: LiveRun, waits: tuple[asyncio.Future[None], ...] = ()
    ) -> None:
        """Watch ``live`` (once ``waits`` are done) until it ends, as a run of ``slot``'s job."""
        slot.running.append(live)
        self._live.add(live)
        live.task = asyncio.create_task(self._supervise(slot, live, waits))
        self._tasks.add(live.task)

    async def _supervise(
        self, slot: JobSlot, inst: LiveRun, waits: tuple[asyncio.Future[None], ...]
    ) -> None:
        name = slot.job.name
        launch = inst.launch
        scheduled, attempt = launch.scheduled, launch.attempt
        fields = {"job": name, "scheduled_time": scheduled.isoformat(), "attempt": attempt}
        admitted: list[LaunchGuard] = []
        try:
            if waits:
                await asyncio.gather(*waits, return_exceptions=True)
                # while the old run was dying, this one may have been replaced in turn,
                # the daemon told to stop, or the job removed: then it never starts
                if inst.replaced or self._stopping or self._slots.get(name) is not slot:
                    return
            if inst.adopted is None:
                for guard in self.guards:
                    refused = await guard.admit(launch)
                    if refused is not None:
                        self._refused(launch, refused)
                        return
                    admitted.append(guard)
                if inst.replaced or inst.cancelled or (self._stopping and launch.kind != "manual"):
                    return  # stopped while the guards were asked
            await inst.run.start()
            start = RunStart(
                id=launch.id,
                job=name,
                scheduled_time=scheduled,
                attempt=attempt,
                started_at=inst.adopted or self.clock.now(),
                pid=inst.run.pid,
                manual=launch.kind == "manual",
            )
            self._tell("run_started", start)
            logger.info(
                "Job %s %s: scheduled %s, attempt %d, pid %s",
                name,
                "adopted (it outlived the previous daemon)" if inst.adopted else "started",
                scheduled.isoformat(),
                attempt,
                inst.run.pid,
                extra=fields | {"pid": inst.run.pid},
            )
            result = await inst.run.wait()
        except Exception:
            # the process layer reports job failures as results; this is a bug, not a job failure
            logger.exception("Job %s: the run failed unexpectedly; please report this", name)
            return
        finally:
            self._live.discard(inst)
            if inst in slot.running:
                slot.running.remove(inst)
            for guard in admitted:
                try:
                    guard.release(launch)
                except Exception:
                    logger.exception("A launch guard failed to release %s", launch.id)
        slot.last_result = result
        outcome: RunOutcome = (
            "unknown"
            if inst.adopted is not None
            else "cancelled"
            if inst.cancelled
            else run_outcome(result, replaced=inst.replaced)
        )
        self._tell("run_finished", start, result, outcome)
        logger.info(
            "Job %s finished: %s%s, exit code %s, %.3f s, scheduled %s, attempt %d",
            name,
            outcome,
            f" ({result.fail_reason})" if outcome in FAILURES else "",
            result.returncode,
            result.duration,
            scheduled.isoformat(),
            attempt,
            extra=fields
            | {
                "outcome": outcome,
                "exit_code": result.returncode,
                "duration": round(result.duration, 6),
                "fail_reason": result.fail_reason,
            },
        )
        if outcome in ("replaced", "cancelled", "unknown"):
            return  # not reported, no retry
        record = FinishedRun.of(start, result, outcome)
        if record.failed:
            _log_output(record)
        self.retries.finished(slot, inst, record)

    def _tell(self, event: str, *args: object) -> None:
        for listener in self.run_listeners:
            try:
                getattr(listener, event)(*args)
            except Exception:
                logger.exception("A run listener failed (%s)", event)

    def _refused(self, launch: Launch, reason: str) -> None:
        """A launch guard refused ``launch`` (logged, counted)."""
        self._count_skip(reason)
        logger.log(
            logging.DEBUG if reason in EXPLAINED else logging.WARNING,
            "Job %s: %s at %s not started (%s)",
            launch.job.name,
            launch.kind,
            launch.scheduled.isoformat(),
            reason,
            extra={"job": launch.job.name, "scheduled_time": launch.scheduled.isoformat()},
        )

    def report(self, job: Job, record: FinishedRun, moments: tuple[Moment, ...]) -> None:
        if not moments:
            return
        for listener in self.report_listeners:
            try:
                listener.run_reported(job, record, moments)
            except Exception:
                logger.exception("A report listener failed for job %s", job.name)

    def _missed(self, job: Job, missed: MissedFire) -> None:
        for listener in self.report_listeners:
            try:
                listener.fire_missed(job, missed)
            except Exception:
                logger.exception("A report listener failed for job %s", job.name)

    async def _drain(self) -> None:
        for slot in self._slots.values():
            self.retries.end(slot, settle=False)
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            logger.info(
                "Waiting for %d running job%s", len(pending), "" if len(pending) == 1 else "s"
            )
            await asyncio.gather(*pending, return_exceptions=True)


def _log_output(record: FinishedRun) -> None:
    """A failed run's captured output, at WARNING (head and tail within saveLimit, with
    the discarded-lines marker, as captured)."""
    for stream, text in (("stdout", record.stdout), ("stderr", record.stderr)):
        if text:
            logger.warning(
                "Job %s failed (%s); its %s:\n%s",
                record.start.job,
                record.fail_reason,
                stream,
                text.rstrip("\n"),
                extra={"job": record.start.job, "run_id": record.start.id, "stream": stream},
            )
